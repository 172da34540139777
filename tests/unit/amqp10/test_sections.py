"""AMQP 1.0 message sections: proton's messages read by both readers, ours read by proton,
round trips, and malformed payloads that may only raise DecodeError."""

from __future__ import annotations

import uuid
from typing import Any

import proton
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from ringmq.amqp10 import sections as sec
from ringmq.amqp10.codec import encode
from ringmq.amqp10.sections import Header, Message10, Properties, decode_message, scan
from ringmq.amqp10.types import DecodeError, Described, Symbol, Timestamp, UInt, ULong


def _proton_message() -> proton.Message:
    return proton.Message(
        body=b"hello",
        inferred=True,
        durable=True,
        priority=7,
        ttl=5.0,
        id=uuid.UUID(int=5),
        address="q1",
        reply_to="r",
        correlation_id=proton.ulong(9),
        content_type="text/plain",
        creation_time=1700000000.5,
        group_id="g",
        properties={"a": 1, "b": "x"},
        annotations={proton.symbol("x-opt-delivery-delay"): 1000},
        instructions={proton.symbol("x-da"): 1},
    )


def test_we_read_protons_message() -> None:
    payload = bytes(_proton_message().encode())
    m = decode_message(payload)
    assert m.header == Header(durable=True, priority=7, ttl=5000)
    assert m.delivery_annotations == {"x-da": 1}
    assert m.message_annotations == {"x-opt-delivery-delay": 1000}
    p = m.properties
    assert p is not None
    assert (p.message_id, p.to, p.reply_to, p.correlation_id) == (uuid.UUID(int=5), "q1", "r", 9)
    assert (p.content_type, p.creation_time, p.group_id) == ("text/plain", 1700000000500, "g")
    assert m.application_properties == {"a": 1, "b": "x"}
    assert m.body == ((sec.DATA, b"hello"),)
    sc = scan(payload)
    assert (sc.header, sc.properties) == (m.header, m.properties)
    assert (sc.message_annotations, sc.application_properties) == (
        m.message_annotations,
        m.application_properties,
    )
    assert sc.data is not None
    assert payload[sc.data[0] : sc.data[1]] == b"hello"
    assert sc.body_end == len(payload)
    # the delivery-annotations lie between header_end and annotations_start
    assert decode_message(payload[sc.header_end : sc.annotations_start]).delivery_annotations


@pytest.mark.parametrize(
    "body",
    ["text", [1, "two"], {"k": "v"}, b"bytes-as-value"],
)
def test_amqp_value_bodies(body: Any) -> None:
    payload = bytes(proton.Message(body=body).encode())
    m = decode_message(payload)
    assert [code for code, _ in m.body] == [sec.AMQP_VALUE]
    sc = scan(payload)
    assert sc.data is None
    assert sc.body_end == len(payload)


def test_no_body() -> None:
    payload = bytes(proton.Message(body=None, durable=True).encode())  # proton sends none
    assert decode_message(payload).body == ()
    sc = scan(payload)
    assert sc.body_start == sc.body_end == len(payload)
    assert sc.data is None


def test_proton_reads_ours() -> None:
    ours = Message10(
        header=Header(durable=True, priority=2, ttl=100, delivery_count=3),
        message_annotations={"x-opt-jms-dest": 1},
        properties=Properties(message_id="id-1", to="q", user_id=b"guest", creation_time=5000),
        application_properties={"k": UInt(5), "s": Symbol("sym")},
        body=((sec.DATA, b"ab"), (sec.DATA, b"cd")),
        footer={"f": 1},
    )
    m: Any = proton.Message()
    m.decode(sec.encode_message(ours))
    assert (m.durable, m.priority, m.ttl, m.delivery_count) == (True, 2, 0.1, 3)
    assert (m.id, m.address, m.user_id, m.creation_time) == ("id-1", "q", b"guest", 5.0)
    assert m.annotations == {"x-opt-jms-dest": 1}
    assert m.properties == {"k": 5, "s": "sym"}
    assert type(m.properties["k"]) is proton.uint


