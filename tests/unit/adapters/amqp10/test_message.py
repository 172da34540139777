"""The AMQP 1.0 message form: building core messages from payloads, what 1.0 receivers get, and
the conversions of docs/dev/messages.md §3, §4 and §5 row by row, both ways. The 0-9-1 side is
read with pamqp, the 1.0 side with proton."""

from __future__ import annotations

import struct
import uuid
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pika.spec
import proton
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pamqp import decode as pdecode
from pamqp.commands import Basic

from ringmq.adapters.amqp091.message import decoded
from ringmq.adapters.amqp10 import FORM_AMQP10, address_of, build, payload_for_amqp10
from ringmq.adapters.amqp10.convert import headers_table
from ringmq.adapters.amqp10.message import AMQP10_FORM
from ringmq.amqp10 import sections as sec
from ringmq.amqp10.sections import Header, Message10, Properties, decode_message
from ringmq.amqp10.types import (
    Array,
    Byte,
    DecodeError,
    Described,
    Float,
    Int,
    Short,
    Symbol,
    Timestamp,
    UByte,
    UInt,
    ULong,
    UShort,
)
from ringmq.core.auth import Identity
from ringmq.core.message import Message, amqp091_content, converted, form_of
from tests.unit.amqp10.strategies import SCALARS, VALUES

NOW = 1_000_000


def _msg(m: Message10, now_ms: int = NOW) -> Message:
    return build(sec.encode_message(m), exchange="x", routing_key="rk", now_ms=now_ms)


def _data(**kw: Any) -> Message10:
    return Message10(body=((sec.DATA, b"body"),), **kw)


def _pamqp(pb: bytes) -> Any:
    p = Basic.Properties()
    p.unmarshal((pb[0] << 8) | pb[1], pb[2:])
    return p


def _to_091(m: Message10, now_ms: int = NOW) -> tuple[Any, bytes, dict[str, str]]:
    """A 1.0 message as a 0-9-1 consumer gets it: properties (pamqp), body, header letters."""
    pb, body = amqp091_content(_msg(m, now_ms))
    return _pamqp(pb), body, _letters(pb)


def _letters(pb: bytes) -> dict[str, str]:
    table = headers_table(pb)
    out: dict[str, str] = {}
    if table is None:
        return out
    pos = 4
    while pos < len(table):
        key = table[pos + 1 : pos + 1 + table[pos]].decode()
        pos += 1 + table[pos]
        out[key] = chr(table[pos])
        pos += pdecode.embedded_value(table[pos:])[0]
    return out


# --- build: the neutral fields (§2) -----------------------------------------------------------


