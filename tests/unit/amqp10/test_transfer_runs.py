"""The receiving fast path (`transfers.take`, `Connection(message_runs=True)`) against the
general path: the same frames fed to both machines give the same messages, the same frames
back (flows, detaches, ends, closes) and the same window and credit, whatever the forms of
the Transfer (every constructor a field may take, multi-frame, aborted, transactional, on an
unknown handle, too large, past the window) and however the bytes arrive."""

from __future__ import annotations

import struct
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from ringmq.amqp10 import events as ev
from ringmq.amqp10 import performatives as p
from ringmq.amqp10.connection import Connection
from ringmq.amqp10.frames import AMQP_HEADER, SASL_HEADER, encode_frame

_U32 = struct.Struct(">I")
MAX_MESSAGE = 24


def _machine(runs: bool, window: int) -> Connection:
    conn = Connection(
        container_id="ringmq",
        max_frame_size=4096,
        channel_max=7,
        idle_timeout_ms=0,
        max_message_size=MAX_MESSAGE,
        message_runs=runs,
    )
    init = p.SaslInit(mechanism="PLAIN", initial_response=b"\0u\0pw")
    conn.receive_data(SASL_HEADER + encode_frame(0, init))
    conn.sasl_outcome(True)
    begin = p.Begin(next_outgoing_id=0, incoming_window=window, outgoing_window=100)
    conn.receive_data(
        AMQP_HEADER
        + encode_frame(0, p.Open(container_id="c", max_frame_size=4096))
        + encode_frame(1, begin)
    )
    for handle in (0, 1):
        a = p.Attach(name=f"s{handle}", handle=handle, role=p.ROLE_SENDER, target=p.Target("q"))
        (attaching,) = conn.receive_data(encode_frame(1, a))
        assert isinstance(attaching, ev.LinkAttaching)
        conn.attach(1, attaching.attach, source=None, target=a.target)
    a = p.Attach(name="r", handle=2, role=p.ROLE_RECEIVER, source=p.Source("q"))
    (attaching,) = conn.receive_data(encode_frame(1, a))
    assert isinstance(attaching, ev.LinkAttaching)
    conn.attach(1, attaching.attach, source=a.source, target=None)
    conn.data_to_send()
    return conn


def _uint(draw: Any, v: int) -> bytes:
    forms = [b"\x70" + _U32.pack(v)]
    if v < 256:
        forms.append(bytes((0x52, v)))
    if v == 0:
        forms.append(b"\x43")
    return draw(st.sampled_from(forms))  # type: ignore[no-any-return]


@st.composite
def transfer_frame(draw: Any, delivery_id: int) -> bytes:
    """One transfer frame in any of the forms a sender may use (most of them whole messages
    in the fast path's form, some not)."""
    handle = draw(st.sampled_from([0, 0, 0, 1, 2, 5]))  # 2: a receiving link, 5: unattached
    fields = [_uint(draw, handle)]
    if draw(st.integers(0, 30)) == 0:
        fields.append(b"\x40")  # no delivery id on a first transfer: not allowed
    else:
        fields.append(_uint(draw, delivery_id))
    tail = [
        draw(st.sampled_from([b"\x40", b"\xa0\x00", b"\xa0\x02ab", b"\xb0\x00\x00\x00\x01t"])),
        draw(
            st.sampled_from([b"\x40", b"\x43", b"\x52\x00", b"\x70\x00\x00\x00\x00", b"\x52\x07"])
        ),
        draw(st.sampled_from([b"\x40", b"\x41", b"\x42"])),  # settled
        draw(st.sampled_from([b"\x40", b"\x42", b"\x42", b"\x41"])),  # more
        draw(st.sampled_from([b"\x40", b"\x40", b"\x50\x01"])),  # rcv-settle-mode
        draw(st.sampled_from([b"\x40", b"\x40", b"\x40", b"\x00\x53\x24\x45"])),  # state
        draw(st.sampled_from([b"\x40", b"\x42", b"\x41"])),  # resume
        draw(st.sampled_from([b"\x40", b"\x42", b"\x42", b"\x41"])),  # aborted
        draw(st.sampled_from([b"\x40", b"\x41", b"\x42"])),  # batchable
    ]
    fields += tail[: draw(st.integers(0, len(tail)))]
    items = b"".join(fields)
    body = b"\x00\x53\x14\xc0" + bytes((len(items) + 1, len(fields))) + items
    payload = draw(st.binary(max_size=MAX_MESSAGE + 4))
    frame = body + payload
    return bytes(struct.pack(">IBBH", 8 + len(frame), 2, 0, 1) + frame)


