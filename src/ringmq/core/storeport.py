"""The core's view of a store: the `StorePort` calls, the recovered-state shapes, store keys.

Theory of operation
-------------------
core/ imports nothing from storage/ (the layer contract in pyproject.toml). This module names,
as `Protocol`s, exactly the store calls and recovered-state fields the core uses; storage's
`Store`, `RecoveredState`, `RecoveredQueue`, `RecoveredMessage` and `RecoveredTail` fit them
structurally. It also fixes the store's key scheme, which both sides must agree on:

* a queue is ``"<vhost>\x1f<name>"`` (`queue_key`); definition keys use the same separator;
* a delayed exchange's held messages are ``"\x1fx-delayed\x1f<vhost>\x1f<name>"``
  (`delayed_key`), so they can never collide with a queue's key;
* definition kinds are the strings `VHOST` ... `BINDING` (`KINDS`, in recovery order).

No state.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final, Protocol, runtime_checkable

from ringmq.core.message import Message, SeqId
from ringmq.core.queue import SpillStore

SEP: Final = "\x1f"

VHOST: Final = "vhost"
USER: Final = "user"
PERMISSION: Final = "permission"
TOPIC_PERMISSION: Final = "topic_permission"
POLICY: Final = "policy"
EXCHANGE_DEF: Final = "exchange"
QUEUE_DEF: Final = "queue"
BINDING: Final = "binding"
PARAMETER: Final = "parameter"
GLOBAL_PARAMETER: Final = "global_parameter"
KINDS: Final = (
    VHOST,
    USER,
    PERMISSION,
    TOPIC_PERMISSION,
    POLICY,
    PARAMETER,
    GLOBAL_PARAMETER,
    EXCHANGE_DEF,
    QUEUE_DEF,
    BINDING,
)
"""Every definition kind, in the order recovery restores them."""


class RecoveredMessagePort(Protocol):
    """One recovered message (storage's `RecoveredMessage`)."""

    seq: SeqId
    message: Message
    redelivered: bool
    delivery_count: int
    expiry_ms: int | None
    due_ms: int | None


class RecoveredTailPort(Protocol):
    """The part of a recovered backlog left on disk (storage's `RecoveredTail`)."""

    @property
    def spill(self) -> SpillStore: ...  # read-only: storage's concrete spill store fits

    count: int
    nbytes: int
    redelivered: bool
    delivery_counts: dict[SeqId, int]
    expiring: bool
    below: SeqId


@runtime_checkable
class LazyRecoveredPort(Protocol):
    """A recovered queue read from disk on demand (storage's `RecoveredQueue`)."""

    seqs: list[int]

    def __len__(self) -> int: ...

    def split(
        self, max_count: int, max_bytes: int
    ) -> tuple[list[Any], RecoveredTailPort | None]: ...


class RecoveredPort(Protocol):
    """What `recover()` returns (storage's `RecoveredState`)."""

    clean: bool
    definitions: dict[str, dict[str, Any]]
    queues: dict[str, list[Any]]
    next_seq: dict[str, int]


class DefinitionStorePort(Protocol):
    """The store's definitions log: what definition sync and the stream books write."""

    def put_definition(self, kind: str, key: str, value: Mapping[str, Any]) -> int: ...

    def delete_definition(self, kind: str, key: str) -> int: ...


class StorePort(DefinitionStorePort, Protocol):
    """The store calls the broker makes (a subset of storage's `Store`)."""

    def enqueue(
        self,
        queue: str,
        seq: SeqId,
        message: Message,
        *,
        expiry_ms: int | None = None,
        due_ms: int | None = None,
        delivery_count: int = 0,
    ) -> int: ...

    def ack(self, queue: str, seqs: Iterable[SeqId]) -> int: ...

    def delivered(
        self, queue: str, seq: SeqId, delivery_count: int, *, due_ms: int | None = None
    ) -> int: ...

    def drop_queue(self, queue: str) -> int: ...

    def dedup_record(self, scope: str, message_id: str, at_ms: int) -> int: ...

    def dedup_discard(self, scope: str, message_id: str) -> int: ...

    def dedup_due(self) -> bool: ...

    def dedup_rewrite(self, window: Mapping[str, Iterable[tuple[str, int]]]) -> None: ...

    def tx_begin(self) -> None: ...

    def tx_commit(self) -> int: ...

    def sync(self) -> int: ...

    def recover(self) -> Any: ...

    def close(self) -> None: ...


def queue_key(vhost: str, name: str) -> str:
    """The store's name for queue `name` of `vhost`."""
    return f"{vhost}{SEP}{name}"


DELAYED_PREFIX: Final = f"{SEP}x-delayed{SEP}"


def delayed_key(vhost: str, name: str) -> str:
    """The store's name for the messages held by delayed exchange `name` of `vhost`."""
    return f"{DELAYED_PREFIX}{vhost}{SEP}{name}"
