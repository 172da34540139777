"""`tune_gc` (called by `run` before serving) raises the collector's thresholds and freezes."""

from __future__ import annotations

import gc

from ringmq.server.runtime import GC_THRESHOLDS, tune_gc


def test_tune_gc_sets_thresholds_and_freezes() -> None:
    before = gc.get_threshold()
    try:
        tune_gc()
        assert gc.get_threshold() == GC_THRESHOLDS
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
    assert GC_THRESHOLDS[0] > before[0]
