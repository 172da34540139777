"""The executor's Python worker: its long-lived heap kept out of PySpark's per-task collection.

PySpark reuses a Python worker process for task after task (`spark.python.worker.reuse`, on by
default) and runs a full `gc.collect()` in it after every task (`pyspark/daemon.py`). A full
collection walks every container object alive in the process; a worker that has imported
pyspark, pandas, pyarrow and the connector holds about 90,000 of them, and the walk took
17-30 ms here, once per task. A write of 1,000,000 rows in 100 tasks of 10,000 rows spent more
CPU in those walks than in its own work.

`freeze_heap` does, after the task that called it has done its work and when nothing in the
process is frozen yet (so once per process, unless someone unfreezes it): a collection (cyclic
garbage is freed first), then `gc.freeze()`, which moves every object alive into a permanent
generation that later collections do not walk. What is frozen is what a
reused worker keeps anyway (modules, classes, functions, caches); objects made after it are
collected as before. The cost: an object alive at that moment that later becomes cyclic
garbage is never freed, a one-time and bounded amount per worker process.
"""

from __future__ import annotations

import gc


def freeze_heap() -> None:
    """Collect, then freeze every object alive (`gc.freeze`), unless the process has frozen
    objects already."""
    if gc.get_freeze_count():
        return
    gc.collect()
    gc.freeze()


__all__ = ["freeze_heap"]
