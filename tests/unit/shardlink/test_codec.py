"""The shard link's frames: each round-trips (fixed and Hypothesis-generated values), and bad
bytes raise `ProtocolError` only."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ringmq.core.asks import DefinitionRequest
from ringmq.core.deffeed import DefinitionChange
from ringmq.core.message import Message
from ringmq.shardlink import origin as o
from ringmq.shardlink import owner as w
from ringmq.shardlink.codec import (
    MAX_ENTRIES,
    Answer,
    Ask,
    Cancel,
    Cancelled,
    Credit,
    Definitions,
    Deliveries,
    Delivery,
    Entry,
    Follow,
    Forward,
    Frame,
    FrameReader,
    Hello,
    Outcome,
    OutcomeFrame,
    ProtocolError,
    Refuse,
    Settle,
    Subscribe,
    Subscribed,
    SubscribeRefused,
    Welcome,
    encode,
)

M = Message(
    "ex",
    "rk",
    b"\x80\x00\x05hello",
    b"body" * 100,
    headers={"h": 1},
    priority=3,
    expiration_ms=500,
    persistent=True,
    message_id="m-1",
    timestamp_ms=1234,
)

FRAMES: list[Frame] = [
    Hello(3, b"n" * 16, b"m" * 32),
    Welcome(2),
    Refuse("no"),
    Forward(7, (Entry("/", ("q1", "q2"), M), Entry("vh", ("q3",), M), Entry("/", ("q1", "q2"), M))),
    Forward(1, ()),
    OutcomeFrame(9, ((8, 312),)),
    Subscribe(1, "/", "q", 10, True),
    Subscribe(2, "tenant-ä", "q", 0, False, True, {"x-priority": 5, "x-stream-offset": "first"}),
    Subscribed(1),
    SubscribeRefused(1, 404, "no queue"),
    Credit(1, 5),
    Deliveries(1, 4, (Delivery(True, 2, M),)),
    Settle(1, Outcome.REQUEUE, ((1, 3), (5, 5))),
    Cancel(1),
    Cancelled(1, "queue deleted", False),
    Follow(),
    Definitions(
        True,
        (
            DefinitionChange(4, "vhost", "/", {"name": "/"}),
            DefinitionChange(4, "queue", "/\x1fq-ä", {"arguments": {"$table": {}}, "shard": 1}),
        ),
    ),
    Definitions(False, (DefinitionChange(5, "binding", '["/","x"]', None),)),
    Ask(
        3,
        DefinitionRequest(
            "queue.declare",
            "vh-ä",
            {"name": "q", "durable": True, "arguments": {"x-max-length": 5, "raw": b"\x00\xff"}},
        ),
    ),
    Answer(3, 17),
    Answer(4, 0, 406, "PRECONDITION_FAILED - inequivalent arg"),
]


def _plain(value: object) -> object:
    """Frames compared by value: a `Message` compares by identity, so by its fields here."""
    if isinstance(value, Message):
        return tuple(getattr(value, f.name) for f in dataclasses.fields(value))
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return (type(value), *(_plain(getattr(value, f.name)) for f in dataclasses.fields(value)))
    if isinstance(value, tuple):
        return tuple(_plain(v) for v in value)
    return value


def _read(data: bytes) -> list[Frame]:
    reader = FrameReader()
    reader.feed(data)
    out = []
    while (f := reader.next_frame()) is not None:
        out.append(f)
    return out


@pytest.mark.parametrize("frame", FRAMES, ids=lambda f: type(f).__name__)
def test_each_frame_round_trips(frame: Frame) -> None:
    data = encode(frame)
    got = _read(data)
    assert [_plain(g) for g in got] == [_plain(frame)]
    # cut anywhere, it waits for the rest
    reader = FrameReader()
    reader.feed(data[:-1])
    assert reader.next_frame() is None
    reader.feed(data[-1:])
    assert _plain(reader.next_frame()) == _plain(frame)


_U32 = st.integers(0, 2**32 - 1)
_U64 = st.integers(0, 2**64 - 1)
_NAMES = st.one_of(st.sampled_from(["/", "q", "vh-ä"]), st.text(max_size=12))
_MESSAGES = st.one_of(
    st.just(M),
    st.builds(
        Message,
        st.text(max_size=8),
        st.text(max_size=8),
        st.just(b"\x00\x00"),
        st.binary(max_size=64),
        persistent=st.booleans(),
    ),
)
# what a field table gives back as it was given (ints as I or l, str as S, bytes as x)
_VALUES = st.one_of(
    st.integers(-(2**63), 2**63 - 1),
    st.booleans(),
    st.text(max_size=8),
    st.binary(max_size=8),
    st.none(),
)
_ARGUMENTS: st.SearchStrategy[dict[str, Any]] = st.dictionaries(
    st.text(max_size=12), st.one_of(_VALUES, st.lists(_VALUES, max_size=3)), max_size=4
)
_ENTRIES = st.builds(Entry, _NAMES, st.lists(_NAMES, max_size=3).map(tuple), _MESSAGES)
_FRAMES: st.SearchStrategy[Frame] = st.one_of(
    st.builds(Hello, _U32, st.binary(max_size=32), st.binary(max_size=32), st.integers(0, 65535)),
    st.builds(Welcome, _U32),
    st.builds(Refuse, st.text(max_size=40)),
    st.builds(Forward, _U64, st.lists(_ENTRIES, max_size=6).map(tuple)),
    st.builds(OutcomeFrame, _U64, st.lists(st.tuples(_U64, st.integers(0, 65535))).map(tuple)),
    st.builds(Subscribe, _U32, _NAMES, _NAMES, _U32, st.booleans(), st.booleans(), _ARGUMENTS),
    st.builds(Subscribed, _U32),
    st.builds(SubscribeRefused, _U32, st.integers(0, 65535), st.text(max_size=40)),
    st.builds(Credit, _U32, _U32),
    st.builds(
        Deliveries,
        _U32,
        _U64,
        st.lists(st.builds(Delivery, st.booleans(), _U32, _MESSAGES), max_size=4).map(tuple),
    ),
    st.builds(
        Settle,
        _U32,
        st.sampled_from(list(Outcome)),
        st.lists(st.tuples(_U64, _U64), max_size=4).map(tuple),
    ),
    st.builds(Cancel, _U32),
    st.builds(Cancelled, _U32, st.text(max_size=40), st.booleans()),
    st.builds(Follow),
    st.builds(
        Ask,
        _U64,
        st.builds(
            DefinitionRequest,
            st.sampled_from(["queue.declare", "queue.bind"]),
            _NAMES,
            st.dictionaries(st.text(max_size=6), st.one_of(_U32, st.text(max_size=6))),
        ),
    ),
    st.builds(Answer, _U64, _U64, st.integers(0, 65535), st.text(max_size=40)),
    st.builds(
        Definitions,
        st.booleans(),
        st.lists(
            st.builds(
                DefinitionChange,
                _U64,
                st.sampled_from(["vhost", "queue", "binding"]),
                st.text(max_size=20),
                st.one_of(
                    st.none(),
                    st.dictionaries(st.text(max_size=6), st.one_of(_U32, st.text(max_size=6))),
                ),
            ),
            max_size=4,
        ).map(tuple),
    ),
)


@given(_FRAMES)
def test_any_frame_round_trips(frame: Frame) -> None:
    data = encode(frame)
    assert [_plain(g) for g in _read(data)] == [_plain(frame)]
    # fed byte by byte, and followed by the start of another frame
    reader = FrameReader()
    got = []
    for i in range(len(data)):
        reader.feed(data[i : i + 1])
        while (f := reader.next_frame()) is not None:
            got.append(f)
    reader.feed(data[:3])
    assert reader.next_frame() is None
    assert [_plain(g) for g in got] == [_plain(frame)]


@given(st.binary(max_size=300))
def test_garbage_raises_protocol_error_only(data: bytes) -> None:
    try:
        _read(data)
    except ProtocolError:
        pass


@given(st.one_of(st.sampled_from(FRAMES), _FRAMES), st.data())
def test_a_damaged_frame_raises_protocol_error_only(frame: Frame, data: st.DataObject) -> None:
    raw = bytearray(encode(frame))
    if len(raw) <= 5:
        return  # nothing but the header: the frame reader's own checks
    at = data.draw(st.integers(5, len(raw) - 1))
    raw[at] ^= data.draw(st.integers(1, 255))
    try:
        _read(bytes(raw) + b"\x00" * 8)
    except ProtocolError:
        pass


def test_a_forward_names_each_route_once() -> None:
    vhost, queue = "tenant-with-a-long-name", "orders.eu-west.priority-high"
    data = encode(Forward(1, tuple(Entry(vhost, (queue,), M) for _ in range(100))))
    assert data.count(vhost.encode()) == 1
    assert data.count(queue.encode()) == 1
    [got] = _read(data)
    assert isinstance(got, Forward)
    assert {(e.vhost, e.queues) for e in got.entries} == {(vhost, (queue,))}
    with pytest.raises(ValueError, match="at most"):
        encode(Forward(1, (Entry("/", ("q",), M),) * (MAX_ENTRIES + 1)))


def test_a_forward_entry_naming_no_route_breaks_the_link() -> None:
    raw = bytearray(encode(Forward(1, (Entry("/", ("q",), M),))))
    at = raw.index(b"\x00\x00\x00\x01\x00\x00", 5 + 8) + 4  # entry count 1, route index 0
    raw[at : at + 2] = b"\x00\x01"
    with pytest.raises(ProtocolError, match="route 1 of 1"):
        _read(bytes(raw))


def test_unknown_subscribe_flags_and_bad_arguments_break_the_link() -> None:
    raw = bytearray(encode(Subscribe(1, "/", "q", 1, False)))
    raw[5 + 8] = 4  # a flag this version does not know
    with pytest.raises(ProtocolError, match="unknown subscribe flags"):
        _read(bytes(raw))
    raw = bytearray(encode(Subscribe(1, "/", "q", 1, False, False, {"x-priority": 1})))
    raw[raw.index(b"x-priority") + len("x-priority")] = ord("?")  # no such field type
    with pytest.raises(ProtocolError, match="bad consumer arguments"):
        _read(bytes(raw))


def _pair(secret: bytes = b"s") -> tuple[o.OriginSession, w.OwnerSession, list[w.Event]]:
    origin, owner = o.OriginSession(1, b"s"), w.OwnerSession(2, secret)
    events = owner.receive_data(origin.data_to_send())
    return origin, owner, events


def test_a_wrong_secret_is_refused_and_ends_both_sides() -> None:
    origin, owner, events = _pair(b"other")
    assert events == [w.Closed("bad secret")]
    assert owner.closed
    assert origin.receive_data(owner.data_to_send()) == [
        o.Refused("shard link refused: bad secret")
    ]
    assert origin.closed
    with pytest.raises(ValueError):
        origin.forward("/", ("q",), M)


def test_a_gap_in_the_forwards_breaks_the_link() -> None:
    _, owner, events = _pair()
    assert events == [w.Opened(1)]
    with pytest.raises(ProtocolError, match="forward from 3, 1 due"):
        owner.receive_data(encode(Forward(3, (Entry("/", ("q",), M),))))


def test_deliveries_beyond_the_credit_break_the_link() -> None:
    origin, owner, _ = _pair()
    origin.receive_data(owner.data_to_send())
    cid = origin.subscribe("/", "q", 1)
    owner.receive_data(origin.data_to_send())
    owner.subscribed(cid)
    origin.receive_data(owner.data_to_send())
    twice = Deliveries(cid, 1, (Delivery(False, 0, M), Delivery(False, 0, M)))
    with pytest.raises(ProtocolError, match="2 deliveries to consumer 1 with credit 1"):
        origin.receive_data(encode(twice))


def test_an_outcome_beyond_what_was_forwarded_breaks_the_link() -> None:
    origin, owner, _ = _pair()
    origin.receive_data(owner.data_to_send())
    origin.forward("/", ("q",), M)
    with pytest.raises(ProtocolError, match="outcome up to 2 of 1 forwarded"):
        origin.receive_data(encode(OutcomeFrame(2, ())))


def test_settling_a_tag_not_outstanding_is_the_callers_bug() -> None:
    origin, owner, _ = _pair()
    origin.receive_data(owner.data_to_send())
    cid = origin.subscribe("/", "q", 2)
    owner.receive_data(origin.data_to_send())
    owner.subscribed(cid)
    owner.deliver(cid, False, 0, M)
    origin.receive_data(owner.data_to_send())
    with pytest.raises(ValueError, match="not outstanding"):
        origin.settle(cid, Outcome.ACK, [2])
    origin.settle(cid, Outcome.ACK, [1])
    assert owner.receive_data(origin.data_to_send()) == [w.Settled(cid, Outcome.ACK, (1,))]


def test_forwards_in_one_write_cross_as_batches_in_order() -> None:
    origin, owner, _ = _pair()
    big = Message("", "rk", b"\x00\x00", b"x" * 100_000)
    seqs = [origin.forward("/", ("q",), big) for _ in range(6)]
    assert seqs == [1, 2, 3, 4, 5, 6]
    events = owner.receive_data(origin.data_to_send())
    received = [e for e in events if isinstance(e, w.Received)]
    assert len(received) > 1  # split near BATCH_BYTES
    assert [e.first for e in received] == [1] + [
        received[0].first + sum(len(r.entries) for r in received[:i])
        for i in range(1, len(received))
    ]
    for seq in (2, 1, 3):
        owner.accept(seq)
    owner.reject(5, 312)
    resolved = [e for e in origin.receive_data(owner.data_to_send()) if isinstance(e, o.Resolved)]
    assert resolved == [o.Resolved(1, 3, {})]
    owner.accept(4)
    owner.accept(6)
    resolved = [e for e in origin.receive_data(owner.data_to_send()) if isinstance(e, o.Resolved)]
    assert resolved == [o.Resolved(4, 6, {5: 312})]
    assert origin.unresolved == 0


def test_a_subscribe_carries_its_vhost_flags_and_arguments() -> None:
    origin, owner, _ = _pair()
    origin.receive_data(owner.data_to_send())
    with pytest.raises(TypeError, match="no AMQP field type"):
        origin.subscribe("/", "q", 1, arguments={"x-priority": object()})
    cid = origin.subscribe("vh", "q", 3, exclusive=True, arguments={"x-priority": 7})
    assert cid == 1  # the refused one asked nothing and took no id
    assert owner.receive_data(origin.data_to_send()) == [
        w.SubscribeAsked(cid, "vh", "q", 3, False, True, {"x-priority": 7})
    ]


def test_a_forward_batch_of_empty_messages_stays_below_the_entry_limit() -> None:
    origin, owner, _ = _pair()
    tiny = Message("", "", b"", b"")
    for _ in range(5000):
        origin.forward("/", ("q",), tiny)
    received = [e for e in owner.receive_data(origin.data_to_send()) if isinstance(e, w.Received)]
    assert sum(len(e.entries) for e in received) == 5000
    assert max(len(e.entries) for e in received) < MAX_ENTRIES
