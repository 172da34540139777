"""Message groups (core/groups.py) through the core's dispatch: Artemis' grouping rules."""

from __future__ import annotations

from typing import Any

from ringmq.core.effects import Deliver, Effect
from ringmq.core.groups import Groups, closes_group, group_id
from ringmq.core.session import Session, SettleKind
from tests.unit.core.corekit import Core


def _pub(k: Core, s: Session, gid: str | None, body: bytes, **extra: Any) -> list[Effect]:
    headers: dict[str, Any] = dict(extra)
    if gid is not None:
        headers["JMSXGroupID"] = gid
    return k.publish(s, "q", body, headers=headers or None)


def _deliveries(effects: list[Effect]) -> list[Deliver]:
    return [e for e in effects if isinstance(e, Deliver)]


def _got(effects: list[Effect]) -> list[tuple[str, bytes]]:
    # (consumer tag, body) of each delivery, in order
    return [(d.consumer_tag, d.message.body) for d in _deliveries(effects)]


def _setup(
    arguments: dict[str, Any] | None = None, prefetch: int = 0, consumers: int = 2
) -> tuple[Core, Session, list[Session]]:
    k = Core()
    pub = k.open()
    k.declare(pub, "q", arguments or {})
    subs = []
    for i in range(consumers):
        s = k.open()
        if prefetch:
            k.broker.delivery.set_prefetch(s, prefetch, session_wide=False)
        k.consume(s, "q", f"c{i}")
        subs.append(s)
    return k, pub, subs


def test_all_messages_of_a_group_go_to_one_consumer() -> None:
    k, pub, _ = _setup()
    got: list[tuple[str, bytes]] = []
    for i in range(12):
        got += _got(_pub(k, pub, f"g{i % 3}", f"{i % 3}:{i}".encode()))
    owner: dict[bytes, str] = {}
    for tag, body in got:
        group = body.split(b":")[0]
        assert owner.setdefault(group, tag) == tag, (group, tag, owner)
    assert len(got) == 12
    assert len(set(owner.values())) == 2  # three groups over two consumers: both used


def test_messages_without_a_group_go_round_robin() -> None:
    k, pub, _ = _setup()
    k.publish(pub, "q", b"g", headers={"JMSXGroupID": "g"})
    got: list[tuple[str, bytes]] = []
    for i in range(4):
        got += _got(_pub(k, pub, None, b"%d" % i))
    assert {tag for tag, _ in got} == {"c0", "c1"}


def test_a_busy_owner_does_not_stall_other_groups() -> None:
    # c0 owns g1 and has no capacity left: g1's next message waits, g2's go to c1.
    k, pub, subs = _setup(prefetch=1)
    (first,) = _deliveries(_pub(k, pub, "g1", b"a"))
    assert (first.consumer_tag, first.message.body) == ("c0", b"a")
    assert _got(_pub(k, pub, "g1", b"b")) == []  # owner full: waits, not to c1
    assert _got(_pub(k, pub, "g2", b"c")) == [("c1", b"c")]
    acked = k.settle(subs[0], first.delivery_id, SettleKind.ACK)
    assert _got(acked) == [("c0", b"b")]


def test_the_group_moves_when_its_owner_leaves_and_requeued_messages_follow() -> None:
    k, pub, subs = _setup(prefetch=10)
    first = _got(_pub(k, pub, "g", b"1")) + _got(_pub(k, pub, "g", b"2"))
    owner = first[0][0]
    assert [t for t, _ in first] == [owner, owner]
    other = "c1" if owner == "c0" else "c0"
    closing = subs[int(owner[1])]
    out = k.broker.channel_closed(closing.conn_id, closing.channel, k.now)
    # the owner's unacked messages come back in their place, and go to the other consumer
    assert _got(out) == [(other, b"1"), (other, b"2")]
    assert _got(_pub(k, pub, "g", b"3")) == [(other, b"3")]


def test_a_requeue_keeps_the_group_with_its_owner() -> None:
    k, pub, subs = _setup(prefetch=10)
    (d,) = _deliveries(_pub(k, pub, "g", b"1"))
    owner = d.consumer_tag
    out = k.settle(subs[int(owner[1])], d.delivery_id, SettleKind.REQUEUE)
    assert _got(out) == [(owner, b"1")]


def test_a_negative_sequence_closes_the_group() -> None:
    k, pub, _ = _setup()
    owner = _got(_pub(k, pub, "g", b"1"))[0][0]
    # the closing message goes to the owner, then the group has none
    assert _got(_pub(k, pub, "g", b"2", JMSXGroupSeq=-1)) == [(owner, b"2")]
    groups = k.queue("q").groups
    assert groups is not None
    assert len(groups) == 0
    # a sequence of 0 (what a message without one reads as) closes nothing
    _pub(k, pub, "h", b"3", JMSXGroupSeq=0)
    assert len(k.queue("q").groups or ()) == 1


