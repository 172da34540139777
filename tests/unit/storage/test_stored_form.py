"""The message form on disk: a 1.0 message survives the journal (a restart) and a page-out
with its form; a record written before forms existed reads as form 0 (AMQP 0-9-1)."""

from __future__ import annotations

from pathlib import Path

import proton
import pytest

from ringmq.adapters.amqp10 import FORM_AMQP10, build, payload_for_amqp10
from ringmq.core.message import FORM_AMQP091, Message, SeqId
from ringmq.storage.paging import PageQueue
from ringmq.storage.records import Entry, decode_entry, encode_entry, entry_head
from ringmq.storage.store import FileStore

PAYLOAD = bytes(
    proton.Message(
        body=b"persisted", inferred=True, durable=True, properties={"k": "v"}, id="m-1"
    ).encode()
)

# An ENQUEUE payload written by the records codec before forms existed (queue "q1", seq 7,
# exchange "ex", routing key "rk", message id "mid-1", headers {"h": 1}, delivery count 2).
OLD_RECORD = bytes.fromhex(
    "0700000000000000fb03020000000068e5cf8b01000009000000000000000000000000000000f40100000000"
    "000002020502000300000071316578726b6d69642d3100000007016849000000011000026f6c6420626f6479"
)


def _m10() -> Message:
    return build(PAYLOAD, exchange="ex", routing_key="q", now_ms=1_000)


def _same(got: Message, want: Message) -> None:
    for f in (
        "exchange",
        "routing_key",
        "properties_bin",
        "body",
        "headers",
        "priority",
        "expiration_ms",
        "persistent",
        "message_id",
        "form",
    ):
        assert getattr(got, f) == getattr(want, f), f


def test_record_round_trip_keeps_the_form() -> None:
    m = _m10()
    got = decode_entry(encode_entry(Entry("q" * 255, SeqId(3), m, delivery_count=1)))
    assert got.queue == "q" * 255
    _same(got.message, m)
    assert got.message.form == FORM_AMQP10
    assert entry_head(encode_entry(Entry("q1", SeqId(3), m)))[:2] == (b"q1", 3)


def test_an_old_record_reads_as_form_0() -> None:
    e = decode_entry(OLD_RECORD)
    assert (e.queue, e.seq, e.delivery_count, e.redelivered) == ("q1", 7, 2, True)
    m = e.message
    assert m.form == FORM_AMQP091
    assert (m.exchange, m.routing_key, m.message_id, m.headers) == ("ex", "rk", "mid-1", {"h": 1})
    assert (m.properties_bin, m.body, m.priority, m.persistent) == (
        b"\x10\x00\x02",
        b"old body",
        3,
        True,
    )
    assert entry_head(OLD_RECORD)[:4] == (b"q1", 7, 0xFB, 2)


def test_names_past_255_bytes_are_refused_not_corrupted() -> None:
    with pytest.raises(ValueError, match="queue name"):
        encode_entry(Entry("q" * 256, SeqId(1), _m10()))


@pytest.mark.parametrize("embed_below", [1 << 20, 1])  # body in the journal / the body store
def test_a_10_message_survives_a_restart(tmp_path: Path, embed_below: int) -> None:
    store = FileStore.open(tmp_path, embed_below=embed_below)
    store.recover()
    store.enqueue("q", SeqId(1), _m10())
    store.sync()
    store.close()
    state = FileStore.open(tmp_path, embed_below=embed_below).recover()
    (rec,) = state.queues["q"]
    m = rec.message
    assert m.form == FORM_AMQP10
    _same(m, _m10())
    assert payload_for_amqp10(m, first_acquirer=True, delivery_count=0) == PAYLOAD


def test_a_10_message_survives_a_page_out(tmp_path: Path) -> None:
    pq = PageQueue(tmp_path, read_bytes=64)
    sent = [_m10(), Message("", "q", b"\x00\x00", b"091")]
    pq.push_back(Entry("", SeqId(i + 1), m) for i, m in enumerate(sent))
    back = [m for _, m, _ in pq.pop_front(10)]
    assert [m.form for m in back] == [FORM_AMQP10, FORM_AMQP091]
    _same(back[0], sent[0])
    got = payload_for_amqp10(back[0], first_acquirer=True, delivery_count=0)
    assert got == PAYLOAD
