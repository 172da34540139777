"""AMQP 1.0 performatives: round trips of every composite, the hot-path encoders against the
generic one, malformed bodies, and proton's engine reading ours and writing what we read."""

from __future__ import annotations

import dataclasses
from typing import Any

import proton
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from ringmq.amqp10 import performatives as pf
from ringmq.amqp10.codec import encode
from ringmq.amqp10.composite import Composite, decode_composite
from ringmq.amqp10.frames import (
    AMQP_HEADER,
    Frame,
    FrameReader,
    encode_body_frame,
    encode_frame,
)
from ringmq.amqp10.hotpath import transfer_frame, transfer_frame_head
from ringmq.amqp10.types import DecodeError, Described, Symbol, UInt, ULong

_ASCII = st.text(st.characters(max_codepoint=127), max_size=12)
_SIMPLE = st.one_of(st.none(), st.booleans(), st.integers(-(2**63), 2**63 - 1), st.text(max_size=8))


def _kind(kind: str) -> st.SearchStrategy[Any]:
    k = kind.rstrip("!")
    return {
        "uint": st.integers(0, 2**32 - 1),
        "ulong": st.integers(0, 2**64 - 1),
        "ushort": st.integers(0, 2**16 - 1),
        "ubyte": st.integers(0, 255),
        "bool": st.booleans(),
        "string": st.text(max_size=12),
        "symbol": _ASCII,
        "binary": st.binary(max_size=12),
        "map": st.dictionaries(_ASCII, _SIMPLE, max_size=3),
        "symbols": st.lists(_ASCII, max_size=3).map(tuple),
        "any": _SIMPLE,
        "error": st.deferred(lambda: composite(pf.Error)),
        "state": st.deferred(lambda: st.one_of(*(composite(c) for c in _STATES))),
        "outcome": st.deferred(lambda: st.one_of(*(composite(c) for c in _OUTCOMES))),
        "source": st.deferred(lambda: composite(pf.Source)),
        "target": st.deferred(lambda: composite(pf.Target) | composite(pf.Coordinator)),
    }[k]


_OUTCOMES = (pf.Accepted, pf.Rejected, pf.Released, pf.Modified, pf.Declared)
_STATES = (pf.Received, *_OUTCOMES, pf.TransactionalState)


def composite(cls: type[Composite]) -> st.SearchStrategy[Any]:
    """Instances of ``cls``: every field drawn, None only where None is the default."""
    args = {}
    for f, kind in zip(dataclasses.fields(cls), cls.FIELDS, strict=True):  # type: ignore[arg-type]
        value = _kind(kind)
        args[f.name] = value if f.default is not None or kind.endswith("!") else st.none() | value
    return st.builds(cls, **args)


@pytest.mark.parametrize("cls", pf.ALL_COMPOSITES, ids=lambda c: c.__name__)
@given(data=st.data())
def test_round_trip_every_composite(cls: type[Composite], data: st.DataObject) -> None:
    v = data.draw(composite(cls))
    raw = v.encode()
    got, end = decode_composite(raw + b"tail")
    assert got == v
    assert end == len(raw)
    # by name instead of code
    described = v.described()
    named = encode(Described(Symbol(cls.NAME), described.value))
    assert decode_composite(named)[0] == v
    if cls in pf.FRAME_BODIES + pf.SASL_BODIES:
        assert pf.decode_performative(raw + b"payload") == (v, len(raw))


@given(
    handle=st.integers(0, 2**32 - 1),
    delivery_id=st.integers(0, 2**32 - 1),
    tag=st.binary(max_size=300),
    fmt=st.integers(0, 2**32 - 1),
    settled=st.booleans(),
    more=st.booleans(),
)
def test_transfer_hot_path_is_the_generic_encoding(
    handle: int, delivery_id: int, tag: bytes, fmt: int, settled: bool, more: bool
) -> None:
    t = pf.Transfer(handle, delivery_id, tag, fmt, settled, more)
    assert pf.encode_transfer(handle, delivery_id, tag, fmt, settled, more) == encode(t.described())
    assert t.encode() == encode(t.described())


@given(
    channel=st.integers(0, 2**16 - 1),
    handle=st.integers(0, 255),
    delivery_id=st.integers(256, 2**32 - 1),
    tag=st.binary(min_size=8, max_size=8),
    settled=st.booleans(),
    payload=st.binary(max_size=300),
)
@example(channel=0, handle=0, delivery_id=256, tag=bytes(8), settled=False, payload=b"")
@example(channel=1, handle=1, delivery_id=2**32 - 1, tag=bytes(8), settled=True, payload=b"x")
def test_transfer_frame_from_a_links_head_is_the_generic_frame(
    channel: int, handle: int, delivery_id: int, tag: bytes, settled: bool, payload: bytes
) -> None:
    head = transfer_frame_head(channel, handle)
    assert head is not None
    generic = encode_body_frame(
        channel, pf.encode_transfer(handle, delivery_id, tag, 0, settled), payload
    )
    assert transfer_frame(head, delivery_id, tag, settled, payload) == generic
    assert transfer_frame_head(channel, handle + 256) is None


