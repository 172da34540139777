"""ringmq.storage: where bytes live (journal, shared message store, definitions, paging).

The core talks to this layer only through the `Store` port (`store.py`); paging structures
(`paging.py`) are used by the queue engine for memory-bounded queues.
"""

from __future__ import annotations

from ringmq.storage.bodyspill import BodySpill
from ringmq.storage.bodystore import DiskBodyStore
from ringmq.storage.pager import Pager
from ringmq.storage.paging import PageQueue
from ringmq.storage.records import Entry
from ringmq.storage.store import (
    DEFAULT_EMBED_BELOW,
    FileStore,
    MemoryStore,
    RecoveredMessage,
    RecoveredQueue,
    RecoveredState,
    RecoveredTail,
    Store,
    SyncPoint,
    is_persistent,
)

__all__ = [
    "DEFAULT_EMBED_BELOW",
    "BodySpill",
    "DiskBodyStore",
    "Entry",
    "FileStore",
    "MemoryStore",
    "PageQueue",
    "Pager",
    "RecoveredMessage",
    "RecoveredQueue",
    "RecoveredState",
    "RecoveredTail",
    "Store",
    "SyncPoint",
    "is_persistent",
]