def test_build_fills_the_neutral_fields() -> None:
    m = _msg(
        _data(
            header=Header(durable=True, priority=7, ttl=2500),
            message_annotations={
                "x-opt-delivery-time": Timestamp(NOW + 5000),
                "x-opt-delivery-delay": 300,
                "x-cc": ["k1", "k2"],
                "not-x": 1,
            },
            properties=Properties(message_id=uuid.UUID(int=1)),
            application_properties={"_AMQ_LVQ_NAME": "ibm", "n": UInt(5)},
        )
    )
    assert m.form == FORM_AMQP10
    assert (m.persistent, m.priority, m.expiration_ms) == (True, 7, 2500)
    assert m.message_id == "urn:uuid:" + str(uuid.UUID(int=1))
    assert m.headers == {
        "_AMQ_LVQ_NAME": "ibm",
        "n": 5,
        "x-opt-delivery-time": datetime.fromtimestamp((NOW + 5000) // 1000, UTC),
        "x-opt-delivery-delay": 300,
        "CC": ["k1", "k2"],
        "_AMQ_SCHED_DELIVERY": NOW + 5000,
        "x-delay": 300,
    }
    assert type(m.headers["n"]) is int  # the engine tests exact types (scheduler, LVQ)
    assert m.size == len(sec.encode_message(Message10(body=((sec.DATA, b"body"),))))
    assert (m.exchange, m.routing_key, m.timestamp_ms) == ("x", "rk", NOW)


@pytest.mark.parametrize(
    ("message_id", "text"),
    [("m", "m"), (ULong(5), "5"), (b"\x01", None), ("x" * 256, None)],
)
def test_message_id_is_the_091_message_id(message_id: Any, text: str | None) -> None:
    assert _msg(_data(properties=Properties(message_id=message_id))).message_id == text


def test_absolute_expiry_time_when_no_ttl() -> None:
    m = _msg(_data(properties=Properties(absolute_expiry_time=Timestamp(NOW + 4000))))
    assert m.expiration_ms == 4000
    m = _msg(_data(properties=Properties(absolute_expiry_time=Timestamp(NOW - 1))))
    assert m.expiration_ms == 0
    m = _msg(
        _data(header=Header(ttl=10), properties=Properties(absolute_expiry_time=Timestamp(NOW)))
    )
    assert m.expiration_ms == 10


def test_plain_message_has_no_headers() -> None:
    m = _msg(_data())
    assert (m.headers, m.persistent, m.priority, m.expiration_ms, m.message_id) == (
        None,
        False,
        0,
        None,
        None,
    )


def test_build_refuses_malformed_payloads() -> None:
    with pytest.raises(DecodeError):
        build(b"\x00\x53\x75\xa0\x05ab", exchange="", routing_key="", now_ms=0)
    with pytest.raises(DecodeError):
        build(b"\x40", exchange="", routing_key="", now_ms=0)


def test_address_of() -> None:
    def addr(m: Message10) -> str | None:
        return address_of(sec.encode_message(m))

    assert addr(_data(properties=Properties(to="queue://a"))) == "queue://a"
    assert (
        addr(
            _data(
                header=Header(durable=True),
                delivery_annotations={"x": 1},
                message_annotations={"x-y": [1] * 300},
                properties=Properties(to="b"),
            )
        )
        == "b"
    )
    assert addr(_data()) is None
    assert addr(_data(properties=Properties())) is None
    assert addr(_data(application_properties={"to": "no"})) is None
    proton_payload = bytes(proton.Message(address="c", body="x").encode())
    assert address_of(proton_payload) == "c"


# --- what a 1.0 receiver gets ---------------------------------------------------------------


def test_a_10_message_goes_out_as_it_came() -> None:
    original = bytes(
        proton.Message(
            body=b"hi", inferred=True, durable=True, properties={"a": 1}, address="q"
        ).encode()
    )
    m = build(original, exchange="", routing_key="q", now_ms=0)
    assert payload_for_amqp10(m, first_acquirer=True, delivery_count=0) == original


def test_delivery_annotations_and_delivery_state_are_not_kept() -> None:
    sent = _data(
        header=Header(durable=True, first_acquirer=True, delivery_count=4),
        delivery_annotations={"x-hop": 1},
        application_properties={"a": 1},
    )
    out = payload_for_amqp10(_msg(sent), first_acquirer=True, delivery_count=0)
    got = decode_message(out)
    assert got.header == Header(durable=True)
    assert got.delivery_annotations is None
    assert (got.application_properties, got.body) == ({"a": 1}, sent.body)


@pytest.mark.parametrize("with_header", [False, True])
def test_redelivery_rewrites_the_header(with_header: bool) -> None:
    h = Header(durable=True, priority=3, ttl=100) if with_header else None
    m = _msg(_data(header=h, properties=Properties(to="q")))
    out: Any = proton.Message()
    out.decode(payload_for_amqp10(m, first_acquirer=False, delivery_count=2))
    assert out.delivery_count == 2
    assert out.first_acquirer is False
    assert out.durable is with_header
    assert out.address == "q"
    assert out.body == b"body"


# --- §3: 1.0 to 0-9-1 -------------------------------------------------------------------------

LONG_TEXT = "t" * 300


@pytest.mark.parametrize(
    ("m", "expect", "headers"),
    [
        (_data(header=Header(durable=True)), {"delivery_mode": 2}, {}),
        (_data(header=Header(durable=False)), {"delivery_mode": 1}, {}),
        (_data(), {"delivery_mode": 1}, {}),
        (_data(header=Header(priority=5)), {"priority": 5}, {}),
        (_data(header=Header(ttl=2500)), {"expiration": "2500"}, {}),
        (
            _data(properties=Properties(absolute_expiry_time=Timestamp(NOW + 7000))),
            {"expiration": "7000"},
            {},
        ),
        (_data(properties=Properties(message_id="m-1")), {"message_id": "m-1"}, {}),
        (
            _data(properties=Properties(message_id=LONG_TEXT)),
            {"message_id": None},
            {"x-message-id": LONG_TEXT},
        ),
        (
            _data(properties=Properties(message_id=uuid.UUID(int=7))),
            {"message_id": "urn:uuid:00000000-0000-0000-0000-000000000007"},
            {},
        ),
        (_data(properties=Properties(message_id=ULong(42))), {"message_id": "42"}, {}),
        (
            _data(properties=Properties(message_id=b"\xff\x00")),
            {"message_id": None},
            {"x-message-id": b"\xff\x00"},
        ),
        (_data(properties=Properties(correlation_id="c-1")), {"correlation_id": "c-1"}, {}),
        (
            _data(properties=Properties(correlation_id=LONG_TEXT)),
            {"correlation_id": None},
            {"x-correlation-id": LONG_TEXT},
        ),
        (
            _data(properties=Properties(correlation_id=uuid.UUID(int=8))),
            {"correlation_id": "urn:uuid:00000000-0000-0000-0000-000000000008"},
            {},
        ),
        (_data(properties=Properties(correlation_id=ULong(9))), {"correlation_id": "9"}, {}),
        (
            _data(properties=Properties(correlation_id=b"\xfe")),
            {"correlation_id": None},
            {"x-correlation-id": b"\xfe"},
        ),
        (_data(properties=Properties(user_id=b"guest")), {"user_id": "guest"}, {}),
        (_data(properties=Properties(user_id=b"\xff")), {"user_id": None}, {}),
        (_data(properties=Properties(reply_to="/queues/r")), {"reply_to": "/queues/r"}, {}),
        (
            _data(properties=Properties(content_type=Symbol("text/plain"))),
            {"content_type": "text/plain"},
            {},
        ),
        (
            _data(properties=Properties(content_encoding=Symbol("gzip"))),
            {"content_encoding": "gzip"},
            {},
        ),
        (
            _data(properties=Properties(creation_time=Timestamp(1_700_000_000_999))),
            {"timestamp": datetime.fromtimestamp(1_700_000_000, UTC)},
            {},
        ),
        (_data(properties=Properties(group_id="g")), {"app_id": "g"}, {}),
        (
            _data(
                properties=Properties(
                    to="t",
                    subject="s",
                    group_sequence=UInt(3),
                    reply_to_group_id="r",
                )
            ),
            {"delivery_mode": 1},
            {},
        ),
        (_data(application_properties={"k": "v"}), {}, {"k": "v"}),
        (_data(application_properties={"k" * 256: "v"}), {}, {}),
        (
            _data(message_annotations={"x-opt-delivery-time": Timestamp(5000), "other": 1}),
            {},
            {"x-opt-delivery-time": datetime.fromtimestamp(5, UTC)},
        ),
        (_data(message_annotations={"x-cc": ["a", "b"]}), {}, {"CC": ["a", "b"]}),
    ],
)
def test_10_to_091_rows(m: Message10, expect: dict[str, Any], headers: dict[str, Any]) -> None:
    props, body, _ = _to_091(m)
    assert body == b"body"
    for name, value in expect.items():
        assert getattr(props, name) == value, name
    if not expect.get("delivery_mode"):
        assert props.delivery_mode in (1, 2)
    assert (props.headers or {}) == headers  # pamqp reads a UTF-8 longstr as str
    assert props.message_type is None


@pytest.mark.parametrize(
    "body",
    [
        ((sec.DATA, b"a"), (sec.DATA, b"b")),
        ((sec.AMQP_VALUE, "text"),),
        ((sec.AMQP_SEQUENCE, [1, 2]),),
    ],
)
def test_other_bodies_go_encoded_with_type_amqp10(body: tuple[tuple[int, Any], ...]) -> None:
    props, got, _ = _to_091(Message10(body=body))
    assert props.message_type == "amqp-1.0"
    assert got == sec.encode_message(Message10(body=body))
    assert decode_message(got).body == body


def test_one_data_section_with_a_footer_gives_the_bytes() -> None:
    props, got, _ = _to_091(Message10(body=((sec.DATA, b"x" * 300),), footer={"f": 1}))
    assert (got, props.message_type) == (b"x" * 300, None)


# --- §5: value types, 1.0 to 0-9-1 ------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "letter", "decoded"),
    [
        ("text", "S", b"text"),
        (b"\xff\x01", "S", b"\xff\x01"),
        (True, "t", True),
        (Byte(-3), "b", -3),
        (Short(-300), "s", -300),
        (Int(-70000), "I", -70000),
        (-(2**40), "l", -(2**40)),
        (UByte(200), "B", 200),
        (UShort(60000), "u", 60000),
        (UInt(4_000_000_000), "i", 4_000_000_000),
        (Float(1.5), "f", 1.5),
        (2.25, "d", 2.25),
        (Timestamp(1_700_000_000_000), "T", datetime.fromtimestamp(1_700_000_000, UTC)),
        (None, "V", None),
        ([UInt(1), "a"], "A", [1, b"a"]),
        (Array("symbol", (Symbol("a"),)), "A", [b"a"]),
        ({"k": UByte(1)}, "F", {"k": 1}),
        (ULong(2**63 - 1), "l", 2**63 - 1),
        (Symbol("sym"), "S", b"sym"),
    ],
)
def test_10_values_as_091_types(value: Any, letter: str, decoded: Any) -> None:
    m = _data(message_annotations={"x-v": value})
    props, _, letters = _to_091(m)
    assert letters == {"x-v": letter}
    assert props.headers["x-v"] == _strs(decoded)  # pamqp reads a UTF-8 longstr as str


