"""The streams API's bulk publish body: `decode_publish` against `encode_publish`."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ringmq.connector.records import encode_publish
from ringmq.management.streamwire import StreamError, decode_publish

_KEYS = st.sampled_from(["", "q", "orders.eu", "é-ключ"])
_MESSAGES = st.lists(st.tuples(_KEYS, st.binary(max_size=12), st.binary(max_size=40)), max_size=30)


@given(_MESSAGES, st.booleans())
def test_decode_publish_inverts_encode_publish(
    messages: list[tuple[str, bytes, bytes]], same_key: bool
) -> None:
    # one routing key for every message (a Spark sink's) or a mix of them
    if same_key:
        messages = [("orders.eu", p, b) for _, p, b in messages]
    assert decode_publish(encode_publish(messages)) == messages


def test_keys_of_one_length_that_differ_are_each_decoded() -> None:
    messages = [("ab", b"", b"1"), ("ab", b"", b"2"), ("cd", b"", b"3")]
    assert decode_publish(encode_publish(messages)) == messages


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"\x01", "too short"),
        (struct.pack("<I", 2) + b"\x00" * 8, "truncated"),
        (encode_publish([("q", b"", b"x")]) + b"!", "does not match"),
        (encode_publish([("q", b"", b"xy")])[:-1], "does not match"),
        (struct.pack("<IIII", 1, 1, 0, 0) + b"\xff", "not UTF-8"),
        (struct.pack("<IIIIIII", 2, 1, 1, 0, 0, 0, 0) + b"a\xff", "not UTF-8"),
    ],
)
def test_malformed_bodies_are_refused_with_400(body: bytes, reason: str) -> None:
    with pytest.raises(StreamError) as err:
        decode_publish(body)
    assert err.value.status == 400
    assert reason in err.value.reason
