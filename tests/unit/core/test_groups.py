"""Message groups (core/groups.py) through the core's dispatch: Artemis' grouping rules."""

from __future__ import annotations

from typing import Any

from ringmq.amqp import spec
from ringmq.amqp.properties import BasicProperties, decode_properties
from ringmq.core.groups import Groups, closes_group, group_id
from tests.unit.core.kit import Kit, delivered


def _pub(kit: Kit, ch: tuple[int, int], gid: str | None, body: bytes, **extra: Any) -> list[Any]:
    headers: dict[str, Any] = dict(extra)
    if gid is not None:
        headers["JMSXGroupID"] = gid
    return kit.publish(ch, "q", body, props=BasicProperties(headers=headers or None))


def _got(effects: list[Any]) -> list[tuple[str, bytes]]:
    # (consumer tag, body) of each delivery, in order
    return [
        (d.method.consumer_tag, d.body)
        for d in delivered(effects)
        if isinstance(d.method, spec.BasicDeliver)
    ]


def _setup(
    arguments: dict[str, Any] | None = None, prefetch: int = 0, consumers: int = 2
) -> tuple[Kit, tuple[int, int], list[tuple[int, int]]]:
    kit = Kit()
    pub = kit.open()
    kit.declare(pub, "q", arguments=arguments or {})
    chans = []
    for i in range(consumers):
        ch = kit.open()
        if prefetch:
            kit.call(ch, spec.BasicQos(prefetch_count=prefetch))
        kit.consume(ch, "q", f"c{i}")
        chans.append(ch)
    return kit, pub, chans


def test_all_messages_of_a_group_go_to_one_consumer() -> None:
    kit, pub, _ = _setup()
    got: list[tuple[str, bytes]] = []
    for i in range(12):
        got += _got(_pub(kit, pub, f"g{i % 3}", f"{i % 3}:{i}".encode()))
    owner: dict[bytes, str] = {}
    for tag, body in got:
        group = body.split(b":")[0]
        assert owner.setdefault(group, tag) == tag, (group, tag, owner)
    assert len(got) == 12
    assert len(set(owner.values())) == 2  # three groups over two consumers: both used


def test_messages_without_a_group_go_round_robin() -> None:
    kit, pub, _ = _setup()
    kit.publish(pub, "q", b"g", props=BasicProperties(headers={"JMSXGroupID": "g"}))
    got: list[tuple[str, bytes]] = []
    for i in range(4):
        got += _got(_pub(kit, pub, None, b"%d" % i))
    assert {tag for tag, _ in got} == {"c0", "c1"}


def test_a_busy_owner_does_not_stall_other_groups() -> None:
    # c0 owns g1 and has no capacity left: g1's next message waits, g2's go to c1.
    kit, pub, chans = _setup(prefetch=1)
    assert _got(_pub(kit, pub, "g1", b"a")) == [("c0", b"a")]
    assert _got(_pub(kit, pub, "g1", b"b")) == []  # owner full: waits, not to c1
    assert _got(_pub(kit, pub, "g2", b"c")) == [("c1", b"c")]
    acked = kit.call(chans[0], spec.BasicAck(delivery_tag=1))
    assert _got(acked) == [("c0", b"b")]


def test_the_group_moves_when_its_owner_leaves_and_requeued_messages_follow() -> None:
    kit, pub, chans = _setup(prefetch=10)
    first = _got(_pub(kit, pub, "g", b"1")) + _got(_pub(kit, pub, "g", b"2"))
    owner = first[0][0]
    assert [t for t, _ in first] == [owner, owner]
    other = "c1" if owner == "c0" else "c0"
    closing = chans[int(owner[1])]
    out = kit.broker.channel_closed(closing[0], closing[1], kit.now)
    # the owner's unacked messages come back in their place, and go to the other consumer
    assert _got(out) == [(other, b"1"), (other, b"2")]
    assert _got(_pub(kit, pub, "g", b"3")) == [(other, b"3")]


def test_a_requeue_keeps_the_group_with_its_owner() -> None:
    kit, pub, chans = _setup(prefetch=10)
    owner = _got(_pub(kit, pub, "g", b"1"))[0][0]
    ch = chans[int(owner[1])]
    out = kit.call(ch, spec.BasicReject(delivery_tag=1, requeue=True))
    assert _got(out) == [(owner, b"1")]


def test_a_negative_sequence_closes_the_group() -> None:
    kit, pub, _ = _setup()
    owner = _got(_pub(kit, pub, "g", b"1"))[0][0]
    # the closing message goes to the owner, then the group has none
    assert _got(_pub(kit, pub, "g", b"2", JMSXGroupSeq=-1)) == [(owner, b"2")]
    assert kit.broker.vhosts["/"].queues["q"].queue.groups is not None
    assert len(kit.broker.vhosts["/"].queues["q"].queue.groups) == 0
    # a sequence of 0 (what a message without one reads as) closes nothing
    _pub(kit, pub, "h", b"3", JMSXGroupSeq=0)
    assert len(kit.broker.vhosts["/"].queues["q"].queue.groups) == 1


def test_group_rebalance_unbinds_every_group_when_a_consumer_joins() -> None:
    kit, pub, _ = _setup({"x-group-rebalance": True}, consumers=1)
    assert _got(_pub(kit, pub, "g", b"1")) == [("c0", b"1")]
    groups = kit.broker.vhosts["/"].queues["q"].queue.groups
    assert groups is not None
    assert len(groups) == 1
    kit.consume(kit.open(), "q", "late")
    assert len(groups) == 0


def test_without_rebalance_a_joining_consumer_leaves_groups_bound() -> None:
    kit, pub, _ = _setup(consumers=1)
    _pub(kit, pub, "g", b"1")
    kit.consume(kit.open(), "q", "late")
    got = _got(_pub(kit, pub, "g", b"2")) + _got(_pub(kit, pub, "g", b"3"))
    assert [t for t, _ in got] == ["c0", "c0"]


def test_group_first_key_marks_the_first_message_for_the_owner() -> None:
    kit, pub, _ = _setup({"x-group-first-key": "first"}, consumers=1)
    out = _pub(kit, pub, "g", b"1") + _pub(kit, pub, "g", b"2")
    headers = [decode_properties(d.properties_bin).headers for d in delivered(out)]
    assert headers[0] is not None
    assert headers[0].get("first") is True
    assert headers[1] is not None
    assert "first" not in headers[1]


def test_group_first_key_from_a_policy() -> None:
    kit, pub, _ = _setup(consumers=0)
    kit.broker.policies.set("p", "^q$", {"group-first-key": "f1"}, apply_to="queues")
    kit.broker.topology.reapply_settings(kit.broker.vhosts["/"], kit.now)
    kit.consume(kit.open(), "q", "c")
    out = _pub(kit, pub, "g", b"1")
    assert decode_properties(delivered(out)[0].properties_bin).headers == {
        "JMSXGroupID": "g",
        "f1": True,
    }


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