def _strs(v: Any) -> Any:
    if isinstance(v, bytes):
        try:
            return v.decode()
        except UnicodeDecodeError:
            return v
    if isinstance(v, list):
        return [_strs(x) for x in v]
    return v


@pytest.mark.parametrize(
    "value", [ULong(2**63), uuid.UUID(int=1), Timestamp(-1), Described(Symbol("d"), 1)]
)
def test_10_values_with_no_091_type_are_not_carried(value: Any) -> None:
    props, _, letters = _to_091(_data(application_properties={"v": value}))
    assert letters == {}
    assert props.headers is None


# --- §4 and §5: 0-9-1 to 1.0 ------------------------------------------------------------------


def _from_091(props: pika.spec.BasicProperties, body: bytes = b"body") -> bytes:
    pb = b"".join(props.encode())
    m = decoded("x", "rk", pb, body, NOW)
    return payload_for_amqp10(m, first_acquirer=True, delivery_count=0)


def _proton(payload: bytes) -> Any:
    m = proton.Message()
    m.decode(payload)
    return m


def test_091_to_10_rows() -> None:
    u = uuid.UUID(int=11)
    payload = _from_091(
        pika.spec.BasicProperties(
            delivery_mode=2,
            priority=4,
            expiration="2500",
            message_id=f"urn:uuid:{u}",
            correlation_id="corr",
            user_id="guest",
            reply_to="amq.rabbitmq.reply-to.x",
            app_id="app",
            timestamp=1_700_000_000,
            content_type="text/plain",
            content_encoding="utf-8",
            type="kind",
            headers={"x-opt-delivery-delay": 100, "plain": "v", "nested": {"a": 1}, "arr": [1]},
        )
    )
    p = _proton(payload)
    assert (p.durable, p.priority, p.ttl) == (True, 4, 2.5)
    assert (p.id, p.correlation_id, p.user_id) == (u, "corr", b"guest")
    assert (p.reply_to, p.group_id, p.creation_time) == ("amq.rabbitmq.reply-to.x", "app", 1.7e9)
    assert (p.content_type, p.content_encoding) == ("text/plain", "utf-8")
    assert p.annotations == {"x-basic-type": "kind", "x-opt-delivery-delay": 100}
    assert p.properties == {"plain": "v"}  # a table or an array is not carried
    assert bytes(p.body) == b"body"
    m = decode_message(payload)
    assert m.body == ((sec.DATA, b"body"),)
    assert m.properties is not None
    assert type(m.properties.content_type) is Symbol
    assert type(m.properties.user_id) is bytes


