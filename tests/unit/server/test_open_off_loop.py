"""Opening the core (a journal replay) leaves the event loop free for its other tasks.

A cluster node promoted to leader opens its copy of the leader's store inside
`BrokerServer.start`, on the loop that also renews its etcd lease: a replay on the loop held
the renewals past the fence (docs/clustering.md, "Fault tests"). Here the opener waits until a
task on the loop has run; on the loop itself it could not, and the order of events shows it.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from ringmq.core.effects import Effect
from ringmq.node import open_core
from ringmq.server.runtime import BrokerServer, Core, Emit, ServerOptions

_BOUND_S = 10.0
"""Only a bound against hanging: the loop's task runs at once when the loop is free."""


def test_the_loop_keeps_running_while_the_core_opens(tmp_path: Path) -> None:
    options = ServerOptions(host="127.0.0.1", amqp_port=None, http_port=None, data_dir=tmp_path)
    real = open_core(options)
    order: list[str] = []
    ticked = threading.Event()

    def slow_open(emit: Emit, now_ms: int) -> Core:
        order.append("open started")
        ticked.wait(_BOUND_S)  # a slow replay, until the loop's task ran (or the bound)
        order.append("open done")
        return real(emit, now_ms)

    async def main() -> None:
        async def keeper() -> None:
            # stands for the lease keeper: a periodic task that must tick while the core opens
            for _ in range(int(_BOUND_S / 0.005)):
                await asyncio.sleep(0.005)
                if order:
                    order.append("loop ticked")
                    ticked.set()
                    return

        server = BrokerServer(options, slow_open)
        task = asyncio.create_task(keeper())
        await server.start()
        try:
            await asyncio.wait_for(task, _BOUND_S)
        finally:
            await server.stop()

    asyncio.run(main())
    assert order == ["open started", "loop ticked", "open done"]


def test_effects_emitted_while_the_core_opens_reach_the_server_after(tmp_path: Path) -> None:
    options = ServerOptions(host="127.0.0.1", amqp_port=None, http_port=None, data_dir=tmp_path)
    real = open_core(options)
    emitted: list[list[Effect]] = []

    def open_emitting(emit: Emit, now_ms: int) -> Core:
        emit([])  # on the opener's thread, before the server's parts exist
        return real(emit, now_ms)

    async def main() -> None:
        server = BrokerServer(options, open_emitting)
        original = server.emit

        def spy(effects: list[Effect]) -> None:
            emitted.append(effects)
            original(effects)

        server.emit = spy  # type: ignore[method-assign]
        await server.start()
        await server.stop()

    asyncio.run(main())
    assert emitted == [[]]
