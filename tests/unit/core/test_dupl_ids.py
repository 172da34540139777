"""Artemis `_AMQ_DUPL_ID` caches in `PublishDedup`: per address, bounded by count, journaled
only with `persist-id-cache`, restored from the store's log."""

from __future__ import annotations

from ringmq.core.dedup import PublishDedup, dupl_id


def test_cache_is_per_address_and_bounded_by_count() -> None:
    d = PublishDedup(id_cache_size=2)
    assert d.admit_address("/", "a", "1", 0)
    assert not d.admit_address("/", "a", "1", 10**12)  # no time window: still a duplicate
    assert d.admit_address("/", "b", "1", 0)
    assert d.admit_address("/", "a", "2", 0)
    assert d.admit_address("/", "a", "3", 0)
    assert d.admit_address("/", "a", "1", 0)  # pushed out by 2 and 3


def test_journaled_only_with_persist_and_restored() -> None:
    journaled: list[tuple[str, str, int]] = []
    d = PublishDedup(persist_id_cache=True)
    d.journal = lambda scope, mid, at: journaled.append((scope, mid, at))
    d.admit_address("/", "a", b"\xff", 5)
    assert journaled == [("address\x1f/\x1fa", dupl_id(b"\xff") or "", 5)]
    restored = PublishDedup()
    assert restored.restore({"address\x1f/\x1fa": {dupl_id(b"\xff") or "": 5}}, {"/": None}, 9)
    assert not restored.admit_address("/", "a", b"\xff", 9)

    off = PublishDedup(persist_id_cache=False)
    off.journal = lambda scope, mid, at: journaled.append((scope, mid, at))
    off.admit_address("/", "a", "x", 5)
    assert len(journaled) == 1
    assert off.live() == {}
    assert off.restore({"address\x1f/\x1fa": {"x": 5}}, {"/": None}, 9) == 0


def test_refused_publish_forgets_the_id() -> None:
    d = PublishDedup()
    assert d.admit_address("/", "a", "1", 0)
    d.refused_address("/", "a", "1")
    assert d.admit_address("/", "a", "1", 0)
