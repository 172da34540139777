"""`Connections.apply` hands a handler its connection's effects in runs (`AppliesRuns`).

A run is a stretch of effects for one connection that the server has no part in: it ends where
the connection changes and before a `Block`, `Unblock` or `CloseConnection`, which go alone
after the server's part. The handler finds the end (`apply_run` returns it); the server goes
on from there. A handler without `apply_run` gets `apply` per effect, in order.
"""

from __future__ import annotations

from collections.abc import Sequence

from ringmq.adapters.handler import SERVER_PART
from ringmq.core.effects import Block, Deliver, Effect, Unblock
from ringmq.core.message import Message
from ringmq.server.connections import Connections
from ringmq.server.handlers import HandlerConnection


class _Clock:
    def monotonic(self) -> float:
        return 0.0


class _Recorder:
    """A handler that records what the server hands it (`runs`: None without `apply_run`)."""

    def __init__(self) -> None:
        self.applied: list[Effect] = []
        self.runs: list[list[Effect]] = []

    def apply(self, effect: Effect) -> None:
        self.applied.append(effect)


class _RunRecorder(_Recorder):
    def __init__(self, conn_id: int) -> None:
        super().__init__()
        self.conn_id = conn_id

    def apply_run(self, effects: Sequence[Effect], start: int) -> int:
        stop = start
        while stop < len(effects):
            e = effects[stop]
            if e.conn_id != self.conn_id or type(e) in SERVER_PART:
                break
            stop += 1
        self.runs.append(list(effects[start:stop]))
        return stop


def _deliver(conn_id: int, n: int) -> Deliver:
    return Deliver(conn_id, 1, "c", n, False, Message("", "q", b"", b"%d" % n))


def _connection(conn_id: int, handler: _Recorder) -> HandlerConnection:
    c = HandlerConnection(None, conn_id, "amqp091", tls=False)  # type: ignore[arg-type]
    c.handler = handler  # type: ignore[assignment]
    return c


def test_a_handler_with_apply_run_gets_its_effects_in_runs_split_at_server_effects() -> None:
    runs, single = _RunRecorder(1), _Recorder()
    one, two = _connection(1, runs), _connection(2, single)
    conns = Connections(_Clock(), None, {1: one, 2: two})  # type: ignore[arg-type]
    d = [_deliver(1, n) for n in range(4)]
    e = [_deliver(2, n) for n in range(2)]
    block = Block(1, "low on memory")
    unblock = Unblock(1)
    conns.apply([d[0], d[1], block, d[2], e[0], e[1], unblock, d[3]])
    assert runs.runs == [[d[0], d[1]], [d[2]], [d[3]]]
    assert runs.applied == [block, unblock]  # alone, after the server's part
    assert one.blocked_reason is None  # blocked, then unblocked by the server
    assert single.applied == [e[0], e[1]]  # no `apply_run`: one `apply` per effect
    assert conns.dirty == {one, two}


def test_effects_for_a_connection_gone_or_closing_are_dropped() -> None:
    runs = _RunRecorder(1)
    one = _connection(1, runs)
    one.closing = True
    conns = Connections(_Clock(), None, {1: one})  # type: ignore[arg-type]
    conns.apply([_deliver(1, 0), _deliver(9, 1), _deliver(1, 2)])
    assert runs.runs == []
    assert runs.applied == []
