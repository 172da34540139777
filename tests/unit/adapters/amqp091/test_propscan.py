"""adapters/amqp091/propscan.py: the publish fast path agrees with the full property decode."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from ringmq.adapters.amqp091.propscan import scan_many, scan_simple
from ringmq.amqp.properties import BasicProperties, decode_properties, encode_properties
from ringmq.amqp.reply_codes import AMQPError

_short = st.text(max_size=20).filter(lambda s: len(s.encode()) <= 255)
_props = st.builds(
    BasicProperties,
    content_type=st.none() | _short,
    content_encoding=st.none() | _short,
    headers=st.none() | st.dictionaries(st.text(max_size=5), st.integers(0, 9), max_size=2),
    delivery_mode=st.none() | st.integers(0, 255),
    priority=st.none() | st.integers(0, 9),
    correlation_id=st.none() | _short,
    reply_to=st.none() | _short,
    expiration=st.none() | st.sampled_from(["0", "100", "x"]),
    message_id=st.none() | _short,
    timestamp=st.none() | st.integers(0, 2**64 - 1),
    type=st.none() | _short,
    user_id=st.none() | _short,
    app_id=st.none() | _short,
    cluster_id=st.none() | _short,
)
_simple = _props.map(
    lambda p: BasicProperties(
        **{
            **{k: getattr(p, k) for k in p.__slots__},
            "headers": None,
            "priority": None,
            "expiration": None,
            "reply_to": None,
        }
    )
)


def _full(pb: bytes) -> Any:
    try:
        p = decode_properties(pb)
    except AMQPError:
        return "error"
    return p


def _check(pb: bytes) -> None:
    fast = scan_simple(pb)
    full = _full(pb)
    if fast is None:
        return
    # Whatever the fast path accepts, the full decode accepts with the same two fields and
    # nothing the fast path ignores.
    assert full != "error", pb
    assert fast == (full.delivery_mode, full.message_id)
    assert full.headers is None
    assert full.priority is None
    assert full.expiration is None
    assert full.reply_to is None


@given(_props)
def test_agrees_with_decode_on_valid_lists(props: BasicProperties) -> None:
    pb = encode_properties(props)
    _check(pb)
    simple = (
        props.headers is None
        and props.priority is None
        and props.expiration is None
        and props.reply_to is None
    )
    # Simple, well-formed lists always take the fast path.
    assert (scan_simple(pb) is not None) == simple


@given(_simple)
def test_simple_lists_are_scanned(props: BasicProperties) -> None:
    assert scan_simple(encode_properties(props)) == (props.delivery_mode, props.message_id)


@given(_simple, st.data())
def test_mangled_lists_never_accepted_wrongly(props: BasicProperties, data: st.DataObject) -> None:
    pb = bytearray(encode_properties(props))
    op = data.draw(st.sampled_from(["cut", "extend", "flip", "utf8"]))
    if op == "cut" and len(pb) > 0:
        del pb[data.draw(st.integers(0, len(pb) - 1)) :]
    elif op == "extend":
        pb += data.draw(st.binary(min_size=1, max_size=4))
    elif op == "flip" and len(pb) > 0:
        i = data.draw(st.integers(0, len(pb) - 1))
        pb[i] = data.draw(st.integers(0, 255))
    elif op == "utf8" and len(pb) > 2:
        pb[data.draw(st.integers(2, len(pb) - 1))] = 0xFF
    _check(bytes(pb))


@given(st.binary(max_size=40))
def test_random_bytes(pb: bytes) -> None:
    _check(pb)


def test_examples() -> None:
    assert scan_simple(b"\x00\x80\x03abc") == (None, "abc")
    assert scan_simple(b"\x10\x80\x02\x03abc") == (2, "abc")
    assert scan_simple(b"\x00\x80\x03ab") is None  # truncated
    assert scan_simple(b"\x00\x80\x02\xff\xfe") is None  # invalid UTF-8
    assert scan_simple(b"\x00\x00") == (None, None)
    assert scan_simple(b"\x20\x00\x00\x00\x00\x00") is None  # headers: full decode
    assert scan_simple(b"") is None


_mid_only = _short.map(lambda m: encode_properties(BasicProperties(message_id=m)))
_any_list = st.one_of(
    _mid_only,
    _mid_only.map(lambda pb: pb[:-1] + b"\xff"),  # a message id that is not UTF-8
    _mid_only.map(lambda pb: pb + b"x"),  # a trailing byte
    _simple.map(encode_properties),
    _props.map(encode_properties),
    st.binary(max_size=12),
)


@given(st.lists(_any_list, max_size=12), st.integers(0, 14))
def test_scan_many_is_scan_simple_of_each(lists: list[bytes], stop: int) -> None:
    stop = min(stop, len(lists))
    persistent, ids = scan_many(lists, stop)
    want: list[tuple[int | None, str | None]] = []
    for pb in lists[:stop]:
        got = scan_simple(pb)
        if got is None:
            break
        want.append(got)
    assert len(ids) == len(persistent) == len(want)
    assert ids == [mid for _, mid in want]
    assert list(persistent) == [int(mode == 2) for mode, _ in want]