def test_group_rebalance_unbinds_every_group_when_a_consumer_joins() -> None:
    k, pub, _ = _setup({"x-group-rebalance": True}, consumers=1)
    assert _got(_pub(k, pub, "g", b"1")) == [("c0", b"1")]
    groups = k.queue("q").groups
    assert groups is not None
    assert len(groups) == 1
    k.consume(k.open(), "q", "late")
    assert len(groups) == 0


def test_without_rebalance_a_joining_consumer_leaves_groups_bound() -> None:
    k, pub, _ = _setup(consumers=1)
    _pub(k, pub, "g", b"1")
    k.consume(k.open(), "q", "late")
    got = _got(_pub(k, pub, "g", b"2")) + _got(_pub(k, pub, "g", b"3"))
    assert [t for t, _ in got] == ["c0", "c0"]


def test_group_first_key_marks_the_first_message_for_the_owner() -> None:
    k, pub, _ = _setup({"x-group-first-key": "first"}, consumers=1)
    out = _pub(k, pub, "g", b"1") + _pub(k, pub, "g", b"2")
    headers = [d.message.headers for d in _deliveries(out)]
    assert headers[0] is not None
    assert headers[0].get("first") is True
    assert headers[1] is not None
    assert "first" not in headers[1]


def test_group_first_key_from_a_policy() -> None:
    k, pub, _ = _setup(consumers=0)
    k.broker.policies.set("p", "^q$", {"group-first-key": "f1"}, apply_to="queues")
    k.broker.topology.reapply_settings(k.broker.vhosts["/"], k.now)
    k.consume(k.open(), "q", "c")
    out = _pub(k, pub, "g", b"1")
    assert _deliveries(out)[0].message.headers == {"JMSXGroupID": "g", "f1": True}


def test_buckets_key_groups_by_hash() -> None:
    g = Groups(buckets=4)
    assert {g.key(f"id{i}") for i in range(100)} <= {0, 1, 2, 3}
    owner = object()
    assert g.taken(owner, {"JMSXGroupID": "a"}, 5)
    same = next(f"id{i}" for i in range(100) if g.key(f"id{i}") == g.key("a") and f"id{i}" != "a")
    assert not g.admits(object(), {"JMSXGroupID": same})  # shares a's bucket, so its owner
    assert g.admits(owner, {"JMSXGroupID": same})


def test_header_readers() -> None:
    assert group_id({"JMSXGroupID": b"x"}) == "x"
    assert group_id({"_AMQ_GROUP_ID": "y"}) == "y"
    assert group_id({"JMSXGroupID": ""}) is None
    assert group_id(None) is None
    assert closes_group({"JMSXGroupSeq": -1})
    assert closes_group({"JMSXGroupSeq": "-1"})  # MQTT 5 user properties are strings
    assert closes_group({"JMSXGroupSeq": 0xFFFFFFFF})  # an AMQP 1.0 uint read as Artemis does
    assert not closes_group({"JMSXGroupSeq": 0})
    assert not closes_group({"JMSXGroupSeq": 7})
    assert not closes_group({})


def test_a_group_closed_mid_round_is_open_to_those_that_sat_it_out() -> None:
    # c0 holds g's "1" (its owner) and "2", which closes g; "3" waits for c0, who is full.
    # c0 leaves: "1" and "2" come back before "3", and in that one dispatch round the first
    # consumer picked takes "1" (owning g), the other finds only g's messages and sits out,
    # the owner takes "2", which unbinds g: the one that sat out may take "3" now.
    k, pub, (c0,) = _setup(prefetch=2, consumers=1)
    (d1,) = _deliveries(_pub(k, pub, "g", b"1"))
    assert _got(_pub(k, pub, "g", b"2", JMSXGroupSeq=-1)) == [("c0", b"2")]
    assert _got(k.settle(c0, d1.delivery_id, SettleKind.REQUEUE)) == [("c0", b"1")]
    for tag in ("a", "b"):
        s = k.open()
        k.broker.delivery.set_prefetch(s, 2, session_wide=False)
        k.consume(s, "q", tag)
    assert _got(_pub(k, pub, "g", b"3")) == []  # g is c0's, and c0 is full
    out = k.broker.channel_closed(c0.conn_id, c0.channel, k.now)
    got = _got(out)
    owner = got[0][0]
    other = "b" if owner == "a" else "a"
    assert sorted(got) == sorted([(owner, b"1"), (owner, b"2"), (other, b"3")])
    assert k.ready("q") == []
