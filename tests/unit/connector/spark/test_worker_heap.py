"""`freeze_heap` (connector/spark/worker.py), in a fresh interpreter: the first call freezes
the objects alive, later calls do nothing while anything is frozen, and it freezes again once
someone unfroze the heap."""

from __future__ import annotations

import subprocess
import sys

_SCRIPT = """
import gc
from ringmq.connector.spark.worker import freeze_heap
assert gc.get_freeze_count() == 0
freeze_heap()
frozen = gc.get_freeze_count()
assert frozen > 1000, frozen
junk = [[i] for i in range(100)]
freeze_heap()
assert gc.get_freeze_count() == frozen  # nothing more: the junk is still collectable
gc.unfreeze()
assert gc.get_freeze_count() == 0
freeze_heap()
assert gc.get_freeze_count() >= frozen
print(frozen)
"""


def test_freeze_heap_freezes_what_is_not_frozen() -> None:
    out = subprocess.run(
        [sys.executable, "-c", _SCRIPT], capture_output=True, text=True, check=True, timeout=60
    )
    assert int(out.stdout) > 1000
