"""Publish de-duplication by `message_id`: the window of each queue or exchange scope.

Theory of operation
-------------------
*De-duplication* (`Deduplicator`) remembers published `message_id`s per scope (a queue or an
exchange) for a time window and a bounded count; the broker asks `seen()` before routing and calls
`record()` once the message was accepted, so a publisher's retry after a nack is not dropped.
`PublishDedup` is the broker's publish-path hook over it for `x-message-deduplication-window-ms`
(see its docstring), including the journal hooks that make the window of durable scopes
survive a restart (`storage.dedup`). Pure and synchronous; time is `now_ms`.

Beside it, Artemis' duplicate detection (`PublishDedup.admit_address`): a message carrying
`_AMQ_DUPL_ID` (a 0-9-1 or STOMP header, an AMQP 1.0 application property, an MQTT 5 user
property: all the message's neutral headers) is dropped when its address accepted that id
among its last `id-cache-size` ids (Artemis' circular cache: by count, not by time). An
address is what Artemis would call it in ringmq's model: the exchange for a named exchange
(a multicast address), the routing key for the default exchange (an anycast address). With
`persist-id-cache` the accepted ids are journaled as the message-id window's are, under
`address` scope keys, so a restart keeps them; without it they start empty.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Final, Generic, Protocol, TypeVar, cast

DEFAULT_DEDUP_WINDOW_MS: Final = 10 * 60_000
DEFAULT_DEDUP_MAX_IDS: Final = 1_000_000

KeyT = TypeVar("KeyT", bound=Hashable)


class Deduplicator(Generic[KeyT]):
    """Remembers `message_id`s per scope for `window_ms`, at most `max_ids` per scope.

    A scope is whatever the broker keys it by, e.g. `("queue", vhost, name)`. Oldest ids are
    forgotten first (by time, then by count), so the guarantee is: a message id published again
    within the window and within the last `max_ids` ids of its scope is reported as seen.
    """

    def __init__(
        self, window_ms: int = DEFAULT_DEDUP_WINDOW_MS, max_ids: int = DEFAULT_DEDUP_MAX_IDS
    ) -> None:
        if window_ms <= 0 or max_ids <= 0:
            raise ValueError("window_ms and max_ids must be > 0")
        self.window_ms = window_ms
        self.max_ids = max_ids
        self.duplicates = 0
        self._seen: dict[KeyT, OrderedDict[str, int]] = {}
        self._windows: dict[KeyT, int] = {}
        self._trimmed: dict[KeyT, int] = {}  # now_ms of the last time-based trim per scope

    def seen(self, scope: KeyT, message_id: str, now_ms: int) -> bool:
        """True if `message_id` was recorded in `scope` within the window (counts duplicates)."""
        ids = self._seen.get(scope)
        if ids is None:
            return False
        self._trim(scope, ids, now_ms)
        if message_id in ids:
            self.duplicates += 1
            return True
        return False

    def record(
        self, scope: KeyT, message_id: str, now_ms: int, *, window_ms: int | None = None
    ) -> None:
        """Remember that `message_id` was accepted in `scope` at `now_ms`.

        `window_ms` sets this scope's own window (default: the deduplicator's).
        """
        ids = self._seen.setdefault(scope, OrderedDict())
        if window_ms is not None:
            self._windows[scope] = window_ms
        ids[message_id] = now_ms
        ids.move_to_end(message_id)
        self._trim(scope, ids, now_ms)

    def check_and_record(self, scope: KeyT, message_id: str, now_ms: int, window_ms: int) -> bool:
        """`seen` then, for a new id, `record` with `window_ms`, in one step (the publish path).
        True when `message_id` is a duplicate (counted); `admit_many` of one id."""
        return not self.admit_many(scope, (message_id,), now_ms, window_ms)[0]

    def admit_many(
        self, scope: KeyT, message_ids: Sequence[str | None], now_ms: int, window_ms: int
    ) -> list[bool]:
        """`check_and_record` of many ids in order: whether each is new (recorded now; an id
        of None always is, and is not recorded) or a duplicate (False, counted).

        Expired ids are trimmed once per scope and `now_ms` (the broker handles a whole read
        batch at one `now_ms`, so nothing more can have expired within it); the count bound is
        kept at every insert.
        """
        ids = self._seen.get(scope)
        if ids is None:
            ids = self._seen[scope] = OrderedDict()
        new_window = self._windows.get(scope) != window_ms
        if new_window or self._trimmed.get(scope) != now_ms:
            self._trim(scope, ids, now_ms)  # the scope's current window, as `seen` does
            self._trimmed[scope] = now_ms
        out: list[bool] = []
        append = out.append
        bound = self.max_ids
        dups = 0
        for mid in message_ids:
            if mid is None:
                append(True)
            elif mid in ids:
                dups += 1
                append(False)
            else:
                ids[mid] = now_ms
                if new_window:  # the new window from the first id recorded, as `record` does
                    self._windows[scope] = window_ms
                    self._trim(scope, ids, now_ms)
                    new_window = False
                elif len(ids) > bound:
                    ids.popitem(last=False)
                append(True)
        self.duplicates += dups
        return out

    def scopes(self) -> Iterator[tuple[KeyT, OrderedDict[str, int]]]:
        """Every scope with the ids it remembers (oldest first); read-only."""
        return iter(self._seen.items())

    def restore(
        self, scope: KeyT, ids: Iterable[tuple[str, int]], now_ms: int, window_ms: int
    ) -> int:
        """Remember `ids` (message_id, accepted at; oldest first) in `scope` with its window,
        trimmed as at `now_ms` (recovery). Returns how many are kept."""
        seen = self._seen.setdefault(scope, OrderedDict())
        self._windows[scope] = window_ms
        for mid, at in ids:
            seen[mid] = at
            seen.move_to_end(mid)
        self._trim(scope, seen, now_ms)
        return len(seen)

    def discard(self, scope: KeyT, message_id: str) -> None:
        """Forget one id (its publish was refused after all, so a retry must get through)."""
        ids = self._seen.get(scope)
        if ids is not None:
            ids.pop(message_id, None)

    def size(self, scope: KeyT) -> int:
        """Ids currently remembered in `scope`."""
        ids = self._seen.get(scope)
        return 0 if ids is None else len(ids)

    def forget(self, scope: KeyT) -> None:
        """Drop a scope (its queue or exchange was deleted)."""
        self._seen.pop(scope, None)
        self._windows.pop(scope, None)
        self._trimmed.pop(scope, None)

    def _trim(self, scope: KeyT, ids: OrderedDict[str, int], now_ms: int) -> None:
        horizon = now_ms - self._windows.get(scope, self.window_ms)
        while ids:
            oldest_id, at = next(iter(ids.items()))
            if at > horizon and len(ids) <= self.max_ids:
                break
            del ids[oldest_id]


DUPL_ID_HEADER: Final = "_AMQ_DUPL_ID"
"""Artemis' duplicate-id property (`Message.HDR_DUPLICATE_DETECTION_ID`)."""
DEFAULT_ID_CACHE_SIZE: Final = 20_000
"""Artemis' default `id-cache-size`."""
_FOREVER_MS: Final = 1 << 62  # Artemis' cache forgets by count only


