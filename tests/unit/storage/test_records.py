from __future__ import annotations

import struct

from hypothesis import given
from hypothesis import strategies as st

from ringmq.core.message import Message, SeqId
from ringmq.storage.records import (
    HEADER_SIZE,
    Entry,
    RecordType,
    decode_ack,
    decode_delivery,
    decode_entry,
    decode_purge,
    encode_ack,
    encode_delivery,
    encode_entry,
    encode_purge,
    frame,
    scan,
)

names = st.text(max_size=20)
opt_ms = st.none() | st.integers(0, 2**62)


@given(st.lists(st.tuples(st.integers(1, 255), st.binary(max_size=64)), max_size=20))
def test_frame_scan_roundtrip(items: list[tuple[int, bytes]]) -> None:
    data = b"".join(frame(t, p) for t, p in items)
    records, end = scan(data)
    assert end == len(data)
    assert [(r.rtype, bytes(r.payload)) for r in records] == items


@given(
    st.lists(st.binary(min_size=1, max_size=32), min_size=1, max_size=8),
    st.data(),
)
def test_scan_stops_at_any_cut(payloads: list[bytes], data: st.DataObject) -> None:
    blob = b"".join(frame(RecordType.ENQUEUE, p) for p in payloads)
    cut = data.draw(st.integers(0, len(blob) - 1))
    records, end = scan(blob[:cut])
    # only whole records before the cut survive, and the good prefix ends on a boundary
    boundaries = [0]
    for p in payloads:
        boundaries.append(boundaries[-1] + HEADER_SIZE + len(p))
    whole = max(i for i, b in enumerate(boundaries) if b <= cut)
    assert len(records) == whole
    assert end == boundaries[whole]


def test_scan_detects_bit_flip() -> None:
    blob = bytearray(frame(RecordType.ACK, b"hello") + frame(RecordType.ACK, b"world"))
    blob[-1] ^= 0x01
    records, end = scan(blob)
    assert [bytes(r.payload) for r in records] == [b"hello"]
    assert end == HEADER_SIZE + 5


def test_scan_rejects_absurd_length() -> None:
    blob = struct.pack("<IIB", 0xFFFFFFFF, 0, 1) + b"x" * 10
    assert scan(blob) == ([], 0)


@given(
    queue=names,
    seq=st.integers(0, 2**63),
    exchange=names,
    routing_key=names,
    props=st.binary(max_size=30),
    body=st.binary(max_size=100),
    priority=st.integers(0, 255),
    expiration=opt_ms,
    persistent=st.booleans(),
    message_id=st.none() | names,
    count=st.integers(0, 2**32 - 1),
    expiry=opt_ms,
    due=opt_ms,
    redelivered=st.booleans(),
    ref=st.integers(0, 2**64 - 1),
    headers=st.none()
    | st.dictionaries(
        st.text(max_size=8), st.integers(-(2**31), 2**31 - 1) | st.booleans() | st.text(max_size=8)
    ),
)
def test_entry_roundtrip(
    queue: str,
    seq: int,
    exchange: str,
    routing_key: str,
    props: bytes,
    body: bytes,
    priority: int,
    expiration: int | None,
    persistent: bool,
    message_id: str | None,
    count: int,
    expiry: int | None,
    due: int | None,
    redelivered: bool,
    ref: int,
    headers: dict[str, object] | None,
) -> None:
    msg = Message(
        exchange,
        routing_key,
        props,
        body,
        priority=priority,
        expiration_ms=expiration,
        persistent=persistent,
        message_id=message_id,
        timestamp_ms=123,
        headers=headers,
    )
    entry = Entry(queue, SeqId(seq), msg, count, expiry, due, redelivered, body_ref=ref)
    back = decode_entry(encode_entry(entry))
    assert (back.queue, back.seq, back.delivery_count, back.expiry_ms, back.due_ms) == (
        queue,
        seq,
        count,
        expiry,
        due,
    )
    assert back.redelivered == redelivered
    m = back.message
    assert (m.exchange, m.routing_key, m.properties_bin, m.priority) == (
        exchange,
        routing_key,
        props,
        priority,
    )
    assert (m.expiration_ms, m.persistent, m.message_id, m.timestamp_ms) == (
        expiration,
        persistent,
        message_id,
        123,
    )
    assert m.headers == headers
    if ref:
        assert back.body_ref == ref
        assert m.body == b""
    else:
        assert m.body == body


def test_small_payloads_roundtrip() -> None:
    q, seqs = decode_ack(memoryview(encode_ack("q/é", [1, 5, 2**63])))
    assert (q, seqs) == ("q/é", (1, 5, 2**63))
    assert decode_delivery(memoryview(encode_delivery("q", 7, 3))) == ("q", 7, 3, None)
    assert decode_purge(memoryview(encode_purge("q", 99))) == ("q", 99)


@given(names, st.integers(0, 2**64 - 1), st.integers(0, 2**32 - 1), opt_ms)
def test_delivery_count_with_a_due_time_roundtrip(
    queue: str, seq: int, count: int, due_ms: int | None
) -> None:
    # A delayed redelivery journals its due time after the count (records.encode_delivery).
    payload = encode_delivery(queue, seq, count, due_ms)
    assert decode_delivery(memoryview(payload)) == (queue, seq, count, due_ms)


def test_delivery_count_without_a_due_time_keeps_the_old_layout() -> None:
    # Journals written before due times existed hold exactly this: they decode as no due time,
    # and a record without one is still written the old way.
    raw = "q/é".encode()
    old = struct.pack("<H", len(raw)) + raw + struct.pack("<QI", 7, 3)
    assert encode_delivery("q/é", 7, 3) == old
    assert decode_delivery(memoryview(old)) == ("q/é", 7, 3, None)
    assert encode_delivery("q/é", 7, 3, 5).startswith(old)