def test_091_defaults_and_plain_ids() -> None:
    p = _proton(_from_091(pika.spec.BasicProperties(delivery_mode=1, message_id="plain-id")))
    assert (p.durable, p.id, p.annotations, p.properties) == (False, "plain-id", None, None)
    bare = decode_message(_from_091(pika.spec.BasicProperties()))
    assert bare == Message10(body=((sec.DATA, b"body"),))


def _table(*fields: bytes) -> bytes:
    data = b"".join(fields)
    return struct.pack(">I", len(data)) + data


def _field(key: str, letter: str, raw: bytes) -> bytes:
    return bytes((len(key),)) + key.encode() + letter.encode() + raw


def test_091_types_as_10_values() -> None:
    table = _table(
        _field("t", "t", b"\x01"),
        _field("b", "b", b"\xfd"),
        _field("B", "B", b"\xc8"),
        _field("s", "s", struct.pack(">h", -300)),
        _field("u", "u", struct.pack(">H", 60000)),
        _field("I", "I", struct.pack(">i", -70000)),
        _field("i", "i", struct.pack(">I", 4_000_000_000)),
        _field("l", "l", struct.pack(">q", -(2**40))),
        _field("f", "f", struct.pack(">f", 1.5)),
        _field("d", "d", struct.pack(">d", 2.25)),
        _field("S", "S", struct.pack(">I", 3) + b"abc"),
        _field("Sbin", "S", struct.pack(">I", 2) + b"\xff\x00"),
        _field("Slong", "S", struct.pack(">I", 300) + b"a" * 300),
        _field("x", "x", struct.pack(">I", 2) + b"\x01\x02"),
        _field("T", "T", struct.pack(">Q", 1_700_000_000)),
        _field("V", "V", b""),
        _field("D", "D", b"\x02\x00\x00\x01\x00"),
        _field("x-A", "A", _table(b"I" + struct.pack(">i", 1), b"S\x00\x00\x00\x01z")),
        _field("x-F", "F", _table(_field("k", "B", b"\x01"))),
    )
    pb = struct.pack(">H", 0x2000) + table  # headers only
    m = decoded("x", "rk", pb, b"", NOW)
    got = decode_message(payload_for_amqp10(m, first_acquirer=True, delivery_count=0))
    ap = got.application_properties
    assert ap is not None
    expected = {
        "t": (True, bool),
        "b": (-3, Byte),
        "B": (200, UByte),
        "s": (-300, Short),
        "u": (60000, UShort),
        "I": (-70000, Int),
        "i": (4_000_000_000, UInt),
        "l": (-(2**40), int),
        "f": (1.5, Float),
        "d": (2.25, float),
        "S": ("abc", str),
        "Sbin": (b"\xff\x00", bytes),
        "Slong": (b"a" * 300, bytes),
        "x": (b"\x01\x02", bytes),
        "T": (1_700_000_000_000, Timestamp),
        "V": (None, type(None)),
    }
    assert set(ap) == set(expected)  # D (decimal) has no 1.0 row: not carried
    for key, (value, typ) in expected.items():
        assert ap[key] == value, key
        assert type(ap[key]) is typ, key
    assert got.message_annotations == {"x-A": [1, "z"], "x-F": {"k": 1}}
    assert type(got.message_annotations["x-F"]["k"]) is UByte
    # and proton reads the same types
    p = _proton(payload_for_amqp10(m, first_acquirer=True, delivery_count=0))
    assert type(p.properties["B"]) is proton.ubyte
    assert type(p.properties["i"]) is proton.uint
    assert type(p.properties["T"]) is proton.timestamp


