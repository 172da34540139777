"""`tune_gc` (called by `run` before serving) raises the collector's thresholds and freezes;
`tune_threads` shortens the GIL's switch interval."""

from __future__ import annotations

import gc
import sys

from ringmq.server.loop import SWITCH_INTERVAL_S, tune_threads
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


def test_tune_threads_shortens_the_switch_interval() -> None:
    # `run_server` and `run_member` call it before serving: a thread back from an fsync
    # waits at most this long for a loop thread that runs Python (benchmarks/gil_wait.py)
    before = sys.getswitchinterval()
    try:
        tune_threads()
        assert sys.getswitchinterval() == SWITCH_INTERVAL_S < before
    finally:
        sys.setswitchinterval(before)
