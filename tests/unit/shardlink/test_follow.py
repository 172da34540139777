"""The definitions feed on the shard link (`OriginSession.follow`, `OwnerSession.definitions`):
two real brokers' cores, shard 0's changes carried as bytes to shard 1, which applies them and
has the same definitions; and the order rules that break a link."""

from __future__ import annotations

import pytest

from ringmq.core.deffeed import DefinitionChange
from ringmq.shardlink import origin as o
from ringmq.shardlink import owner as w
from ringmq.shardlink.codec import Answer, Definitions, Follow, ProtocolError, encode
from tests.unit.core.corekit import Core
from tests.unit.core.test_definition_feed import same_definitions


def _linked() -> tuple[o.OriginSession, w.OwnerSession]:
    origin, owner = o.OriginSession(1, b"s"), w.OwnerSession(0, b"s")
    assert owner.receive_data(origin.data_to_send()) == [w.Opened(1)]
    assert origin.receive_data(owner.data_to_send()) == [o.Opened(0)]
    return origin, owner


def _apply(kit: Core, events: list[o.Event]) -> None:
    for e in events:
        assert isinstance(e, o.DefinitionsReceived)
        kit.broker.apply_definitions(e.changes, shard=1, now_ms=kit.now)


def test_shard_one_follows_shard_zero_over_the_link() -> None:
    zero, one = Core(), Core()
    s = zero.open()
    zero.declare(s, "before", durable=True)
    zero.exchange(s, "x", "topic")
    zero.bind(s, "before", "x", "a.*")
    origin, owner = _linked()
    origin.follow()
    assert owner.receive_data(origin.data_to_send()) == [w.FollowAsked()]
    zero.broker.feed_definitions()
    zero.broker.drain_definitions()  # what the snapshot holds too
    owner.definitions(zero.broker.definitions_snapshot(), snapshot=True)
    _apply(one, origin.receive_data(owner.data_to_send()))
    same_definitions(zero.broker, one.broker, 1)
    # then the changes as they are made, any number per frame
    zero.declare(s, "after")
    zero.bind(s, "after", "x", "#")
    zero.run(zero.broker.topology.create_copy, "/", "placed", 1, durable=True)
    zero.bind(s, "placed", "x", "a.b")
    owner.definitions(zero.broker.drain_definitions())
    zero.unbind(s, "before", "x", "a.*")
    zero.delete(s, "after")
    owner.definitions(zero.broker.drain_definitions())
    _apply(one, origin.receive_data(owner.data_to_send()))
    same_definitions(zero.broker, one.broker, 1)
    assert one.broker.state.vhosts["/"].queues["placed"].owner is None  # shard 1's own
    assert origin.definitions_seq == zero.broker.state.feed.seq  # type: ignore[union-attr]


def test_the_owner_sends_the_snapshot_first_and_only_to_a_follower() -> None:
    origin, owner = _linked()
    with pytest.raises(ValueError, match="does not follow"):
        owner.definitions([])
    origin.follow()
    owner.receive_data(origin.data_to_send())
    with pytest.raises(ValueError, match="snapshot goes first"):
        owner.definitions([DefinitionChange(1, "vhost", "/", {"name": "/"})])
    owner.definitions([], snapshot=True)
    with pytest.raises(ValueError, match="snapshot goes first"):
        owner.definitions([], snapshot=True)
    with pytest.raises(ValueError, match="follows the definitions already"):
        origin.follow()


def test_a_second_follow_breaks_the_link() -> None:
    _, owner = _linked()
    owner.receive_data(encode(Follow()))
    with pytest.raises(ProtocolError, match="unexpected Follow"):
        owner.receive_data(encode(Follow()))


def _change(seq: int) -> DefinitionChange:
    return DefinitionChange(seq, "vhost", f"v{seq}", {"name": f"v{seq}"})


@pytest.mark.parametrize(
    ("frames", "error"),
    [
        ([Definitions(False, (_change(1),))], "before the snapshot"),
        ([Definitions(True, (_change(1), _change(2)))], "one of several sequences"),
        ([Definitions(True, ()), Definitions(True, ())], "a second definitions snapshot"),
        ([Definitions(True, (_change(3),)), Definitions(False, (_change(3),))], "out of order"),
        ([Definitions(True, ()), Definitions(False, (_change(5), _change(4)))], "out of order"),
    ],
)
def test_definitions_out_of_order_break_the_link(frames: list[Definitions], error: str) -> None:
    origin, _ = _linked()
    origin.follow()
    with pytest.raises(ProtocolError, match=error):
        origin.receive_data(b"".join(encode(f) for f in frames))


def test_definitions_to_an_origin_that_did_not_follow_break_the_link() -> None:
    origin, _ = _linked()
    with pytest.raises(ProtocolError, match="unexpected Definitions"):
        origin.receive_data(encode(Definitions(True, ())))


def test_an_ask_is_answered_once_and_a_lost_link_names_the_unanswered() -> None:
    from ringmq.core.asks import DefinitionRequest

    origin, owner = _linked()
    request = DefinitionRequest("queue.bind", "/", {"queue": "q", "exchange": "x"})
    origin.ask(1, request)
    origin.ask(2, request)
    with pytest.raises(ValueError, match="waiting already"):
        origin.ask(1, request)
    asked = owner.receive_data(origin.data_to_send())
    assert asked == [w.AskReceived(1, request), w.AskReceived(2, request)]
    owner.answer(1, 9)
    with pytest.raises(ValueError, match="not waiting"):
        owner.answer(1, 9)
    assert origin.receive_data(owner.data_to_send()) == [o.Answered(1, 9, 0, "")]
    with pytest.raises(ProtocolError, match="unexpected Answer"):
        origin.receive_data(encode(Answer(1, 9)))  # answered already: breaks the link
    assert origin.lost().asks == (2,)
