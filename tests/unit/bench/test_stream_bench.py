"""The in-process driver of the streaming read's broker side (`benchmarks/stream_bench.py`)."""

from __future__ import annotations

import pytest
from benchmarks import stream_bench


@pytest.mark.parametrize("paged", [True, False])
def test_drain_reads_every_message_of_a_paged_queue(paged: bool) -> None:
    # 3000 messages past a head of 200: the drain pages them back in through its reserves
    # (the driver asserts that every position was reserved, read and settled).
    us, phases, spilled = stream_bench.drain_once(
        3000, 64, 1000, 400, 0, batch=1500, paged=paged, head=200
    )
    assert spilled == (2800 if paged else 0)
    assert us > 0
    assert len(phases) == 3
