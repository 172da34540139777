"""The storage port and its two stores, under the name the rest of ringmq imports.

`ringmq.storage.store` is where server/, benchmarks and tests import the store from; the code
lives in modules named for what they own:

* `port.py`: the `Store` Protocol and its calling protocol, `SyncPoint`, `is_persistent`, the
  recovered-state records (`RecoveredState`, `RecoveredMessage`, `RecoveredTail`);
* `memstore.py`: `MemoryStore`;
* `filestore.py`: `FileStore` (files, positions, group commit, fencing, space reclamation),
  with `index.py` (its in-memory index and recovery terms), `replay.py` (journal replay) and
  `reader.py` (reading entries back: `RecoveredQueue`, `QueueCopies`).

No state here: re-exports only.
"""

from __future__ import annotations

from ringmq.storage.filestore import DEFAULT_EMBED_BELOW, FileStore
from ringmq.storage.memstore import MemoryStore
from ringmq.storage.port import (
    RecoveredMessage,
    RecoveredState,
    RecoveredTail,
    Store,
    SyncPoint,
    is_persistent,
)
from ringmq.storage.reader import QueueCopies, RecoveredQueue

__all__ = [
    "DEFAULT_EMBED_BELOW",
    "FileStore",
    "MemoryStore",
    "QueueCopies",
    "RecoveredMessage",
    "RecoveredQueue",
    "RecoveredState",
    "RecoveredTail",
    "Store",
    "SyncPoint",
    "is_persistent",
]
