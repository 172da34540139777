"""PAGED_RUN records built from columns: every row's message comes back from the record as the
columns stand for it (`RunColumns.messages`), whatever mix of ids (none, ASCII, not ASCII,
empty) and persistence, and `column_records` cuts the rows as `run_end` cuts the same
messages."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from ringmq.core.message import Message
from ringmq.core.queue.ports import RunColumns, Spilled
from ringmq.storage.pageruns import MAX_RUN_BODIES, PageRun, column_records, run_end

_IDS = st.none() | st.text(alphabet="abc:0123", max_size=12) | st.text(max_size=4)


@settings(max_examples=150, deadline=None)
@given(
    rows=st.lists(
        st.tuples(
            _IDS,
            st.booleans(),
            st.binary(max_size=8),
            st.sampled_from([0, 7, 100_000, MAX_RUN_BODIES - 3]),
        ),
        min_size=1,
        max_size=12,
    ),
    first_seq=st.integers(1, 10**9),
)
def test_column_records_hold_the_runs_messages(
    rows: list[tuple[str | None, bool, bytes, int]], first_seq: int
) -> None:
    run = RunColumns(
        "ex",
        "rk",
        1234,
        [b"\x00\x00" + p for _, _, p, _ in rows],
        [bytes([len(rows) % 251]) * size for *_, size in rows],
        [i for i, *_ in rows],
        bytes(1 if p else 0 for _, p, _, _ in rows),
    )
    seqs = list(range(first_seq, first_seq + 2 * len(rows), 2))
    want = run.messages()
    items = [(s, m, None) for s, m in zip(seqs, want, strict=True)]
    got: list[Spilled] = []
    at = 0
    for payload, count, nbytes, last in column_records(seqs, run):
        assert (at + count, nbytes) == run_end(items, at, None)
        assert last == seqs[at + count - 1]
        record = PageRun(payload, 0, len(payload))
        record.collect(0, got, {}, count, None)
        at += count
    assert at == len(rows)
    assert [_fields(s, m) for s, m, _ in got] == [_fields(s, m) for s, m, _ in items]


def _fields(seq: int, m: Message) -> tuple[object, ...]:
    return (
        seq,
        m.exchange,
        m.routing_key,
        bytes(m.properties_bin),
        bytes(m.body),
        m.priority,
        m.persistent,
        m.message_id,
        m.timestamp_ms,
    )
