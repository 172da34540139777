"""Artemis' delayed redelivery across a restart, on the core's API: the wait of a persistent
message on a durable queue is journaled, and recovery puts the message back in the schedule
with the due time it had, its delivery count, redelivered flag and expiry time; when due it
goes to the head of the queue, as a scheduled message (a full ring deletes it: the seed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ringmq.core.config import BrokerConfig
from ringmq.core.effects import Deliver, Effect
from ringmq.core.session import SettleKind
from ringmq.storage import FileStore, MemoryStore
from tests.unit.core.corekit import Core, bodies

DELAY = 1_000
RESTARTS = [("memory", True), ("file", True), ("file", False)]


def _kit(kind: str, tmp_path: Path, settings: dict[str, Any]) -> Core:
    config = BrokerConfig(name_seed=7, address_settings={"slow.#": settings})
    return Core(config, MemoryStore() if kind == "memory" else FileStore.open(tmp_path / "data"))


def _restart(kit: Core, kind: str, tmp_path: Path, *, clean: bool) -> None:
    if kind == "memory":
        kit.restart(kit.store)  # MemoryStore.recover() returns the live contents
        return
    if clean:
        kit.broker.close()
    else:
        kit.store.sync()
        kit.store.abandon()  # killed after the sync
    kit.restart(FileStore.open(tmp_path / "data"))


def _delivered(effects: list[Effect]) -> list[Deliver]:
    return [e for e in effects if isinstance(e, Deliver)]


def _scheduled(kit: Core, name: str) -> list[tuple[bytes, int]]:
    return [(s.message.body, s.due_ms) for s in kit.queue(name).list_scheduled()]


@pytest.mark.parametrize(("kind", "clean"), RESTARTS)
def test_a_delayed_redelivery_waits_out_its_delay_after_a_restart(
    tmp_path: Path, kind: str, clean: bool
) -> None:
    kit = _kit(kind, tmp_path, {"redelivery-delay": DELAY})
    s = kit.open()
    kit.declare(s, "slow.q", durable=True)
    kit.publish(s, "slow.q", b"m", persistent=True)
    assert bodies(kit.consume(s, "slow.q", "c")) == [b"m"]
    kit.settle(s, 1, SettleKind.REQUEUE)  # a failed delivery: it waits DELAY ms
    due = kit.now + DELAY
    assert _scheduled(kit, "slow.q") == [(b"m", due)]
    kit.tick(400)
    _restart(kit, kind, tmp_path, clean=clean)

    assert _scheduled(kit, "slow.q") == [(b"m", due)]  # the same due time: 600 ms left
    assert kit.ready("slow.q") == []
    assert bodies(kit.tick(599)) == []
    assert kit.ready("slow.q") == []
    kit.tick(1)
    # back when due, flagged redelivered, with the delivery it had before the restart
    back = [
        (d.message.body, d.redelivered, d.delivery_count) for d in kit.queue("slow.q").ready_view()
    ]
    assert back == [(b"m", True, 1)]
    s = kit.open()
    out = _delivered(kit.consume(s, "slow.q", "c"))
    assert [(d.message.body, d.redelivered) for d in out] == [(b"m", True)]

    # Handed out again, the wait is over: a restart finds it ready at once, not waiting.
    _restart(kit, kind, tmp_path, clean=clean)
    assert _scheduled(kit, "slow.q") == []
    assert kit.ready("slow.q") == [b"m"]


@pytest.mark.parametrize(("kind", "clean"), RESTARTS)
@pytest.mark.parametrize(("ring", "kept"), [(2, [b"B", b"C"]), (3, [b"A", b"B", b"C"])])
def test_a_delayed_redelivery_returns_to_the_head_of_a_ring_after_a_restart(
    tmp_path: Path, kind: str, clean: bool, ring: int, kept: list[bytes]
) -> None:
    # The seed's rule for scheduled messages: when due it goes to the head; into a full ring
    # it is itself deleted.
    kit = _kit(kind, tmp_path, {"redelivery-delay": DELAY, "default-ring-size": ring})
    s = kit.open()
    kit.declare(s, "slow.ring", durable=True)
    kit.publish(s, "slow.ring", b"A", persistent=True)
    kit.consume(s, "slow.ring", "c")
    kit.cancel(s, "c")
    kit.settle(s, 1, SettleKind.REQUEUE)
    kit.publish(s, "slow.ring", b"B", persistent=True)
    kit.publish(s, "slow.ring", b"C", persistent=True)
    _restart(kit, kind, tmp_path, clean=clean)
    assert kit.ready("slow.ring") == [b"B", b"C"]
    assert [body for body, _ in _scheduled(kit, "slow.ring")] == [b"A"]
    kit.tick(DELAY)
    assert kit.ready("slow.ring") == kept


@pytest.mark.parametrize(("kind", "clean"), RESTARTS)
def test_a_delayed_redelivery_keeps_its_expiry_time_across_a_restart(
    tmp_path: Path, kind: str, clean: bool
) -> None:
    kit = _kit(kind, tmp_path, {"redelivery-delay": DELAY})
    s = kit.open()
    kit.declare(s, "slow.ttl", {"x-message-ttl": 3 * DELAY}, durable=True)
    kit.publish(s, "slow.ttl", b"m", persistent=True)
    kit.consume(s, "slow.ttl", "c")
    kit.cancel(s, "c")
    kit.settle(s, 1, SettleKind.REQUEUE)
    kit.tick(DELAY // 2)
    _restart(kit, kind, tmp_path, clean=clean)
    assert [body for body, _ in _scheduled(kit, "slow.ttl")] == [b"m"]
    kit.tick(DELAY // 2)
    assert kit.ready("slow.ttl") == [b"m"]  # back when due
    kit.tick(2 * DELAY - 1)
    assert kit.ready("slow.ttl") == [b"m"]
    kit.tick(2)  # just past three delays after the publish: its TTL ran out, restart or not
    assert kit.ready("slow.ttl") == []