def test_conversions_are_made_once_and_cached() -> None:
    m = decoded("x", "rk", b"".join(pika.spec.BasicProperties(delivery_mode=2).encode()), b"b", 0)
    first = payload_for_amqp10(m, first_acquirer=True, delivery_count=0)
    assert m.converted is not None
    cached = m.converted[FORM_AMQP10]
    assert payload_for_amqp10(m, first_acquirer=True, delivery_count=0) == first
    assert m.converted[FORM_AMQP10] is cached
    again = _proton(payload_for_amqp10(m, first_acquirer=False, delivery_count=3))
    assert (again.delivery_count, again.durable) == (3, True)
    m10 = _msg(_data(header=Header(durable=True)))
    assert converted(m10, 0) is converted(m10, 0)
    assert m10.reheadered({}).converted is None


# --- the Form: what the core asks of a 1.0 message --------------------------------------------


def test_form_reheadered_for_dead_lettering_and_bcc() -> None:
    m = _msg(
        _data(
            header=Header(durable=True, ttl=500),
            message_annotations={"x-opt-delivery-delay": 5, "x-keep": 1},
            properties=Properties(message_id="id", absolute_expiry_time=Timestamp(NOW + 9)),
            application_properties={"BCC": ["hidden"], "keep": "v"},
        )
    )
    assert form_of(m) is AMQP10_FORM
    assert m.headers is not None
    death = [{"reason": "expired", "queue": "q", "count": 1}]
    headers = {k: v for k, v in m.headers.items() if k != "BCC"} | {"x-death": death}
    dl = m.reheadered(headers, drop_expiration=True)
    got = decode_message(dl.properties_bin + dl.body)
    assert got.header == Header(durable=True)
    assert got.properties == Properties(message_id="id")
    assert got.application_properties == {"keep": "v"}
    assert got.message_annotations == {
        "x-opt-delivery-delay": 5,
        "x-keep": 1,
        "x-death": [{"reason": "expired", "queue": "q", "count": 1}],
    }
    assert dl.headers == headers
    assert dl.expiration_ms is None
    props, _, _ = _to_091(got)
    assert props.headers["x-death"][0]["reason"] == "expired"


