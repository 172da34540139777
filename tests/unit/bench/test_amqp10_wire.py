"""The AMQP 1.0 load generator's hand-encoded frames (benchmarks/amqp10_wire.py), checked
against python-qpid-proton's codec (`proton.Data`)."""

from __future__ import annotations

from typing import Any

import pytest
from benchmarks import amqp10_wire as w

proton = pytest.importorskip("proton")


def _proton_decode(encoded: bytes) -> Any:
    data = proton.Data()
    data.decode(encoded)
    data.rewind()
    data.next()
    return _plain(data.get_object())


def _plain(value: Any) -> Any:
    # proton gives binary values as memoryviews
    if isinstance(value, memoryview):
        return bytes(value)
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, proton.Described):
        return proton.Described(value.descriptor, _plain(value.value))
    return value


def _body(frame: bytes) -> bytes:
    ((ftype, _ch, body),) = w.FrameReader().feed(frame)
    assert ftype in (0, 1)
    return body


@pytest.mark.parametrize(
    "value",
    [None, True, False, 0, 7, 255, 256, 2**32 - 1, "", "héllo", "x" * 300, b"", b"\x00" * 300],
)
def test_values_read_back_by_proton(value: Any) -> None:
    got = _proton_decode(w.encode(value))
    assert got == value


def test_symbols_lists_and_maps_read_back_by_proton() -> None:
    got = _proton_decode(w.encode([w.Symbol("PLAIN"), 1, {"k": "v"}, [2, 3]]))
    assert got == [proton.symbol("PLAIN"), 1, {"k": "v"}, [2, 3]]
    assert isinstance(got[0], proton.symbol)


def test_performatives_are_described_lists_proton_reads() -> None:
    described = _proton_decode(_body(w.open_frame("c1", "127.0.0.1", 65536)))
    assert described.descriptor == 0x10
    assert described.value[:3] == ["c1", "127.0.0.1", 65536]
    attach = _proton_decode(
        _body(w.attach_frame("l", 3, receiver=False, address="/queues/q", capabilities=["queue"]))
    )
    assert attach.descriptor == 0x12
    name, handle, role, snd, rcv, _source, target = attach.value[:7]
    assert (name, handle, role, snd, rcv) == ("l", 3, False, 0, 0)
    assert target.descriptor == 0x29
    assert target.value[0] == "/queues/q"
    assert list(target.value[6]) == [proton.symbol("queue")]
    transfer = _proton_decode(_body(w.transfer(0, 70000, b"", settled=True)))
    assert transfer.value[:5] == [0, 70000, (70000).to_bytes(4, "big"), 0, True]


def test_our_decoder_reads_what_proton_encodes() -> None:
    data = proton.Data()
    data.put_described()
    data.enter()
    data.put_ulong(0x13)
    data.put_list()
    data.enter()
    for n in (1, 2**20, 3, 2**20):
        data.put_uint(n)
    data.put_uint(0)
    data.put_uint(5)
    data.put_uint(1000)
    data.exit()
    data.exit()
    code, fields, end = w.performative_of(data.encode())
    assert code == w.FLOW
    assert fields == [1, 2**20, 3, 2**20, 0, 5, 1000]
    assert end == len(data.encode())


def test_a_transfers_delivery_id_is_read_without_decoding_it_whole() -> None:
    for delivery_id in (0, 5, 300, 2**31):
        body = _body(w.transfer(2, delivery_id, w.message_payload(b"x" * 10), settled=False))
        assert w.transfer_id(body) == delivery_id
        code, fields, end = w.performative_of(body)
        assert (code, fields[1]) == (w.TRANSFER, delivery_id)
        assert body[end:] == w.message_payload(b"x" * 10)


def test_frames_split_whole_byte_by_byte_and_after_a_protocol_header() -> None:
    stream = w.AMQP_HEADER + w.open_frame("c") + w.begin_frame() + w.close_frame()
    whole = w.FrameReader().feed(stream)
    r = w.FrameReader()
    assert whole == [f for i in range(len(stream)) for f in r.feed(stream[i : i + 1])]
    assert [t for t, _c, _b in whole] == [-1, 0, 0, 0]


def test_a_transfer_template_makes_the_frames_transfer_makes() -> None:
    for settled in (False, True):
        payload = w.message_payload(b"x" * 300, durable=not settled)
        template = w.TransferTemplate(0, payload, settled=settled)
        for first in (0, 255, 2**32 - 5):
            want = b"".join(
                w.transfer(0, d, payload, settled=settled) for d in range(first, first + 3)
            )
            assert template.frames(first, 3) == want
