"""The broker over a `Store`: what is persisted, what is recovered, and what is not."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ringmq.adapters.amqp091 import check_login
from ringmq.amqp import spec
from ringmq.amqp.properties import BasicProperties
from ringmq.core.config import BrokerConfig
from ringmq.core.durability import queue_key
from ringmq.core.queue import MemorySpillStore
from ringmq.core.routing import QUEUE
from ringmq.management.records import BindingInfo, PermissionInfo
from ringmq.storage import FileStore, MemoryStore
from tests.facade import admin_over
from tests.unit.adapters.amqp091.kit import PERSISTENT, StoreKit, bodies, delivered, of_type


def _file_restart(kit: StoreKit, path: Path, *, clean: bool) -> None:
    if clean:
        kit.broker.close()
    else:
        kit.store.sync()
        kit.store.abandon()
    kit.restart(FileStore.open(path))


@pytest.fixture(params=["memory", "file"])
def store_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _kit(kind: str, tmp_path: Path) -> StoreKit:
    return StoreKit(MemoryStore() if kind == "memory" else FileStore.open(tmp_path / "data"))


def _restart(kit: StoreKit, kind: str, tmp_path: Path) -> None:
    if kind == "memory":
        kit.restart(kit.store)  # MemoryStore.recover() returns the live contents
    else:
        _file_restart(kit, tmp_path / "data", clean=True)


def _get(kit: StoreKit, chan: tuple[int, int], queue: str, no_ack: bool = True) -> Any:
    effects = kit.call(chan, spec.BasicGet(queue=queue, no_ack=no_ack))
    got = delivered(effects)
    return got[0] if got else None


def test_persistent_messages_on_durable_queues_survive(store_kind: str, tmp_path: Path) -> None:
    kit = _kit(store_kind, tmp_path)
    ch = kit.open()
    kit.declare(ch, "d", durable=True)
    kit.declare(ch, "t", durable=False)
    for i in range(5):
        kit.publish(ch, "d", b"p%d" % i, props=PERSISTENT)
        kit.publish(ch, "d", b"x%d" % i)  # transient on a durable queue
        kit.publish(ch, "t", b"t%d" % i, props=PERSISTENT)  # non-durable queue
    _restart(kit, store_kind, tmp_path)
    ch = kit.open()
    assert "t" not in kit.broker.vhosts["/"].queues
    got = []
    while (d := _get(kit, ch, "d")) is not None:
        got.append(d.body)
        assert d.method.redelivered is False
    assert got == [b"p%d" % i for i in range(5)]


def test_acked_messages_do_not_come_back_and_delivered_ones_are_redelivered(
    store_kind: str, tmp_path: Path
) -> None:
    kit = _kit(store_kind, tmp_path)
    ch = kit.open()
    kit.declare(ch, "q", durable=True)
    for i in range(4):
        kit.publish(ch, "q", b"m%d" % i, props=PERSISTENT)
    first = _get(kit, ch, "q", no_ack=False)
    second = _get(kit, ch, "q", no_ack=False)
    assert (first.body, second.body) == (b"m0", b"m1")
    kit.call(ch, spec.BasicAck(delivery_tag=first.method.delivery_tag))
    _restart(kit, store_kind, tmp_path)  # m1 unacked at stop: back, flagged redelivered
    ch = kit.open()
    again = [_get(kit, ch, "q") for _ in range(3)]
    assert [(d.body, d.method.redelivered) for d in again] == [
        (b"m1", True),
        (b"m2", False),
        (b"m3", False),
    ]
    assert _get(kit, ch, "q") is None


def test_engine_removals_are_acked_in_the_store(store_kind: str, tmp_path: Path) -> None:
    kit = _kit(store_kind, tmp_path)
    ch = kit.open()
    kit.declare(ch, "ring", durable=True, arguments={"x-max-length": 2})
    kit.declare(ch, "purged", durable=True)
    kit.declare(ch, "lvq", durable=True, arguments={"x-last-value-key": "k"})
    for i in range(5):
        kit.publish(ch, "ring", b"r%d" % i, props=PERSISTENT)
        kit.publish(ch, "purged", b"p%d" % i, props=PERSISTENT)
        props = BasicProperties(delivery_mode=2, headers={"k": "a" if i % 2 else "b"})
        kit.publish(ch, "lvq", b"v%d" % i, props=props)
    kit.call(ch, spec.QueuePurge(queue="purged"))
    _restart(kit, store_kind, tmp_path)
    ch = kit.open()
    vh = kit.broker.vhosts["/"]
    assert vh.queues["ring"].queue.message_count == 2
    assert vh.queues["purged"].queue.message_count == 0
    assert sorted(m.body for m in vh.queues["lvq"].queue.ready_messages()) == [b"v3", b"v4"]


def test_rejected_to_dlx_is_a_new_persistent_message(store_kind: str, tmp_path: Path) -> None:
    kit = _kit(store_kind, tmp_path)
    ch = kit.open()
    kit.declare(ch, "dead", durable=True)
    kit.declare(ch, "work", durable=True, arguments={"x-dead-letter-exchange": ""})
    kit.call(ch, spec.QueueBind(queue="dead", exchange="amq.direct", routing_key="dead"))
    kit.declare(
        ch,
        "work2",
        durable=True,
        arguments={"x-dead-letter-exchange": "amq.direct", "x-dead-letter-routing-key": "dead"},
    )
    kit.publish(ch, "work2", b"job", props=PERSISTENT)
    d = _get(kit, ch, "work2", no_ack=False)
    kit.call(ch, spec.BasicReject(delivery_tag=d.method.delivery_tag, requeue=False))
    _restart(kit, store_kind, tmp_path)
    ch = kit.open()
    vh = kit.broker.vhosts["/"]
    assert vh.queues["work2"].queue.message_count == 0
    got = _get(kit, ch, "dead")
    assert got is not None
    assert got.body == b"job"


def test_definitions_survive_and_deleted_ones_stay_deleted(store_kind: str, tmp_path: Path) -> None:
    kit = _kit(store_kind, tmp_path)
    ch = kit.open()
    kit.call(ch, spec.ExchangeDeclare(exchange="logs", type="topic", durable=True))
    kit.call(ch, spec.ExchangeDeclare(exchange="tmp", type="fanout", durable=False))
    kit.call(ch, spec.ExchangeDeclare(exchange="gone", type="fanout", durable=True))
    kit.call(ch, spec.ExchangeDelete(exchange="gone"))
    kit.declare(
        ch, "errors", durable=True, arguments={"x-max-length": 10, "x-overflow": "drop-head"}
    )
    kit.declare(ch, "scratch", durable=False)
    kit.call(ch, spec.QueueBind(queue="errors", exchange="logs", routing_key="*.error"))
    kit.call(ch, spec.QueueBind(queue="scratch", exchange="logs", routing_key="#"))
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
    assert check_login(b, "PLAIN", b"\0alice\0s3cret", True) == "alice"
    assert b.policies.get("cap") is not None
    ch = kit.open()
    kit.publish(ch, "a.error", b"e", exchange="logs", props=PERSISTENT)
    kit.publish(ch, "a.info", b"i", exchange="logs", props=PERSISTENT)
    assert vh.queues["errors"].queue.message_count == 1


def test_scheduled_messages_keep_their_due_time(store_kind: str, tmp_path: Path) -> None:
    kit = _kit(store_kind, tmp_path)
    ch = kit.open()
    kit.declare(ch, "later", durable=True)
    props = BasicProperties(delivery_mode=2, headers={"x-delay": 10_000})
    kit.publish(ch, "later", b"soon", props=props)
    kit.now += 4_000
    _restart(kit, store_kind, tmp_path)
    ch = kit.open()
    kit.tick(0)
    assert _get(kit, ch, "later") is None  # still 6 s to go, not 10 s from the restart
    kit.tick(6_001)
    got = _get(kit, ch, "later")
    assert got is not None
    assert got.body == b"soon"


def test_confirms_wait_for_storage_and_transient_ones_do_not(tmp_path: Path) -> None:
    store = FileStore.open(tmp_path / "data")
    kit = StoreKit(store, BrokerConfig(name_seed=7, delay_persistent_confirms=True))
    ch = kit.open()
    kit.call(ch, spec.ConfirmSelect())
    kit.declare(ch, "d", durable=True)
    assert of_type(kit.publish(ch, "d", b"t"), spec.BasicAck)  # transient: at once
    assert not of_type(kit.publish(ch, "d", b"p", props=PERSISTENT), spec.BasicAck)
    held = kit.broker.drain_unconfirmed()
    assert held == [(ch[0], ch[1], 2)]
    store.sync()
    acks = of_type(kit.broker.confirm_stored(ch[0], ch[1], [2]), spec.BasicAck)
    assert [a.delivery_tag for a in acks] == [2]
    kit.broker.close()


def test_tx_commit_is_synced(tmp_path: Path) -> None:
    store = FileStore.open(tmp_path / "data")
    kit = StoreKit(store)
    ch = kit.open()
    kit.declare(ch, "d", durable=True)
    kit.call(ch, spec.TxSelect())
    kit.publish(ch, "d", b"a", props=PERSISTENT)
    kit.publish(ch, "d", b"b", props=PERSISTENT)
    assert of_type(kit.call(ch, spec.TxCommit()), spec.TxCommitOk)
    assert store.durable_position >= store.position - 1
    _file_restart(kit, tmp_path / "data", clean=False)
    ch = kit.open()
    assert [_get(kit, ch, "d").body for _ in range(2)] == [b"a", b"b"]


def test_dirty_restart_flags_everything_redelivered_and_consumers_get_it(
    tmp_path: Path,
) -> None:
    kit = StoreKit(FileStore.open(tmp_path / "data"))
    ch = kit.open()
    kit.declare(ch, "q", durable=True)
    for i in range(3):
        kit.publish(ch, "q", b"%d" % i, props=PERSISTENT)
    _file_restart(kit, tmp_path / "data", clean=False)
    ch = kit.open()
    out = kit.consume(ch, "q", "c", no_ack=True)
    assert bodies(out) == [b"0", b"1", b"2"]
    assert all(d.method.redelivered for d in delivered(out))


def test_queue_delete_drops_messages_and_new_seqs_continue(store_kind: str, tmp_path: Path) -> None:
    kit = _kit(store_kind, tmp_path)
    ch = kit.open()
    kit.declare(ch, "q", durable=True)
    kit.declare(ch, "keep", durable=True)
    kit.publish(ch, "q", b"old", props=PERSISTENT)
    kit.publish(ch, "keep", b"k1", props=PERSISTENT)
    kit.call(ch, spec.QueueDelete(queue="q"))
    _restart(kit, store_kind, tmp_path)
    ch = kit.open()
    assert "q" not in kit.broker.vhosts["/"].queues
    kit.publish(ch, "keep", b"k2", props=PERSISTENT)
    _restart(kit, store_kind, tmp_path)
    ch = kit.open()
    assert [_get(kit, ch, "keep").body for _ in range(2)] == [b"k1", b"k2"]
    assert queue_key("/", "keep") == "/\x1fkeep"


def test_management_edits_are_written_without_an_explicit_call(tmp_path: Path) -> None:
    kit = StoreKit(FileStore.open(tmp_path / "data"))
    admin = admin_over(kit.broker)
    admin.add_vhost("prod")
    admin.add_user("bob", password="pw", password_hash=None, tags=["administrator"])
    admin.set_permissions(PermissionInfo("bob", "prod", ".*", ".*", ".*"))
    admin.delete_user("guest")
    _file_restart(kit, tmp_path / "data", clean=False)
    b = kit.broker
    assert "prod" in b.vhosts
    assert b.auth.permissions[("bob", "prod")].read == ".*"
    assert check_login(b, "PLAIN", b"\0bob\0pw", False) == "bob"
    assert "guest" not in b.auth.users  # the default user is created on a blank store only


def test_management_get_with_ack_removes_from_the_store(tmp_path: Path) -> None:
    kit = StoreKit(FileStore.open(tmp_path / "data"))
    ch = kit.open()
    kit.declare(ch, "q", durable=True)
    for i in range(3):
        kit.publish(ch, "q", b"%d" % i, props=PERSISTENT)
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
    kit = StoreKit(FileStore.open(tmp_path / "data"))
    ch = kit.open()
    kit.declare(ch, "q", durable=True)
    engine = kit.broker.vhosts["/"].queues["q"].queue
    engine.set_spill(MemorySpillStore())
    engine.set_memory_bound(2, 1 << 20)
    for i in range(10):
        kit.publish(ch, "q", b"%d" % i, props=PERSISTENT)
    assert engine.spilled > 0
    if purge:
        kit.call(ch, spec.QueuePurge(queue="q"))
    _file_restart(kit, tmp_path / "data", clean=True)
    ch = kit.open()
    got = []
    while (d := _get(kit, ch, "q")) is not None:
        got.append(d.body)
    assert got == ([] if purge else [b"%d" % i for i in range(10)])


def test_incremental_definition_writes_match_a_full_snapshot(tmp_path: Path) -> None:
    kit = StoreKit(FileStore.open(tmp_path / "data"))
    ch = kit.open()
    x = spec.ExchangeDeclare
    kit.call(ch, x(exchange="src", type="topic", durable=True))
    kit.call(ch, x(exchange="mid", type="fanout", durable=True))
    kit.call(ch, x(exchange="auto", type="direct", durable=True, auto_delete=True))
    kit.call(ch, x(exchange="flimsy", type="direct", durable=False))
    for name in ("a", "b", "c"):
        kit.declare(ch, name, durable=True)
    kit.declare(ch, "t", durable=False)
    kit.declare(ch, "mine", durable=True, exclusive=True)
    bind = spec.QueueBind
    kit.call(ch, bind(queue="a", exchange="src", routing_key="x.*"))
    kit.call(ch, bind(queue="a", exchange="src", routing_key="y.#", arguments={"k": b"v"}))
    kit.call(ch, bind(queue="b", exchange="mid"))
    kit.call(ch, bind(queue="c", exchange="auto", routing_key="c"))
    kit.call(ch, bind(queue="t", exchange="src", routing_key="#"))
    kit.call(ch, bind(queue="mine", exchange="src", routing_key="#"))
    kit.call(ch, bind(queue="b", exchange="flimsy", routing_key="f"))
    kit.call(ch, spec.ExchangeBind(destination="mid", source="src", routing_key="m"))
    kit.call(ch, spec.QueueUnbind(queue="a", exchange="src", routing_key="x.*"))
    kit.call(ch, spec.QueueDelete(queue="c"))  # auto-delete exchange goes with its last binding
    kit.call(ch, spec.ExchangeDelete(exchange="mid"))
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
    kit = StoreKit(FileStore.open(tmp_path / "data"))
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
