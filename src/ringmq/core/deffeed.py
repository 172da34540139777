"""The shards' definitions feed: what shard 0 tells the other shards (`DefinitionFeed`).

Theory of operation
-------------------
With several shards (docs/dev/shards.md) shard 0 owns the definitions: vhosts, users,
permissions, policies, parameters, exchanges, queues (each with the shard that owns it) and
bindings. Every other shard keeps a copy of them (`core/defcopies.py`), so that it routes a
publish as shard 0 would and answers a declaration the same way.

`DefinitionFeed` is the store's definition sync run a second time with another sink
(`DefinitionSync(everything=True)`: one implementation of which change is written when): the
same `touch` hooks at every create, delete, bind and unbind, the same diff at the end of each
call, but every object is kept (transient and exclusive ones too) and each change is appended
to the feed as a `DefinitionChange` (a sequence number, the kind, the key, the new value or
None for deleted) instead of written to a store. The server drains the changes after each
batch (`Broker.drain_definitions`) and sends them on. A shard that starts, or fell behind,
takes `changes_snapshot()` first: every definition as one put each, numbered with the feed's
current sequence. `definitions_view` is the same sync's snapshot of any registry, written
nowhere (a shard compares what it holds with such a snapshot: core/defcopies.py).

Each change states what a key holds now, so a shard applying them may apply one twice.
Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ringmq.core.defsync import DefinitionSync
from ringmq.core.storeport import KINDS

if TYPE_CHECKING:
    from ringmq.core.ports import Registry

__all__ = ["DefinitionChange", "DefinitionFeed", "definitions_view"]


@dataclass(frozen=True, slots=True)
class DefinitionChange:
    """Definition `key` of `kind` (`storeport.KINDS`) now holds `value` (None: deleted); the
    feed's `seq`-th change. Values are the JSON-able ones of the definitions log."""

    seq: int
    kind: str
    key: str
    value: Mapping[str, Any] | None


class _Changes:
    # The feed's sink in the store's place (`storeport.DefinitionStorePort`).

    def __init__(self) -> None:
        self.seq = 0
        self.pending: list[DefinitionChange] = []

    def put_definition(self, kind: str, key: str, value: Mapping[str, Any]) -> int:
        self.seq += 1
        self.pending.append(DefinitionChange(self.seq, kind, key, value))
        return 0

    def delete_definition(self, kind: str, key: str) -> int:
        self.seq += 1
        self.pending.append(DefinitionChange(self.seq, kind, key, None))
        return 0


class _Nowhere:
    # The sink of a sync used only for its snapshot (`definitions_view`): nothing is written.
    def put_definition(self, kind: str, key: str, value: Mapping[str, Any]) -> int:
        raise AssertionError("a view writes nothing")

    def delete_definition(self, kind: str, key: str) -> int:
        raise AssertionError("a view writes nothing")


def _no_held(_key: str) -> None:
    # An exchange's held messages are its shard's store's business, not the feed's.
    return None


def definitions_view(registry: Registry) -> dict[str, dict[str, Any]]:
    """Every definition of `registry` as the feed keeps them (kind -> key -> value)."""
    return DefinitionSync(registry, _Nowhere(), _no_held, everything=True).snapshot()


class DefinitionFeed(DefinitionSync):
    """Shard 0's definitions as a sequence of changes (see the module docstring): the
    definition sync with the feed as its sink (`touch`, `touch_binding` and `sync` are the
    sync's own)."""

    def __init__(self, registry: Registry) -> None:
        self._changes = _Changes()
        super().__init__(registry, self._changes, _no_held, everything=True)
        self.sync(full=True)  # the first changes: what there is already

    @property
    def seq(self) -> int:
        """The sequence number of the last change made."""
        return self._changes.seq

    def drain(self) -> list[DefinitionChange]:
        """The changes made since the last drain, in order."""
        out = self._changes.pending
        self._changes.pending = []
        return out

    def changes_snapshot(self) -> list[DefinitionChange]:
        """Every definition as a put, in the order they apply, numbered with `seq` (a shard
        that applies it, then the changes after `seq`, has every definition)."""
        seq = self._changes.seq
        cache = self.cache
        return [
            DefinitionChange(seq, kind, key, value)
            for kind in KINDS
            for key, value in cache[kind].items()
        ]
