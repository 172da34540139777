"""Basic properties: round-trips, byte-identity with pamqp and pika, flags, bad input."""

from __future__ import annotations

from dataclasses import asdict, replace
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pamqp.commands import Basic
from pika import spec as pika_spec

from ringmq.amqp import properties as pr
from ringmq.amqp.reply_codes import AMQPError, ReplyCode
from tests.unit.amqp.strategies import error_code, properties


@given(properties())
def test_round_trip(props: pr.BasicProperties) -> None:
    raw = pr.encode_properties(props)
    assert pr.decode_properties(raw) == props
    assert pr.decode_properties(memoryview(raw)) == props


def _pamqp_safe(props: pr.BasicProperties) -> pr.BasicProperties:
    """Stay where pamqp agrees with pika: it treats falsy values as absent, rejects a
    cluster_id and delivery modes other than 1/2, sorts header keys and shrinks ints."""
    values = {k: (v or None) for k, v in asdict(props).items()}
    headers = values["headers"]
    if headers and (len(headers) > 1 or any(not isinstance(v, str) for v in headers.values())):
        values["headers"] = {"k": "v"}
    if values["delivery_mode"] not in (1, 2):
        values["delivery_mode"] = None
    if values["timestamp"] is not None and values["timestamp"] > 253402300799:
        values["timestamp"] = None  # pamqp turns it into a datetime (year <= 9999)
    values["cluster_id"] = None
    return pr.BasicProperties(**values)


def _as_pamqp(props: pr.BasicProperties) -> Basic.Properties:
    values = asdict(props)
    if values["timestamp"] is not None:
        values["timestamp"] = datetime.fromtimestamp(values["timestamp"], UTC)
    values["message_type"] = values.pop("type")
    return Basic.Properties(**{k: v for k, v in values.items() if v is not None})


@given(properties(simple=True))
def test_byte_identical_to_pamqp(props: pr.BasicProperties) -> None:
    props = _pamqp_safe(props)
    assert pr.encode_properties(props) == _as_pamqp(props).marshal()


@given(properties(simple=True))
def test_we_decode_pamqp_properties(props: pr.BasicProperties) -> None:
    props = _pamqp_safe(props)
    decoded = pr.decode_properties(_as_pamqp(props).marshal())
    assert decoded == props


@given(properties())
def test_byte_identical_to_pika(props: pr.BasicProperties) -> None:
    if props.headers:
        props = replace(
            props, headers={k: v for k, v in props.headers.items() if not _has_float(v)}
        )
    theirs = pika_spec.BasicProperties(**asdict(props))
    assert pr.encode_properties(props) == b"".join(theirs.encode())


def _has_float(value: object) -> bool:
    if isinstance(value, float):
        return True
    if isinstance(value, dict):
        return any(_has_float(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_float(v) for v in value)
    return False


def test_flags_let_callers_skip_decoding() -> None:
    raw = pr.encode_properties(pr.BasicProperties(headers={"x-key": "a"}, priority=3))
    flags = pr.property_flags(raw)
    assert flags & pr.FLAG_HEADERS
    assert flags & pr.FLAG_PRIORITY
    assert not flags & pr.FLAG_EXPIRATION
    assert pr.property_flags(pr.EMPTY_PROPERTIES) == 0
    assert pr.encode_properties(pr.BasicProperties()) == pr.EMPTY_PROPERTIES
    assert pr.property_flags(b"") == 0


def test_known_encoding() -> None:
    raw = pr.encode_properties(pr.BasicProperties(content_type="text/plain", delivery_mode=2))
    assert raw == b"\x90\x00\x0atext/plain\x02"


@given(properties().filter(lambda p: p != pr.BasicProperties()), st.data())
def test_truncation_is_frame_error(props: pr.BasicProperties, data: st.DataObject) -> None:
    raw = pr.encode_properties(props)
    cut = data.draw(st.integers(0, len(raw) - 1))
    with pytest.raises(AMQPError) as err:
        pr.decode_properties(raw[:cut])
    assert err.value.code is ReplyCode.FRAME_ERROR


@given(st.binary(max_size=48))
def test_random_bytes_raise_only_amqp_errors(raw: bytes) -> None:
    assert error_code(pr.decode_properties, raw) in {None, 501, 502}


def test_bad_input() -> None:
    with pytest.raises(AMQPError) as err:
        pr.decode_properties(b"\x00\x02")  # an undefined property flag
    assert err.value.code is ReplyCode.FRAME_ERROR
    with pytest.raises(AMQPError) as err:
        pr.decode_properties(b"\x80\x00\x01\xff")  # content_type not UTF-8
    assert err.value.code is ReplyCode.SYNTAX_ERROR
    with pytest.raises(AMQPError) as err:
        pr.decode_properties(b"\x00\x00\x00")  # trailing byte
    assert err.value.code is ReplyCode.FRAME_ERROR
    # the continuation bit: the basic class has no second flags word (with one or without)
    for raw in (b"\x00\x01", b"\x00\x01\x00\x00", b"\x80\x01\x01a"):
        with pytest.raises(AMQPError) as err:
            pr.decode_properties(raw)
        assert err.value.code is ReplyCode.FRAME_ERROR
        assert "continuation" in err.value.explanation
    with pytest.raises(ValueError, match="255"):
        pr.encode_properties(pr.BasicProperties(message_id="m" * 256))
    with pytest.raises(ValueError, match="octet"):
        pr.encode_properties(pr.BasicProperties(priority=256))