def test_form_expiration_text_describe_compose() -> None:
    m = _msg(_data(header=Header(ttl=1500), properties=Properties(content_type=Symbol("a/b"))))
    assert m.expiration_text() == "1500"
    assert _msg(_data()).expiration_text() is None
    described = AMQP10_FORM.describe(m.properties_bin)
    assert described == {"content_type": "a/b", "delivery_mode": 1, "expiration": "1500"}
    c = AMQP10_FORM.compose("x", "rk", {"delivery_mode": 2, "headers": {"h": 1}}, b"B", NOW)
    assert (c.form, c.persistent, c.headers) == (FORM_AMQP10, True, {"h": 1})
    assert decode_message(c.properties_bin + c.body).body == ((sec.DATA, b"B"),)


# --- the 0-9-1 delivery path: a guard converts another protocol's message ---------------------


class _RecordingProto:
    def __init__(self) -> None:
        self.sent: list[tuple[bytes, bytes]] = []

    def send_deliver(self, *args: Any) -> None:
        self.sent.append((args[-2], args[-1]))

    def send_content(self, channel: int, method: Any, pb: bytes, body: bytes) -> None:
        self.sent.append((pb, body))


def test_the_091_delivery_path_converts_10_messages() -> None:
    from ringmq.adapters.amqp091 import Amqp091
    from ringmq.adapters.amqp091.connection import Amqp091Handler
    from ringmq.adapters.handler import HandlerContext, HandlerLimits, Peer
    from ringmq.amqp import spec
    from ringmq.core.broker import Broker
    from ringmq.core.effects import Deliver, ReplyContent
    from ringmq.server.connections import Connections
    from ringmq.server.handlers import HandlerConnection

    broker = Broker()
    ctx = HandlerContext(
        broker,
        7,
        Peer("127.0.0.1", 1, "127.0.0.1", 2),
        HandlerLimits(1 << 20, 131072, 2047, 0),
        login=lambda *_: Identity("guest"),
    )
    h = Amqp091Handler(ctx, Amqp091(broker), publish_runs=False)
    h.proto = _RecordingProto()  # type: ignore[assignment]
    c = HandlerConnection(None, 7, "amqp091", tls=False)  # type: ignore[arg-type]
    c.handler = h
    conns = Connections(None, None, {7: c})  # type: ignore[arg-type]
    m10 = _msg(_data(header=Header(durable=True), application_properties={"k": "v"}))
    m091 = decoded("x", "rk", b"\x10\x00\x02", b"plain", 0)
    get_ok = spec.BasicGetOk(delivery_tag=1, exchange="x", routing_key="rk", message_count=0)
    conns.apply(
        [
            Deliver(7, 1, "ctag", 1, False, m10),
            Deliver(7, 1, "ctag", 2, False, m091),
            ReplyContent(7, 1, get_ok, m10),
        ]
    )
    sent = h.proto.sent  # type: ignore[attr-defined]
    props = _pamqp(sent[0][0])
    assert (props.delivery_mode, props.headers, sent[0][1]) == (2, {"k": "v"}, b"body")
    assert sent[1] == (b"\x10\x00\x02", b"plain")  # a 0-9-1 message: verbatim
    assert sent[1][0] is m091.properties_bin
    assert sent[2] == sent[0]


