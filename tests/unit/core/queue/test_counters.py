"""What a queue reports: its stats snapshot, the unacked view, the next deadline and the last
seq."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.core.queue.kit import msg, queue, take


def test_stats_snapshot() -> None:
    q = queue({"x-max-length": 10, "x-dead-letter-exchange": "dlx"})
    q.publish(msg("aa"), 0)
    q.publish(msg("bbb"), 0)
    q.publish(msg("c", **{"x-delay": 10}), 0)
    d = take(q)
    s = q.stats()
    assert s["message_count"] == 3
    assert s["message_bytes"] == 6
    assert (s["ready"], s["ready_bytes"]) == (1, 3)
    assert (s["delivering"], s["delivering_bytes"]) == (1, 2)
    assert (s["scheduled"], s["scheduled_bytes"]) == (1, 1)
    assert s["added"] == 3
    assert s["limit"] == {
        "family": "rabbit",
        "counts": "ready",
        "max_count": 10,
        "max_bytes": None,
        "action": "drop-head",
    }
    q.reject([d.seq], 0)
    assert q.stats()["dead_lettered"] == {"rejected": 1}
    assert len(q) == 2


@pytest.mark.parametrize("args", [{}, {"x-ring-size": 5}, {"x-last-value-key": "k"}])
def test_unacked_view_and_next_deadline_without_work(args: dict[str, Any]) -> None:
    q = queue(args)
    q.publish(msg("A"), 0)
    d = take(q)
    assert q.unacked_seqs() == [d.seq]
    assert q.next_deadline_ms() is None


def test_last_seq_counts_every_publish_including_refused_ones() -> None:
    q = queue({"x-max-length": 1, "x-overflow": "reject-publish"})
    assert q.last_seq == 0
    for name in "ABC":
        q.publish(msg(name), 0)
    assert (q.last_seq, q.counters.added) == (3, 1)
    assert q.last_seq == 3  # reading it does not consume a seq
