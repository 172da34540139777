"""The stored form of a lease's held entries (`core.streambooks._runs`): [pos, seq, n] runs."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ringmq.core.message import SeqId
from ringmq.core.streambooks import _runs, _unrun


def _runs_one_by_one(positions: list[int], seqs: list[SeqId]) -> list[list[int]]:
    # The reference: extend the last run while both the position and the seq step by one.
    out: list[list[int]] = []
    for pos, seq in zip(positions, seqs, strict=True):
        if out and pos == out[-1][0] + out[-1][2] and seq == out[-1][1] + out[-1][2]:
            out[-1][2] += 1
        else:
            out.append([pos, int(seq), 1])
    return out


@given(
    start=st.integers(0, 5),
    steps=st.lists(st.tuples(st.sampled_from([1, 1, 1, 2]), st.integers(-3, 3)), max_size=12),
    seq0=st.integers(0, 9),
)
def test_runs_match_the_per_entry_rule(start: int, steps: list[tuple[int, int]], seq0: int) -> None:
    # Mostly consecutive positions and seqs (the closed form's case), with holes and jumps.
    positions: list[int] = []
    seqs: list[SeqId] = []
    pos, seq = start, seq0
    for dpos, dseq in steps:
        positions.append(pos)
        seqs.append(SeqId(seq))
        pos += dpos
        seq += 1 if dseq > 0 else dseq
    got = _runs(positions, seqs)
    assert got == _runs_one_by_one(positions, seqs)
    assert list(_unrun(got)) == list(zip(positions, seqs, strict=True))