# --- any well-formed message converts without error -------------------------------------------

_ANY_MAP = st.dictionaries(
    st.one_of(st.text(max_size=8), st.text(max_size=8).map(Symbol), *SCALARS.values()),
    VALUES,
    max_size=4,
)


@given(
    ap=st.none() | _ANY_MAP,
    ma=st.none() | _ANY_MAP,
    message_id=st.none() | VALUES.filter(lambda v: not isinstance(v, (list, dict))),
    aet=st.none() | st.integers(-(2**63), 2**63 - 1).map(Timestamp),
    count=st.integers(0, 3),
)
def test_any_message_converts(ap: Any, ma: Any, message_id: Any, aet: Any, count: int) -> None:
    m = Message10(
        header=Header(durable=True),
        message_annotations=ma,
        properties=Properties(message_id=message_id, absolute_expiry_time=aet),
        application_properties=ap,
        body=((sec.DATA, b"x"),),
    )
    try:
        msg = _msg(m)
    except DecodeError:
        return  # unhashable keys and the like are caught by the decoder
    pb, body = amqp091_content(msg)
    _pamqp(pb)
    assert body == b"x"
    decode_message(payload_for_amqp10(msg, first_acquirer=False, delivery_count=count))
    if msg.headers:
        again = msg.reheadered(dict(msg.headers) | {"x-death": [{"count": 1}]})
        amqp091_content(again)


_RICH = bytes(
    proton.Message(
        body=b"payload",
        inferred=True,
        durable=True,
        priority=4,
        ttl=1.0,
        id=uuid.UUID(int=3),
        address="q",
        correlation_id=proton.ulong(1),
        creation_time=5.0,
        properties={"a": proton.ubyte(1), "b": [1, 2]},
        annotations={proton.symbol("x-opt-delivery-time"): proton.timestamp(7)},
        instructions={proton.symbol("x-da"): 1},
    ).encode()
)


@given(st.integers(0, len(_RICH) - 1), st.integers(0, 255))
def test_a_corrupted_payload_is_a_decode_error_or_converts(at: int, byte: int) -> None:
    payload = _RICH[:at] + bytes((byte,)) + _RICH[at + 1 :]
    try:
        msg = build(payload, exchange="", routing_key="q", now_ms=0)
        address_of(payload)
    except DecodeError:
        return
    _pamqp(amqp091_content(msg)[0])
    decode_message(payload_for_amqp10(msg, first_acquirer=False, delivery_count=1))


# --- §6: Artemis' annotations and ringmq's features -------------------------------------------


def test_artemis_annotations_and_properties() -> None:
    from ringmq.core.queue.scheduler import schedule_due

    m = _msg(
        _data(
            message_annotations={
                "x-opt-delivery-time": Timestamp(NOW + 50),
                "x-opt-delivery-delay": 10_000,
                "x-opt-jms-dest": UByte(0),
                "x-opt-jms-msg-type": UByte(5),
                "x-opt-jms-reply-to": "/queues/r",
            },
            application_properties={"_AMQ_LVQ_NAME": "k"},
        )
    )
    assert m.headers is not None
    assert schedule_due(m.headers, NOW) == NOW + 50  # the time wins over the delay (Artemis)
    props, _, letters = _to_091(
        _data(
            message_annotations={"x-opt-jms-dest": UByte(0), "x-opt-jms-reply-to": "/queues/r"},
            application_properties={"_AMQ_SCHED_DELIVERY": NOW + 7, "_AMQ_LVQ_NAME": "k"},
        )
    )
    assert props.headers == {
        "_AMQ_SCHED_DELIVERY": NOW + 7,
        "_AMQ_LVQ_NAME": "k",
        "x-opt-jms-dest": 0,
        "x-opt-jms-reply-to": "/queues/r",
    }
    assert letters["x-opt-jms-dest"] == "B"  # back to Qpid JMS as the ubyte it sent
    only_delay = _msg(_data(message_annotations={"x-opt-delivery-delay": 300}))
    assert only_delay.headers is not None
    assert schedule_due(only_delay.headers, NOW) == NOW + 300
    huge = _msg(_data(message_annotations={"x-opt-delivery-delay": 2**63 - 1}))
    assert huge.headers is not None
    assert huge.headers["x-delay"] == 2**62  # arrival + delay stays a 64-bit time
    in_ap = _msg(_data(application_properties={"_AMQ_SCHED_DELIVERY": NOW + 9}))
    assert in_ap.headers is not None
    assert schedule_due(in_ap.headers, NOW) == NOW + 9