_MAPS = st.dictionaries(st.text(max_size=5).map(Symbol), st.integers(0, 100), max_size=3)
MESSAGES = st.builds(
    Message10,
    header=st.none() | st.builds(Header, st.booleans(), st.none() | st.integers(0, 255)),
    delivery_annotations=st.none() | _MAPS,
    message_annotations=st.none() | _MAPS,
    properties=st.none()
    | st.builds(
        Properties,
        message_id=st.none() | st.text(max_size=5) | st.uuids() | st.integers(0, 9).map(ULong),
        to=st.none() | st.text(max_size=5),
        absolute_expiry_time=st.none() | st.integers(0, 2**40).map(Timestamp),
    ),
    application_properties=st.none()
    | st.dictionaries(st.text(max_size=5), st.integers(0, 9) | st.text(max_size=3), max_size=3),
    body=st.one_of(
        st.lists(st.binary(max_size=300).map(lambda b: (sec.DATA, b)), min_size=1, max_size=3),
        st.lists(st.just((sec.AMQP_SEQUENCE, [1, 2])), min_size=1, max_size=2),
        st.text(max_size=5).map(lambda t: [(sec.AMQP_VALUE, t)]),
    ).map(tuple),
    footer=st.none() | _MAPS,
)


@given(MESSAGES)
def test_round_trip(m: Message10) -> None:
    payload = sec.encode_message(m)
    assert decode_message(payload) == m
    sc = scan(payload)
    assert (sc.header, sc.properties) == (m.header, m.properties)
    assert sc.application_properties == m.application_properties
    body = sec.encode_message(Message10(body=m.body))
    assert payload[sc.body_start : sc.body_end] == body
    if len(m.body) == 1 and m.body[0][0] == sec.DATA:
        assert sc.data is not None
        assert payload[sc.data[0] : sc.data[1]] == m.body[0][1]
    else:
        assert sc.data is None


def _section(code: int, value: Any) -> bytes:
    return encode(Described(ULong(code), value))


@pytest.mark.parametrize(
    ("payload", "match"),
    [
        (_section(sec.PROPERTIES, []) + _section(sec.HEADER, []), "out of order"),
        (_section(sec.HEADER, []) + _section(sec.HEADER, []), "out of order"),
        (_section(sec.DATA, b"a") + _section(sec.AMQP_VALUE, 1), "several kinds"),
        (_section(sec.AMQP_VALUE, 1) + _section(sec.AMQP_VALUE, 1), "out of order"),
        (_section(sec.DATA, "text"), "holds binary"),
        (_section(0x79, 1), "unknown message section"),
        (encode(1), "a message section expected"),
        (_section(sec.APPLICATION_PROPERTIES, [1]), "a map expected"),
        (_section(sec.HEADER, ["not a bool"]), "str where bool"),
        (_section(sec.DATA, b"abc")[:-1], "truncated"),
        (_section(sec.AMQP_SEQUENCE, b"x"), "amqp-sequence section holds a list"),
        (_section(sec.DELIVERY_ANNOTATIONS, b"x"), "a map expected"),
        (_section(sec.DATA, b"x") + _section(sec.FOOTER, [1]), "a map expected"),
        (b"\x00\x50\x70\x45" + _section(sec.DATA, b"x"), "a ulong or a symbol"),
    ],
)
def test_malformed(payload: bytes, match: str) -> None:
    with pytest.raises(DecodeError, match=match):
        scan(payload)
    with pytest.raises(DecodeError):
        decode_message(payload)


@given(st.binary(max_size=260))
def test_a_bare_data_section_is_read_as_the_loop_reads_it(body: bytes) -> None:
    # one data section: vbin8 (the guard in front of scan's loop) and vbin32 (the loop)
    short = encode(Described(ULong(sec.DATA), body))
    long_form = b"\x00\x53\x75\xb0" + len(body).to_bytes(4, "big") + body
    for payload, start in ((short, len(short) - len(body)), (long_form, 8)):
        n = len(payload)
        assert scan(payload) == (None, None, None, None, 0, 0, 0, n, (start, n))
        assert decode_message(payload).body == ((sec.DATA, body),)
    cut = short[:-1] if body else short + b"\x00"
    with pytest.raises(DecodeError):
        scan(cut)  # a length that does not match: the loop says why


def test_sections_by_symbolic_descriptor() -> None:
    payload = encode(Described(Symbol("amqp:data:binary"), b"xy"))
    assert decode_message(payload).body == ((sec.DATA, b"xy"),)
    assert scan(payload).data == (len(payload) - 2, len(payload))


@given(st.binary(max_size=80))
@example(b"\x00\x53\x75\xb0\xff\xff\xff\xff")
@example(b"\x00" * 100)
def test_random_payloads_only_decode_error(data: bytes) -> None:
    for read in (scan, decode_message):
        try:
            read(data)
        except DecodeError:
            pass
