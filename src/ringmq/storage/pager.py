"""The broker's paging directory: one `PageQueue` per queue and one `BodySpill`.

Theory of operation: the directory is wiped when the `Pager` is made (paged data is transient,
as RabbitMQ's transient message store is reset at startup); each queue gets a `PageQueue` in a
directory named by a counter on first use (queue names may hold any character), dropped with
its files when the queue is deleted. One owner thread.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from ringmq.storage.bodyspill import BodySpill
from ringmq.storage.paging import DEFAULT_RUN_BYTES, PageQueue

__all__ = ["BodySpill", "Pager"]


class Pager:
    """The broker's paging directory: one `PageQueue` per queue and one `BodySpill`.

    The directory is wiped on construction: paged data is transient (RabbitMQ's transient
    message store is likewise reset at startup).
    """

    def __init__(self, directory: Path, *, run_bytes: int = DEFAULT_RUN_BYTES) -> None:
        self.directory = directory
        self.run_bytes = run_bytes
        if directory.exists():
            shutil.rmtree(directory)
        directory.mkdir(parents=True)
        self._queues: dict[str, PageQueue] = {}
        self._next_dir = 0
        self.spill = BodySpill(directory / "spill")

    def queue(self, name: str) -> PageQueue:
        """The page queue of `name`, created on first use."""
        pq = self._queues.get(name)
        if pq is None:
            # directory names are counters: queue names may hold any character
            self._next_dir += 1
            pq = PageQueue(self.directory / f"q{self._next_dir:08d}", run_bytes=self.run_bytes)
            self._queues[name] = pq
        return pq

    def drop(self, name: str) -> None:
        """Delete a queue's page files (queue deleted)."""
        pq = self._queues.pop(name, None)
        if pq is not None:
            pq.clear()
            shutil.rmtree(pq.directory, ignore_errors=True)