def test_091_correlation_id_urn_uuid_and_back() -> None:
    u = uuid.UUID(int=77)
    p = _proton(_from_091(pika.spec.BasicProperties(correlation_id=f"urn:uuid:{u}")))
    assert p.correlation_id == u
    back = _msg(
        decode_message(
            sec.encode_message(
                Message10(properties=Properties(correlation_id=u), body=((sec.DATA, b"body"),))
            )
        )
    )
    assert _pamqp(amqp091_content(back)[0]).correlation_id == f"urn:uuid:{u}"


# --- 0-9-1 to 1.0 and back: what §3-§5 keep ---------------------------------------------------


def _props091() -> st.SearchStrategy[Any]:
    from tests.unit.amqp.strategies import properties, tables

    return st.builds(
        lambda p, headers, expiration, timestamp: replace(
            p, headers=headers, expiration=expiration, timestamp=timestamp
        ),
        properties(simple=True),
        st.none() | tables().filter(lambda t: "x-basic-type" not in t),
        st.none() | st.integers(0, 2**32 - 1).map(str),
        st.none() | st.integers(0, 253_402_300_799),
    )


_DROPPED = object()


def _kept(v: Any) -> Any:
    """A 0-9-1 header value as it comes back from 1.0 (§5): decimals are not carried, bytes
    and strings are compared as the table decoder gives them."""
    from decimal import Decimal

    from tests.unit.amqp.strategies import normalise

    if isinstance(v, Decimal):
        return _DROPPED
    if isinstance(v, dict):
        return {
            k: x
            for k, x in ((k, _kept(x)) for k, x in v.items())
            if x is not _DROPPED and "\x00" not in k
        }
    if isinstance(v, list):
        return [x for x in map(_kept, v) if x is not _DROPPED]
    return normalise(v)


@given(
    props=_props091(),
    body=st.binary(max_size=40),
)
def test_091_to_10_and_back(props: Any, body: bytes) -> None:
    from ringmq.adapters.amqp10.convert import id_value
    from ringmq.amqp.properties import decode_properties, encode_properties
    from tests.unit.amqp.strategies import normalise

    m = decoded("x", "rk", encode_properties(props), body, NOW)
    back = build(
        payload_for_amqp10(m, first_acquirer=True, delivery_count=0),
        exchange="x",
        routing_key="rk",
        now_ms=NOW,
    )
    pb, got_body = amqp091_content(back)
    got = decode_properties(pb)
    assert got_body == body
    assert got.delivery_mode == (2 if props.delivery_mode == 2 else 1)
    for name in ("priority", "expiration", "user_id", "reply_to", "app_id"):
        assert getattr(got, name) == getattr(props, name), name
    for name in ("content_type", "content_encoding"):
        assert getattr(got, name) == getattr(props, name), name
    for name in ("message_id", "correlation_id"):
        sent = getattr(props, name)
        as_id = None if sent is None else id_value(sent)
        want = f"urn:uuid:{as_id}" if isinstance(as_id, uuid.UUID) else sent
        assert getattr(got, name) == want, name
    assert got.timestamp == props.timestamp
    assert (got.type, got.cluster_id) == (None, None)  # type: an annotation; cluster_id: none
    want_headers: dict[str, Any] = {}
    for k, v in (props.headers or {}).items():
        kept = _kept(v)
        if "\x00" in k or kept is _DROPPED:
            continue
        if k.startswith("x-") or not isinstance(v, dict | list):
            want_headers[k] = kept
    if props.type is not None:
        want_headers["x-basic-type"] = props.type
    assert normalise(got.headers or {}) == want_headers