@given(
    role=st.booleans(),
    first=st.integers(0, 2**32 - 1),
    last=st.none() | st.integers(0, 2**32 - 1),
    settled=st.booleans(),
    state=st.sampled_from(
        [None, pf.Accepted(), pf.Released(), pf.Rejected(pf.Error("amqp:not-found"))]
    ),
)
def test_disposition_hot_path_is_the_generic_encoding(
    role: bool, first: int, last: int | None, settled: bool, state: Any
) -> None:
    d = pf.Disposition(role, first, last, settled, state)
    assert d.encode() == encode(d.described())
    assert pf.decode_performative(d.encode())[0] == d


@given(
    role=st.booleans(),
    first=st.integers(0, 2**32 - 1),
    last=st.none() | st.integers(0, 2**32 - 1),
    settled=st.booleans(),
    state=st.sampled_from(
        [None, pf.Accepted(), pf.Released(), pf.Modified(True), pf.Received(1, 2)]
    ),
    batchable=st.booleans(),
    cut=st.none() | st.integers(0, 40),
)
def test_disposition_fast_path_agrees_with_the_generic_decoder(
    role: bool,
    first: int,
    last: int | None,
    settled: bool,
    state: Any,
    batchable: bool,
    cut: int | None,
) -> None:
    body = pf.Disposition(role, first, last, settled, state, batchable).encode()
    if cut is not None:
        body = body[: min(cut, len(body) - 1)]
    try:
        want = decode_composite(body)
    except DecodeError:
        with pytest.raises(DecodeError):
            pf.decode_performative(body)
    else:
        assert pf.decode_performative(body) == want


_U32 = st.integers(0, 2**32 - 1)


@given(
    fields=st.tuples(
        st.none() | _U32, _U32, _U32, _U32, *([st.none() | _U32] * 4), st.booleans(), st.booleans()
    ),
    properties=st.none() | st.just({"k": 1}),
    cut=st.none() | st.integers(0, 60),
)
def test_flow_fast_paths_agree_with_the_generic_ones(
    fields: tuple[Any, ...], properties: Any, cut: int | None
) -> None:
    flow = pf.Flow(*fields, properties)  # type: ignore[call-arg]
    body = flow.encode()
    assert body == encode(flow.described())
    if cut is not None:
        body = body[: min(cut, len(body) - 1)]
    try:
        want = decode_composite(body)
    except DecodeError:
        with pytest.raises(DecodeError):
            pf.decode_performative(body)
    else:
        got = pf.decode_performative(body)
        assert got == want
        assert type(got[0].drain) is bool  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("value", "match"),
    [
        (Described(ULong(0x10), []), "mandatory field container_id"),
        (Described(ULong(0x14), ["x"]), "'x' where an integer"),
        (Described(ULong(0x14), [-1]), "-1 where an integer in"),
        (Described(ULong(0x14), [True]), "True where an integer"),
        (Described(ULong(0x11), [ULong(70000)]), "70000 where an integer in \\[0, 65535\\]"),
        (Described(ULong(0x14), [UInt(0), None, [1]]), "list where bytes"),
        (Described(ULong(0x99), []), "unknown descriptor"),
        (Described(Symbol("amqp:nothing:list"), []), "unknown descriptor"),
        (Described(ULong(0x18), {}), "a list expected"),
        (Described(ULong(0x18), [Described(ULong(0x24), [])]), "Accepted where error"),
        (Described(ULong(0x24), []), "not a frame body"),
        ([1], "described type expected"),
        (Described(ULong(0x10), ["c", None, None, None, None, UInt(3)]), "symbol or an array"),
    ],
)
def test_malformed_performatives(value: Any, match: str) -> None:
    with pytest.raises(DecodeError, match=match):
        pf.decode_performative(encode(value))


def test_later_spec_fields_are_ignored_and_missing_ones_default() -> None:
    body = encode(Described(ULong(0x17), [None, "extra"]))
    assert pf.decode_performative(body)[0] == pf.End()
    flow = encode(Described(ULong(0x13), [None, UInt(1), UInt(2), UInt(3)]))
    got = pf.decode_performative(flow)[0]
    assert got == pf.Flow(None, 1, 2, 3)
    assert got.drain is False


def test_single_symbol_capabilities_are_a_tuple() -> None:
    body = encode(Described(ULong(0x10), ["c", None, None, None, None, None, None, Symbol("X")]))
    assert pf.decode_performative(body)[0].offered_capabilities == ("X",)  # type: ignore[union-attr]


# --- proton's engine as the other peer --------------------------------------------------------