@st.composite
def traffic(draw: Any) -> list[bytes]:
    """Transfers with mostly consecutive delivery ids, and now and then a continuation of a
    multi-frame message, a flow, a heartbeat or a disposition in between."""
    frames = []
    did = draw(st.sampled_from([0, 250, 2**32 - 3]))
    for _ in range(draw(st.integers(1, 40))):
        kind = draw(st.integers(0, 12))
        if kind == 0:
            frames.append(encode_frame(1, p.Transfer(handle=0, more=draw(st.booleans())), b"c"))
        elif kind == 1:
            frames.append(b"\x00\x00\x00\x08\x02\x00\x00\x00")  # heartbeat
        elif kind == 2:
            flow = p.Flow(
                next_incoming_id=0, incoming_window=100, next_outgoing_id=did,
                outgoing_window=100, handle=0, delivery_count=did, link_credit=1000,
                echo=draw(st.booleans()),
            )  # fmt: skip
            frames.append(encode_frame(1, flow))
        else:
            frames.append(draw(transfer_frame(did)))
            did = (did + draw(st.sampled_from([1, 1, 1, 1, 0, 2]))) % 2**32
    return frames


def _messages(events: list[Any]) -> list[Any]:
    # runs as the messages they stand for (the fast path carries no delivery tag: the broker
    # does not read it)
    out: list[Any] = []
    for e in events:
        if isinstance(e, ev.MessagesReceived):
            for i, payload in enumerate(e.payloads):
                out.append(("msg", e.channel, e.handle, e.first_id + i, e.settled, payload))
        elif isinstance(e, ev.MessageReceived):
            if e.state is None and e.message_format == 0:
                out.append(("msg", e.channel, e.handle, e.delivery_id, e.settled, e.payload))
            else:
                out.append(e)
        else:
            out.append(e)
    return out


def _state(conn: Connection) -> Any:
    return (
        conn.state,
        [
            (s.channel, s.incoming_left, s.next_incoming_id, s.ending,
             [(k, v.delivery_count, v.credit, v.detaching, v.size) for k, v in s.links.items()])
            for s in conn.sessions.values()
        ],
    )  # fmt: skip


def _feed(conn: Connection, data: bytes, cuts: list[int]) -> tuple[list[Any], bytes]:
    events: list[Any] = []
    out = []
    start = 0
    for cut in [*sorted(cuts), len(data)]:
        events += conn.receive_data(data[start:cut])
        out.append(conn.data_to_send())
        start = cut
    return events, b"".join(out)


@settings(max_examples=150, deadline=None)
@given(traffic(), st.sampled_from([3, 100, 70000]), st.data())
def test_runs_and_the_general_path_agree(frames: list[bytes], window: int, data: Any) -> None:
    stream = b"".join(frames)
    cuts = data.draw(st.lists(st.integers(0, len(stream)), max_size=6))
    fast, general = _machine(True, window), _machine(False, window)
    fast_events, fast_out = _feed(fast, stream, cuts)
    general_events, general_out = _feed(general, stream, cuts)
    assert _messages(fast_events) == _messages(general_events)
    assert fast_out == general_out
    assert _state(fast) == _state(general)


def test_a_run_is_one_event_per_link_and_settlement() -> None:
    conn = _machine(True, 100)

    def t(handle: int, did: int, settled: bool) -> bytes:
        return encode_frame(
            1, p.Transfer(handle=handle, delivery_id=did, delivery_tag=b"t", settled=settled), b"m"
        )

    frames = [t(0, 0, True), t(0, 1, True), t(0, 2, False), t(1, 3, False), t(1, 4, False)]
    got = [e for e in conn.receive_data(b"".join(frames)) if isinstance(e, ev.MessagesReceived)]
    assert [(e.handle, e.first_id, e.settled, len(e.payloads)) for e in got] == [
        (0, 0, True, 2),
        (0, 2, False, 1),
        (1, 3, False, 2),
    ]


def test_a_transactional_transfer_goes_the_general_way() -> None:
    conn = _machine(True, 100)
    state = p.TransactionalState(txn_id=b"x")
    frame = encode_frame(1, p.Transfer(handle=0, delivery_id=0, state=state), b"m")
    (got,) = conn.receive_data(frame)
    assert isinstance(got, ev.MessageReceived)
    assert got.state == state
