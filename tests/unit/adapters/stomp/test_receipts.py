"""SEND receipts against a model: each released once, in order, only when every SEND up to it
is confirmed, whatever order (and grouping) the confirms come in."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ringmq.adapters.stomp.receipts import Receipts


@st.composite
def confirm_orders(draw: st.DrawFn) -> tuple[int, set[int], list[tuple[int, bool]]]:
    n = draw(st.integers(1, 12))
    asked = draw(st.sets(st.integers(1, n)))
    order = draw(st.permutations(range(1, n + 1)))
    # some confirms cumulative: `multiple` is only sent when every earlier one is confirmed
    confirms: list[tuple[int, bool]] = []
    done: set[int] = set()
    for seq in order:
        done.add(seq)
        multiple = draw(st.booleans()) and all(i in done for i in range(1, seq + 1))
        confirms.append((seq, multiple))
    return n, asked, confirms


@given(confirm_orders())
def test_receipts_in_order_once_everything_before_is_confirmed(
    case: tuple[int, set[int], list[tuple[int, bool]]],
) -> None:
    n, asked, confirms = case
    r = Receipts()
    for seq in sorted(asked):
        r.expect(seq, f"r{seq}")
    released: list[str] = []
    confirmed: set[int] = set()
    for seq, multiple in confirms:
        confirmed.update(range(1, seq + 1) if multiple else (seq,))
        released += r.confirmed(seq, multiple)
        floor = 0
        while floor + 1 in confirmed:
            floor += 1
        assert released == [f"r{s}" for s in sorted(asked) if s <= floor]
    assert released == [f"r{s}" for s in sorted(asked)]
    assert not r
    assert r.confirmed_upto == n
