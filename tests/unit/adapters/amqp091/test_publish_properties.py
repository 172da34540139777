"""The AMQP 0-9-1 adapter's shortcut for property lists holding only delivery_mode (and
content_type)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ringmq.adapters.amqp091.message import only_delivery_mode as _only_delivery_mode
from ringmq.amqp.properties import BasicProperties, decode_properties, encode_properties

_text = st.text(max_size=20).filter(lambda t: len(t.encode()) <= 255)


@given(
    content_type=st.none() | _text,
    delivery_mode=st.none() | st.integers(0, 255),
    correlation_id=st.none() | _text,
)
def test_agrees_with_the_full_decoder(
    content_type: str | None, delivery_mode: int | None, correlation_id: str | None
) -> None:
    pb = encode_properties(
        BasicProperties(
            content_type=content_type,
            delivery_mode=delivery_mode,
            correlation_id=correlation_id,
        )
    )
    mode = _only_delivery_mode(pb)
    if delivery_mode is None or correlation_id is not None:
        assert mode is None
    else:
        assert mode == delivery_mode == decode_properties(pb).delivery_mode


def test_malformed_lists_go_to_the_full_decoder() -> None:
    assert _only_delivery_mode(b"\x10\x00") is None  # delivery_mode flagged, missing
    assert _only_delivery_mode(b"\x10\x00\x02\x00") is None  # a stray byte after it
    assert _only_delivery_mode(b"\x90\x00\x05ab\x02") is None  # content_type truncated
    assert _only_delivery_mode(b"\x90\x00\x01\xff\x02") is None  # content_type not UTF-8
    assert _only_delivery_mode(b"\x90\x00\x01a\x02") == 2
