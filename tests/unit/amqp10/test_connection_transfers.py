"""The transfer frames the connection machine reads on its hot path: `decode_performative`'s
Transfer fast path agrees with the generic composite decoder for every field combination,
and a truncated or odd body falls back to it (same value, or the same error)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ringmq.amqp10 import performatives as p
from ringmq.amqp10.composite import decode_composite
from ringmq.amqp10.types import DecodeError

uints = st.integers(0, 2**32 - 1)
transfers = st.builds(
    p.Transfer,
    handle=uints,
    delivery_id=st.none() | uints,
    delivery_tag=st.none() | st.binary(max_size=32),
    message_format=st.none() | uints,
    settled=st.none() | st.booleans(),
    more=st.booleans(),
    rcv_settle_mode=st.none() | st.sampled_from([0, 1]),
    state=st.none() | st.sampled_from([p.Accepted(), p.Released()]),
    resume=st.booleans(),
    aborted=st.booleans(),
)


@given(transfers, st.binary(max_size=8))
def test_fast_transfer_decode_agrees_with_the_generic_decoder(
    t: p.Transfer, payload: bytes
) -> None:
    body = t.encode() + payload
    got, off = p.decode_performative(body)
    want, want_off = decode_composite(body)
    assert (got, off) == (want, want_off)
    assert body[off:] == payload


@given(transfers, st.data())
def test_a_cut_transfer_is_refused_like_the_generic_decoder_refuses_it(
    t: p.Transfer, data: st.DataObject
) -> None:
    body = t.encode()
    cut = body[: data.draw(st.integers(0, len(body) - 1))]
    try:
        want = decode_composite(cut)
    except DecodeError:
        with pytest.raises(DecodeError):
            p.decode_performative(cut)
    else:
        assert p.decode_performative(cut) == want