def dupl_id(value: object) -> str | None:
    """The cache key of a `_AMQ_DUPL_ID` value (a string, or bytes as Artemis' core clients
    send it; bytes that are not UTF-8 are keyed by their hex form); None when unusable."""
    if isinstance(value, str):
        return value or None
    if isinstance(value, bytes | bytearray):
        try:
            return bytes(value).decode() or None
        except UnicodeDecodeError:
            return "\x00hex:" + bytes(value).hex()
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return None


DEDUP_WINDOW_ARG: Final = "x-message-deduplication-window-ms"
"""Queue or exchange argument turning on de-duplication by `message_id` for that scope."""

_Scope = tuple[str, str, str]
_SEP: Final = "\x1f"
QueueT = TypeVar("QueueT")


class _Declared(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def arguments(self) -> dict[str, Any]: ...


def _window(arguments: dict[str, Any]) -> int | None:
    w = arguments.get(DEDUP_WINDOW_ARG)
    if isinstance(w, int) and not isinstance(w, bool) and w > 0:
        return w
    return None


class PublishDedup:
    """The broker's publish-path hook for `x-message-deduplication-window-ms`.

    An exchange declared with the argument drops a publish whose `message_id` it accepted within
    the window (before routing: nothing is enqueued anywhere); a queue declared with it skips
    just that queue. Duplicates are confirmed to the publisher like accepted messages (the
    publisher's intent is already satisfied), never returned as unroutable.

    Durable scopes (a durable queue or exchange) tell `journal` about every id they accept and
    `unjournal` about every id they forget on a refusal (the broker's `Durability`, which
    writes them to the store's dedup log before the message itself); `restore` rebuilds the
    window from the store at recovery and `live` gives it back for a compaction of that log.
    Store scope keys are `"<queue|exchange>\x1f<vhost>\x1f<name>"`.
    """

    def __init__(
        self,
        max_ids: int = DEFAULT_DEDUP_MAX_IDS,
        *,
        id_cache_size: int = DEFAULT_ID_CACHE_SIZE,
        persist_id_cache: bool = True,
    ) -> None:
        self.ids: Deduplicator[_Scope] = Deduplicator(max_ids=max_ids)
        self.addresses: Deduplicator[_Scope] = Deduplicator(_FOREVER_MS, id_cache_size)
        """Artemis' duplicate-id caches, one per address (module docstring)."""
        self.persist_id_cache = persist_id_cache
        self.journal: Callable[[str, str, int], None] | None = None
        self.unjournal: Callable[[str, str], None] | None = None

    def admit_address(self, vhost: str, address: str, value: object, now_ms: int) -> bool:
        """Artemis duplicate detection: False when `value` (a `_AMQ_DUPL_ID`) is in the cache
        of `address` (drop the message, confirmed as accepted); else it is recorded (and
        journaled with `persist-id-cache`) and the message goes on."""
        key = dupl_id(value)
        if key is None:
            return True
        scope: _Scope = ("address", vhost, address)
        fresh = self.addresses.admit_many(scope, (key,), now_ms, _FOREVER_MS)[0]
        if fresh and self.persist_id_cache and self.journal is not None:
            self.journal(_SEP.join(scope), key, now_ms)
        return fresh

    def refused_address(self, vhost: str, address: str, value: object) -> None:
        """The publish carrying `value` was refused after all: a retry must get through."""
        key = dupl_id(value)
        if key is None:
            return
        scope: _Scope = ("address", vhost, address)
        self.addresses.discard(scope, key)
        if self.persist_id_cache and self.unjournal is not None:
            self.unjournal(_SEP.join(scope), key)

    def admit(
        self,
        vhost: str,
        exchange: _Declared,
        queues: Sequence[QueueT],
        message_id: str,
        now_ms: int,
    ) -> Sequence[QueueT]:
        """The queues that must get this message (empty: drop it as a duplicate)."""
        xw = _window(exchange.arguments) if exchange.arguments else None
        if xw is not None:
            scope: _Scope = ("exchange", vhost, exchange.name)
            if not self._accept(scope, self._key(scope, exchange), message_id, now_ms, xw):
                return ()
        out: list[QueueT] | None = None
        for i, q in enumerate(queues):
            args = cast("_Declared", q).arguments
            qw = _window(args) if args else None
            if qw is None:
                if out is not None:
                    out.append(q)
                continue
            scope = ("queue", vhost, cast("_Declared", q).name)
            if not self._accept(scope, self._key(scope, q), message_id, now_ms, qw):
                if out is None:
                    out = list(queues[:i])
                continue
            if out is not None:
                out.append(q)
        return queues if out is None else out

    def admit_run(
        self,
        vhost: str,
        exchange: _Declared,
        queue: _Declared,
        message_ids: Sequence[str | None],
        now_ms: int,
    ) -> list[bool]:
        """`admit` of many messages routed to `queue` alone, in order: whether each must be
        enqueued (False: a duplicate). The same windows and journal calls as `admit` per
        message (`_accept`), with the scopes worked out once for the run."""
        xw = _window(exchange.arguments) if exchange.arguments else None
        qw = _window(queue.arguments) if queue.arguments else None
        if xw is None and qw is None:
            return [True] * len(message_ids)
        xscope: _Scope = ("exchange", vhost, exchange.name)
        qscope: _Scope = ("queue", vhost, queue.name)
        if xw is not None and qw is not None:  # two windows: both per message, in turn
            accept = self._accept
            xkey = self._key(xscope, exchange)
            qkey = self._key(qscope, queue)
            return [
                mid is None
                or (accept(xscope, xkey, mid, now_ms, xw) and accept(qscope, qkey, mid, now_ms, qw))
                for mid in message_ids
            ]
        if xw is not None:
            return self._accept_many(xscope, self._key(xscope, exchange), message_ids, now_ms, xw)
        assert qw is not None
        return self._accept_many(qscope, self._key(qscope, queue), message_ids, now_ms, qw)

    def _key(self, scope: _Scope, declared: object) -> str | None:
        # the store key a durable scope journals its accepted ids under (None: not journaled)
        if self.journal is not None and getattr(declared, "durable", False):
            return _SEP.join(scope)
        return None

    def _accept(
        self, scope: _Scope, key: str | None, message_id: str, now_ms: int, window: int
    ) -> bool:
        # `_accept_many` of one id.
        return self._accept_many(scope, key, (message_id,), now_ms, window)[0]

    def _accept_many(
        self,
        scope: _Scope,
        key: str | None,
        message_ids: Sequence[str | None],
        now_ms: int,
        window: int,
    ) -> list[bool]:
        # The one de-duplication step: False for each id that is a duplicate in `scope`'s
        # window; the others are recorded there, and journaled under `key` (a durable
        # scope's), in order.
        fresh = self.ids.admit_many(scope, message_ids, now_ms, window)
        journal = self.journal
        if key is not None and journal is not None:
            for mid, new in zip(message_ids, fresh, strict=True):
                if new and mid is not None:
                    journal(key, mid, now_ms)
        return fresh

    def refused(self, vhost: str, exchange: _Declared, queue: _Declared, message_id: str) -> None:
        """A queue refused the publish (overflow): a retry with the same id must pass."""
        for scope, entity in (
            (("queue", vhost, queue.name), queue),
            (("exchange", vhost, exchange.name), exchange),
        ):
            if self.ids.size(scope) == 0:
                continue
            self.ids.discard(scope, message_id)
            if self.unjournal is not None and getattr(entity, "durable", False):
                self.unjournal(_SEP.join(scope), message_id)

    def live(self) -> dict[str, list[tuple[str, int]]]:
        """The remembered ids per store scope key, oldest first (for the store's compaction)."""
        live = {_SEP.join(scope): list(ids.items()) for scope, ids in self.ids.scopes()}
        if self.persist_id_cache:
            for scope, ids in self.addresses.scopes():
                live[_SEP.join(scope)] = list(ids.items())
        return live

    def restore(self, stored: Mapping[str, Mapping[str, int]], vhosts: Any, now_ms: int) -> int:
        """Rebuild the windows of durable scopes from the store (recovery); ids of scopes
        that no longer exist or lost their window argument are dropped, the rest trimmed to
        the scope's window as at `now_ms`. Returns how many ids are remembered."""
        n = 0
        for key, ids in stored.items():
            kind, _, rest = key.partition(_SEP)
            vhost, _, name = rest.partition(_SEP)
            if kind == "address":  # Artemis' cache: kept while persist-id-cache is on
                if self.persist_id_cache and vhost in vhosts:
                    n += self.addresses.restore(
                        (kind, vhost, name), ids.items(), now_ms, _FOREVER_MS
                    )
                continue
            vh = vhosts.get(vhost)
            table = None if vh is None else (vh.queues if kind == "queue" else vh.exchanges)
            entity = None if table is None else table.get(name)
            w = _window(entity.arguments) if entity is not None and entity.arguments else None
            if w is None:
                continue
            n += self.ids.restore((kind, vhost, name), ids.items(), now_ms, w)
        return n
