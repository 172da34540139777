"""The broker over a `Store`, on the core's API: what is persisted, what is recovered, and what
is not."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ringmq.core.config import BrokerConfig
from ringmq.core.delivery import Got
from ringmq.core.durability import queue_key
from ringmq.core.effects import Confirm, Deliver
from ringmq.core.queue import MemorySpillStore
from ringmq.core.routing import QUEUE
from ringmq.core.session import Session, SettleKind
from ringmq.management.records import BindingInfo, PermissionInfo
from ringmq.storage import FileStore, MemoryStore
from tests.facade import admin_over
from tests.unit.core.corekit import Core, bodies


def _file_restart(kit: Core, path: Path, *, clean: bool) -> None:
    if clean:
        kit.broker.close()
    else:
        kit.store.sync()
        kit.store.abandon()
    kit.restart(FileStore.open(path))


@pytest.fixture(params=["memory", "file"])
def store_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _kit(kind: str, tmp_path: Path) -> Core:
    return Core(store=MemoryStore() if kind == "memory" else FileStore.open(tmp_path / "data"))


def _restart(kit: Core, kind: str, tmp_path: Path) -> None:
    if kind == "memory":
        kit.restart(kit.store)  # MemoryStore.recover() returns the live contents
    else:
        _file_restart(kit, tmp_path / "data", clean=True)


def _get(kit: Core, s: Session, queue: str, no_ack: bool = True) -> Got | None:
    return kit.get(s, queue, no_ack=no_ack)


def _body(kit: Core, s: Session, queue: str) -> bytes:
    got = kit.get(s, queue, no_ack=True)
    assert got is not None
    return got.message.body


def _delete_exchange(kit: Core, s: Session, name: str) -> None:
    kit.run(kit.broker.exchanges.delete_exchange, s.vhost, name, if_unused=False, grant=s)


def test_persistent_messages_on_durable_queues_survive(store_kind: str, tmp_path: Path) -> None:
    kit = _kit(store_kind, tmp_path)
    s = kit.open()
    kit.declare(s, "d", durable=True)
    kit.declare(s, "t", durable=False)
    for i in range(5):
        kit.publish(s, "d", b"p%d" % i, persistent=True)
        kit.publish(s, "d", b"x%d" % i)  # transient on a durable queue
        kit.publish(s, "t", b"t%d" % i, persistent=True)  # non-durable queue
    _restart(kit, store_kind, tmp_path)
    s = kit.open()
    assert "t" not in kit.broker.vhosts["/"].queues
    got = []
    while (d := _get(kit, s, "d")) is not None:
        got.append(d.message.body)
        assert d.redelivered is False
    assert got == [b"p%d" % i for i in range(5)]


def test_acked_messages_do_not_come_back_and_delivered_ones_are_redelivered(
    store_kind: str, tmp_path: Path
) -> None:
    kit = _kit(store_kind, tmp_path)
    s = kit.open()
    kit.declare(s, "q", durable=True)
    for i in range(4):
        kit.publish(s, "q", b"m%d" % i, persistent=True)
    first = _get(kit, s, "q", no_ack=False)
    second = _get(kit, s, "q", no_ack=False)
    assert first is not None
    assert second is not None
    assert (first.message.body, second.message.body) == (b"m0", b"m1")
    kit.settle(s, first.delivery_id, SettleKind.ACK)
    _restart(kit, store_kind, tmp_path)  # m1 unacked at stop: back, flagged redelivered
    s = kit.open()
    again = [_get(kit, s, "q") for _ in range(3)]
    assert [(d.message.body, d.redelivered) for d in again if d is not None] == [
        (b"m1", True),
        (b"m2", False),
        (b"m3", False),
    ]
    assert _get(kit, s, "q") is None


def test_engine_removals_are_acked_in_the_store(store_kind: str, tmp_path: Path) -> None:
    kit = _kit(store_kind, tmp_path)
    s = kit.open()
    kit.declare(s, "ring", durable=True, arguments={"x-max-length": 2})
    kit.declare(s, "purged", durable=True)
    kit.declare(s, "lvq", durable=True, arguments={"x-last-value-key": "k"})
    for i in range(5):
        kit.publish(s, "ring", b"r%d" % i, persistent=True)
        kit.publish(s, "purged", b"p%d" % i, persistent=True)
        headers = {"k": "a" if i % 2 else "b"}
        kit.publish(s, "lvq", b"v%d" % i, persistent=True, headers=headers)
    kit.run(kit.broker.topology.purge_for, s, "purged")
    _restart(kit, store_kind, tmp_path)
    s = kit.open()
    vh = kit.broker.vhosts["/"]
    assert vh.queues["ring"].queue.message_count == 2
    assert vh.queues["purged"].queue.message_count == 0
    assert sorted(m.body for m in vh.queues["lvq"].queue.ready_messages()) == [b"v3", b"v4"]


def test_rejected_to_dlx_is_a_new_persistent_message(store_kind: str, tmp_path: Path) -> None:
    kit = _kit(store_kind, tmp_path)
    s = kit.open()
    kit.declare(s, "dead", durable=True)
    kit.declare(s, "work", durable=True, arguments={"x-dead-letter-exchange": ""})
    kit.bind(s, "dead", "amq.direct", "dead")
    kit.declare(
        s,
        "work2",
        durable=True,
        arguments={"x-dead-letter-exchange": "amq.direct", "x-dead-letter-routing-key": "dead"},
    )
    kit.publish(s, "work2", b"job", persistent=True)
    d = _get(kit, s, "work2", no_ack=False)
    assert d is not None
    kit.settle(s, d.delivery_id, SettleKind.REJECT)
    _restart(kit, store_kind, tmp_path)
    s = kit.open()
    vh = kit.broker.vhosts["/"]
    assert vh.queues["work2"].queue.message_count == 0
    assert _body(kit, s, "dead") == b"job"


def test_definitions_survive_and_deleted_ones_stay_deleted(store_kind: str, tmp_path: Path) -> None:
    kit = _kit(store_kind, tmp_path)
    s = kit.open()
    kit.exchange(s, "logs", "topic", durable=True)
    kit.exchange(s, "tmp", "fanout")
    kit.exchange(s, "gone", "fanout", durable=True)
    _delete_exchange(kit, s, "gone")
    kit.declare(
        s, "errors", durable=True, arguments={"x-max-length": 10, "x-overflow": "drop-head"}
    )
    kit.declare(s, "scratch", durable=False)
    kit.bind(s, "errors", "logs", "*.error")
    kit.bind(s, "scratch", "logs", "#")
    kit.broker.admin  # noqa: B018 - management facade exists
    kit.broker.auth.add_user("alice", password="s3cret", tags=("monitoring",))
    kit.broker.auth.set_permissions("alice", "/", "^a", ".*", ".*")
    kit.broker.policies.set("cap", "^errors$", {"max-length": 3}, apply_to="queues")
    kit.broker.definitions_changed()
    _restart(kit, store_kind, tmp_path)
    b = kit.broker
    vh = b.vhosts["/"]
    assert "logs" in vh.exchanges
    assert "tmp" not in vh.exchanges
    assert "gone" not in vh.exchanges
    assert vh.exchanges["logs"].type.value == "topic"
    assert set(vh.queues) == {"errors"}
    assert vh.queues["errors"].arguments == {"x-max-length": 10, "x-overflow": "drop-head"}
    assert vh.queues["errors"].settings.limit is not None
    assert "alice" in b.auth.users
    assert b.auth.users["alice"].tags == ("monitoring",)
    assert b.auth.permissions[("alice", "/")].configure == "^a"
    assert b.auth.login("PLAIN", "alice", "s3cret", True).name == "alice"
    assert b.policies.get("cap") is not None
    s = kit.open()
    kit.publish(s, "a.error", b"e", exchange="logs", persistent=True)
    kit.publish(s, "a.info", b"i", exchange="logs", persistent=True)
    assert vh.queues["errors"].queue.message_count == 1


def test_scheduled_messages_keep_their_due_time(store_kind: str, tmp_path: Path) -> None:
    kit = _kit(store_kind, tmp_path)
    s = kit.open()
    kit.declare(s, "later", durable=True)
    kit.publish(s, "later", b"soon", persistent=True, headers={"x-delay": 10_000})
    kit.now += 4_000
    _restart(kit, store_kind, tmp_path)
    s = kit.open()
    kit.tick(0)
    assert _get(kit, s, "later") is None  # still 6 s to go, not 10 s from the restart
    kit.tick(6_001)
    assert _body(kit, s, "later") == b"soon"


def test_confirms_wait_for_storage_and_transient_ones_do_not(tmp_path: Path) -> None:
    store = FileStore.open(tmp_path / "data")
    kit = Core(BrokerConfig(name_seed=7, delay_persistent_confirms=True), store)
    s = kit.open()
    kit.broker.confirms.select(s)
    kit.declare(s, "d", durable=True)

    def acks(effects: list[Any]) -> list[int]:
        return [e.seq for e in effects if isinstance(e, Confirm) and e.ok]

    assert acks(kit.publish(s, "d", b"t")) == [1]  # transient: at once
    assert acks(kit.publish(s, "d", b"p", persistent=True)) == []
    held = kit.broker.drain_unconfirmed()
    assert held == [(s.conn_id, s.channel, 2)]
    store.sync()
    assert acks(kit.broker.confirm_stored(s.conn_id, s.channel, [2])) == [2]
    kit.broker.close()


def test_tx_commit_is_synced(tmp_path: Path) -> None:
    store = FileStore.open(tmp_path / "data")
    kit = Core(store=store)
    s = kit.open()
    kit.declare(s, "d", durable=True)
    kit.broker.transactions.select(s)
    kit.publish(s, "d", b"a", persistent=True)
    kit.publish(s, "d", b"b", persistent=True)
    kit.run(kit.broker.transactions.commit, s, kit.now)
    assert store.durable_position >= store.position - 1
    _file_restart(kit, tmp_path / "data", clean=False)
    s = kit.open()
    assert [_body(kit, s, "d") for _ in range(2)] == [b"a", b"b"]


def test_dirty_restart_flags_everything_redelivered_and_consumers_get_it(
    tmp_path: Path,
) -> None:
    kit = Core(store=FileStore.open(tmp_path / "data"))
    s = kit.open()
    kit.declare(s, "q", durable=True)
    for i in range(3):
        kit.publish(s, "q", b"%d" % i, persistent=True)
    _file_restart(kit, tmp_path / "data", clean=False)
    s = kit.open()
    out = kit.consume(s, "q", "c", no_ack=True)
    assert bodies(out) == [b"0", b"1", b"2"]
    assert all(e.redelivered for e in out if isinstance(e, Deliver))


def test_queue_delete_drops_messages_and_new_seqs_continue(store_kind: str, tmp_path: Path) -> None:
    kit = _kit(store_kind, tmp_path)
    s = kit.open()
    kit.declare(s, "q", durable=True)
    kit.declare(s, "keep", durable=True)
    kit.publish(s, "q", b"old", persistent=True)
    kit.publish(s, "keep", b"k1", persistent=True)
    kit.delete(s, "q")
    _restart(kit, store_kind, tmp_path)
    s = kit.open()
    assert "q" not in kit.broker.vhosts["/"].queues
    kit.publish(s, "keep", b"k2", persistent=True)
    _restart(kit, store_kind, tmp_path)
    s = kit.open()
    assert [_body(kit, s, "keep") for _ in range(2)] == [b"k1", b"k2"]
    assert queue_key("/", "keep") == "/\x1fkeep"


def test_management_edits_are_written_without_an_explicit_call(tmp_path: Path) -> None:
    kit = Core(store=FileStore.open(tmp_path / "data"))
    admin = admin_over(kit.broker)
    admin.add_vhost("prod")
    admin.add_user("bob", password="pw", password_hash=None, tags=["administrator"])
    admin.set_permissions(PermissionInfo("bob", "prod", ".*", ".*", ".*"))
    admin.delete_user("guest")
    _file_restart(kit, tmp_path / "data", clean=False)
    b = kit.broker
    assert "prod" in b.vhosts
    assert b.auth.permissions[("bob", "prod")].read == ".*"
    assert b.auth.login("PLAIN", "bob", "pw", False).name == "bob"
    assert "guest" not in b.auth.users  # the default user is created on a blank store only


def test_management_get_with_ack_removes_from_the_store(tmp_path: Path) -> None:
    kit = Core(store=FileStore.open(tmp_path / "data"))
    s = kit.open()
    kit.declare(s, "q", durable=True)
    for i in range(3):
        kit.publish(s, "q", b"%d" % i, persistent=True)
    got = admin_over(kit.broker).get_messages(
        "/", "q", count=2, ackmode="ack_requeue_false", now_ms=kit.now
    )
    assert len(got) == 2
    _file_restart(kit, tmp_path / "data", clean=False)
    assert kit.broker.vhosts["/"].queues["q"].queue.message_count == 1


@pytest.mark.parametrize("purge", [False, True])
def test_paged_persistent_messages_recover_in_order_and_purge_drops_them(
    tmp_path: Path, purge: bool
) -> None:
    kit = Core(store=FileStore.open(tmp_path / "data"))
    s = kit.open()
    kit.declare(s, "q", durable=True)
    engine = kit.broker.vhosts["/"].queues["q"].queue
    engine.set_spill(MemorySpillStore())
    engine.set_memory_bound(2, 1 << 20)
    for i in range(10):
        kit.publish(s, "q", b"%d" % i, persistent=True)
    assert engine.spilled > 0
    if purge:
        kit.run(kit.broker.topology.purge_for, s, "q")
    _file_restart(kit, tmp_path / "data", clean=True)
    s = kit.open()
    got = []
    while (d := _get(kit, s, "q")) is not None:
        got.append(d.message.body)
    assert got == ([] if purge else [b"%d" % i for i in range(10)])


def test_incremental_definition_writes_match_a_full_snapshot(tmp_path: Path) -> None:
    kit = Core(store=FileStore.open(tmp_path / "data"))
    s = kit.open()
    kit.exchange(s, "src", "topic", durable=True)
    kit.exchange(s, "mid", "fanout", durable=True)
    kit.exchange(s, "auto", "direct", durable=True, auto_delete=True)
    kit.exchange(s, "flimsy", "direct")
    for name in ("a", "b", "c"):
        kit.declare(s, name, durable=True)
    kit.declare(s, "t", durable=False)
    kit.declare(s, "mine", durable=True, exclusive=True)
    kit.bind(s, "a", "src", "x.*")
    kit.bind(s, "a", "src", "y.#", {"k": b"v"})
    kit.bind(s, "b", "mid")
    kit.bind(s, "c", "auto", "c")
    kit.bind(s, "t", "src", "#")
    kit.bind(s, "mine", "src", "#")
    kit.bind(s, "b", "flimsy", "f")
    kit.bind_exchange(s, "src", "mid", "m")
    kit.unbind(s, "a", "src", "x.*")
    kit.delete(s, "c")  # auto-delete exchange goes with its last binding
    _delete_exchange(kit, s, "mid")
    dur = kit.broker.durability
    assert dur is not None
    assert dur.definitions.cache == dur.snapshot()
    assert len(dur.definitions.cache["binding"]) == 1
    assert "/\x1fauto" not in dur.definitions.cache["exchange"]
    _file_restart(kit, tmp_path / "data", clean=False)
    vh = kit.broker.vhosts["/"]
    assert set(vh.exchanges) >= {"src"}
    assert not {"mid", "auto", "flimsy"} & set(vh.exchanges)
    assert set(vh.queues) == {"a", "b"}
    assert [
        (b.dest, b.routing_key, b.arguments) for b in vh.exchanges["src"].bindings.values()
    ] == [((QUEUE, "a"), "y.#", {"k": b"v"})]


def test_management_exchanges_queues_and_bindings_are_written(tmp_path: Path) -> None:
    kit = Core(store=FileStore.open(tmp_path / "data"))
    admin = admin_over(kit.broker)
    admin.declare_exchange("/", "orders", type="topic")
    admin.declare_queue("/", "billing")
    admin.bind(BindingInfo("/", "orders", "billing", "queue", "order.*"), now_ms=0)
    admin.declare_queue("/", "gone")
    admin.delete_queue("/", "gone")
    dur = kit.broker.durability
    assert dur is not None
    assert dur.definitions.cache == dur.snapshot()
    _file_restart(kit, tmp_path / "data", clean=False)
    vh = kit.broker.vhosts["/"]
    assert "gone" not in vh.queues
    assert [q.name for q in vh.route(vh.exchanges["orders"], "order.new", None)] == ["billing"]
