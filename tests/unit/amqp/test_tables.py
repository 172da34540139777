"""Field tables: round-trips, byte-identity with pika, decoding pamqp's output, bad input."""

from __future__ import annotations

import struct
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pamqp import decode as pdecode
from pamqp import encode as pencode
from pika import data as pika_data

from ringmq.amqp.reply_codes import AMQPError, ReplyCode
from ringmq.amqp.tables import MAX_DEPTH, decode_array, decode_table, encode_array, encode_table
from tests.unit.amqp.strategies import error_code, normalise, tables


@given(tables())
def test_round_trip(table: dict[str, Any]) -> None:
    raw = encode_table(table)
    assert decode_table(raw, 0) == (table, len(raw))
    # also at an offset inside a larger buffer, and through a memoryview
    assert decode_table(memoryview(b"xyz" + raw + b"tail"), 3) == (table, 3 + len(raw))


@given(tables(floats=False))  # pika cannot encode floats at all
def test_byte_identical_to_pika(table: dict[str, Any]) -> None:
    pieces: list[bytes] = []
    pika_data.encode_table(pieces, table)
    assert encode_table(table) == b"".join(pieces)


@given(tables(simple=True))
def test_we_decode_pamqp_tables(table: dict[str, Any]) -> None:
    raw = pencode.field_table(table)
    decoded, end = decode_table(raw, 0)
    assert end == len(raw)
    assert decoded == table


@given(tables(simple=True))
def test_pamqp_decodes_our_tables(table: dict[str, Any]) -> None:
    raw = encode_table(table)
    consumed, theirs = pdecode.field_table(raw)
    assert consumed == len(raw)
    assert normalise(theirs) == table


def test_types_and_representations() -> None:
    now = datetime(2026, 11, 22, 5, 0, tzinfo=UTC)
    table = {
        "b": True,
        "i": 7,
        "big": 2**40,
        "s": "text",
        "x": b"\x00\xffbytes",
        "f": 1.5,
        "d": Decimal("3.14"),
        "t": now,
        "v": None,
        "a": [1, "two", [3]],
        "n": {"k": "v"},
    }
    raw = encode_table(table)
    assert b"\x01iI\x00\x00\x00\x07" in raw  # 32-bit ints as 'I'
    assert b"\x03bigl" in raw  # larger ones as 'l'
    assert b"\x01xx" in raw  # bytes as 'x'
    decoded, _ = decode_table(raw, 0)
    assert decoded == table
    assert isinstance(decoded["x"], bytes)
    assert decoded["t"].tzinfo is not None


def test_rabbitmq_short_type_letters_decode() -> None:
    body = (
        b"\x01bb\xff"  # signed 8
        + b"\x01BB\xff"  # unsigned 8
        + b"\x01ss\xff\xfe"  # signed 16 (RabbitMQ's 's')
        + b"\x01uu\xff\xfe"  # unsigned 16
        + b"\x01ii\xff\xff\xff\xff"  # unsigned 32
        + b"\x01ff"
        + struct.pack(">f", 0.5)
        + b"\x01SS\x00\x00\x00\x02\xff\xfe"  # non-UTF-8 long string stays bytes
    )
    raw = struct.pack(">I", len(body)) + body
    decoded, _ = decode_table(raw, 0)
    assert decoded == {
        "b": -1,
        "B": 255,
        "s": -2,
        "u": 65534,
        "i": 2**32 - 1,
        "f": 0.5,
        "S": b"\xff\xfe",
    }


def test_arrays() -> None:
    raw = encode_array([1, "a", None])
    assert decode_array(raw, 0) == ([1, "a", None], len(raw))


def test_empty_and_none() -> None:
    assert encode_table({}) == encode_table(None) == b"\x00\x00\x00\x00"


@given(tables().filter(bool), st.data())
def test_truncation_is_frame_error(table: dict[str, Any], data: st.DataObject) -> None:
    raw = encode_table(table)
    cut = data.draw(st.integers(0, len(raw) - 1))
    with pytest.raises(AMQPError) as err:
        decode_table(raw[:cut], 0)
    assert err.value.code is ReplyCode.FRAME_ERROR


@given(st.binary(max_size=64))
def test_random_bytes_raise_only_amqp_errors(body: bytes) -> None:
    raw = struct.pack(">I", len(body)) + body
    assert error_code(decode_table, raw, 0) in {None, 501, 502}


def test_bad_type_letter_is_syntax_error() -> None:
    with pytest.raises(AMQPError) as err:
        decode_table(b"\x00\x00\x00\x03\x01kZ", 0)
    assert err.value.code is ReplyCode.SYNTAX_ERROR


def test_value_running_past_its_table_is_frame_error() -> None:
    # table length says 4, but the 'I' value needs 4 more bytes that belong to the next field
    with pytest.raises(AMQPError) as err:
        decode_table(b"\x00\x00\x00\x04\x01kI\x00\x00\x00\x00\x00", 0)
    assert err.value.code is ReplyCode.FRAME_ERROR


def test_nesting_is_bounded() -> None:
    value: Any = "leaf"
    for _ in range(MAX_DEPTH + 5):
        value = {"n": value}
    raw = encode_table(value)
    with pytest.raises(AMQPError) as err:
        decode_table(raw, 0)
    assert err.value.code is ReplyCode.SYNTAX_ERROR


def test_deep_array_nesting_does_not_recurse_unbounded() -> None:
    depth = 5000
    inner = b""
    for _ in range(depth):
        inner = b"A" + struct.pack(">I", len(inner)) + inner
    raw = struct.pack(">I", len(inner) + 2) + b"\x01k" + inner
    with pytest.raises(AMQPError):
        decode_table(raw, 0)


def test_unencodable_values() -> None:
    with pytest.raises(TypeError):
        encode_table({"k": object()})
    with pytest.raises(ValueError, match="255"):
        encode_table({"k" * 256: 1})
    with pytest.raises(ValueError, match="64-bit"):
        encode_table({"k": 2**64})