def _frames(data: bytes, *, header: bool = True) -> list[Any]:
    reader = FrameReader(expect_header=header)
    reader.feed(data)
    out = []
    while (f := reader.next_frame()) is not None:
        if isinstance(f, Frame) and f.body:
            p, off = pf.decode_performative(f.body)
            out.append((p, f.body[off:]))
    return out


def _drain(t: proton.Transport) -> bytes:
    out = t.peek(t.pending()) or b""
    t.pop(len(out))
    return bytes(out)


def _server_frames(credit: int) -> bytes:
    return (
        AMQP_HEADER
        + encode_frame(0, pf.Open("ringmq", max_frame_size=512, idle_time_out=60000))
        + encode_frame(0, pf.Begin(0, 0, 100, 100))
        + encode_frame(
            0, pf.Attach("lnk", 0, pf.ROLE_RECEIVER, 1, 0, pf.Source("s"), pf.Target("q"))
        )
        + encode_frame(0, pf.Flow(0, 100, 0, 100, 0, 0, credit))
    )


def test_proton_reads_ours_and_we_read_protons() -> None:
    c = proton.Connection()
    c.container = "client-1"
    c.hostname = "example"
    c.offered_capabilities = proton.SymbolList([proton.symbol("ANONYMOUS-RELAY")])
    c.properties = {proton.symbol("product"): "pytest"}
    t = proton.Transport()
    t.bind(c)
    c.open()
    s = c.session()
    s.open()
    snd = s.sender("lnk")
    snd.target.address = "q"
    snd.source.address = "s"
    snd.target.capabilities.put_array(False, proton.Data.SYMBOL)
    snd.target.capabilities.enter()
    snd.target.capabilities.put_symbol("queue")
    snd.target.capabilities.exit()
    snd.open()
    got = [p for p, _ in _frames(_drain(t))]
    assert [type(p) for p in got] == [pf.Open, pf.Begin, pf.Attach]
    opened, begun, attached = got
    assert opened.container_id == "client-1"
    assert opened.hostname == "example"
    assert opened.offered_capabilities == ("ANONYMOUS-RELAY",)
    assert opened.properties == {"product": "pytest"}
    assert begun.remote_channel is None
    assert attached.name == "lnk"
    assert attached.role is pf.ROLE_SENDER
    assert attached.target.address == "q"
    assert attached.target.capabilities == ("queue",)
    # our answer, read by proton
    t.push(_server_frames(credit=10))
    assert c.remote_container == "ringmq"
    assert t.remote_max_frame_size == 512
    assert t.remote_idle_timeout == 60.0
    assert snd.credit == 10
    assert snd.remote_snd_settle_mode == proton.Link.SND_SETTLED
    # a transfer larger than our max-frame-size: proton splits it, we read every piece
    delivery = snd.delivery("tag1")
    snd.send(b"x" * 1200)
    snd.advance()
    transfers = _frames(_drain(t), header=False)
    assert all(type(p) is pf.Transfer for p, _ in transfers)
    assert len(transfers) >= 3
    first = transfers[0][0]
    assert (first.handle, first.delivery_id, first.delivery_tag) == (0, 0, b"tag1")
    assert [p.more for p, _ in transfers] == [True] * (len(transfers) - 1) + [False]
    assert b"".join(payload for _, payload in transfers) == b"x" * 1200
    # our disposition settles it on proton's side
    assert delivery.remote_state == 0
    t.push(encode_frame(0, pf.Disposition(pf.ROLE_RECEIVER, 0, None, True, pf.Accepted())))
    assert delivery.remote_state == proton.Delivery.ACCEPTED
    assert delivery.settled


def test_proton_receiver_reads_our_multi_frame_transfer() -> None:
    from ringmq.amqp10.frames import encode_transfer_frames

    c = proton.Connection()
    t = proton.Transport()
    t.bind(c)
    c.open()
    s = c.session()
    s.open()
    rcv = s.receiver("lnk")
    rcv.source.address = "q"
    rcv.open()
    rcv.flow(5)
    _drain(t)
    t.push(
        AMQP_HEADER
        + encode_frame(0, pf.Open("ringmq"))
        + encode_frame(0, pf.Begin(0, 0, 100, 100))
        + encode_frame(
            0,
            pf.Attach(
                "lnk",
                0,
                pf.ROLE_SENDER,
                source=pf.Source("q"),
                target=pf.Target(),
                initial_delivery_count=0,
            ),
        )
    )
    payload = bytes(range(256)) * 20
    t.push(encode_transfer_frames(0, 0, 0, b"t0", payload, settled=False, max_frame_size=600))
    d = rcv.current
    assert d is not None
    assert not d.partial
    assert d.tag == "t0"
    assert rcv.recv(len(payload) + 10) == payload
    d.update(proton.Delivery.ACCEPTED)
    d.settle()
    out = [p for p, _ in _frames(_drain(t), header=False)]
    dispositions = [p for p in out if type(p) is pf.Disposition]
    assert dispositions == [pf.Disposition(pf.ROLE_RECEIVER, 0, None, True, pf.Accepted())]
