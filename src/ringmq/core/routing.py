"""Binding tables: how each exchange type maps (routing key, headers) to destinations.

Theory of operation: each exchange owns one table matching its type. A destination is a
`Dest` tuple `(kind, name)` with kind "q" (queue) or "x" (exchange, for e2e bindings). Tables
count bindings per destination so a destination bound twice (different keys or arguments) is
routed once and survives the removal of one of its bindings. `route` returns destinations in a
deterministic order (binding order) so fan-out order is reproducible.

* direct: `dict[key, dict[Dest, count]]`, O(1) per publish.
* fanout: one `dict[Dest, count]`.
* topic: a trie over dot-separated words with `*` (exactly one word) and `#` (zero or more),
  matched by a walk that never revisits a (node, position) pair, so it is linear in
  nodes * words in the worst case; the broker caches results per routing key anyway.
* headers: a list of compiled bindings checked in order (x-match all/any, -with-x variants).

Pure: no I/O, no clock, imports nothing from the broker.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Final

Dest = tuple[str, str]
"""("q", queue_name) or ("x", exchange_name)."""

QUEUE: Final = "q"
EXCHANGE: Final = "x"


class ExchangeType(Enum):
    """Exchange types by their wire names."""

    DIRECT = "direct"
    FANOUT = "fanout"
    TOPIC = "topic"
    HEADERS = "headers"
    DELAYED = "x-delayed-message"


class ExchangeTypeError(ValueError):
    """An exchange declaration names a type the broker does not have."""


class DelayedTypeError(ValueError):
    """An `x-delayed-message` exchange without a valid `x-delayed-type` to route with."""


EXCHANGE_TYPE_NAMES: Final = tuple(t.value for t in ExchangeType)
"""Every exchange type the broker routes, by wire name (management lists these)."""


def parse_exchange_type(
    type_: str, arguments: Mapping[str, Any] | None
) -> tuple[ExchangeType, ExchangeType | None]:
    """The one check of a declared exchange type: `(kind, routing type of a delayed one)`.

    Raises:
        ExchangeTypeError: `type_` is not a known exchange type (AMQP 503 COMMAND_INVALID).
        DelayedTypeError: `x-delayed-message` without an `x-delayed-type` naming a routing
            type (direct, fanout, topic, headers) (AMQP 406 PRECONDITION_FAILED).
    """
    try:
        kind = ExchangeType(type_)
    except ValueError:
        raise ExchangeTypeError(f"unknown exchange type '{type_}'") from None
    if kind is not ExchangeType.DELAYED:
        return kind, None
    raw = (arguments or {}).get("x-delayed-type")
    if isinstance(raw, bytes):
        raw = raw.decode("utf-8", "replace")
    routing = next((t for t in ExchangeType if t.value == raw), None)
    if routing is None or routing is ExchangeType.DELAYED:
        raise DelayedTypeError(
            "Invalid argument, 'x-delayed-type' must be an existing exchange type"
        )
    return kind, routing


def _args_key(args: Mapping[str, Any] | None) -> tuple[tuple[str, str], ...]:
    """A hashable, order-free identity for binding arguments (values by repr)."""
    if not args:
        return ()
    return tuple(sorted((k, repr(v)) for k, v in args.items()))


BindingKey = tuple[Dest, str, tuple[tuple[str, str], ...]]
"""Identity of one binding: destination, routing key, canonical arguments."""


def binding_key(dest: Dest, routing_key: str, args: Mapping[str, Any] | None) -> BindingKey:
    """The identity under which a binding is stored (same dest+key+args = same binding)."""
    return (dest, routing_key, _args_key(args))


class Table:
    """Interface of a binding table (the concrete ones below)."""

    def add(self, dest: Dest, routing_key: str, args: Mapping[str, Any]) -> None:
        raise NotImplementedError

    def remove(self, dest: Dest, routing_key: str, args: Mapping[str, Any]) -> None:
        raise NotImplementedError

    def route(self, routing_key: str, headers: Mapping[str, Any] | None) -> list[Dest]:
        raise NotImplementedError

    @property
    def uses_headers(self) -> bool:
        """True when routing depends on message headers (results cannot be cached by key)."""
        return False


def _inc(counts: dict[Dest, int], dest: Dest) -> None:
    counts[dest] = counts.get(dest, 0) + 1


def _dec(counts: dict[Dest, int], dest: Dest) -> None:
    n = counts.get(dest, 0) - 1
    if n <= 0:
        counts.pop(dest, None)
    else:
        counts[dest] = n


class DirectTable(Table):
    """Exact routing-key match."""

    def __init__(self) -> None:
        self._by_key: dict[str, dict[Dest, int]] = {}

    def add(self, dest: Dest, routing_key: str, args: Mapping[str, Any]) -> None:
        _inc(self._by_key.setdefault(routing_key, {}), dest)

    def remove(self, dest: Dest, routing_key: str, args: Mapping[str, Any]) -> None:
        counts = self._by_key.get(routing_key)
        if counts is not None:
            _dec(counts, dest)
            if not counts:
                del self._by_key[routing_key]

    def route(self, routing_key: str, headers: Mapping[str, Any] | None) -> list[Dest]:
        counts = self._by_key.get(routing_key)
        return list(counts) if counts else []


class FanoutTable(Table):
    """Every bound destination, once."""

    def __init__(self) -> None:
        self._dests: dict[Dest, int] = {}

    def add(self, dest: Dest, routing_key: str, args: Mapping[str, Any]) -> None:
        _inc(self._dests, dest)

    def remove(self, dest: Dest, routing_key: str, args: Mapping[str, Any]) -> None:
        _dec(self._dests, dest)

    def route(self, routing_key: str, headers: Mapping[str, Any] | None) -> list[Dest]:
        return list(self._dests)


@dataclass(slots=True)
class _TrieNode:
    children: dict[str, _TrieNode] = field(default_factory=dict)
    dests: dict[Dest, int] = field(default_factory=dict)


class TopicTable(Table):
    """AMQP topic matching: words split on '.', `*` matches one word, `#` zero or more."""

    def __init__(self) -> None:
        self._root = _TrieNode()

    def add(self, dest: Dest, routing_key: str, args: Mapping[str, Any]) -> None:
        node = self._root
        for word in routing_key.split("."):
            node = node.children.setdefault(word, _TrieNode())
        _inc(node.dests, dest)

    def remove(self, dest: Dest, routing_key: str, args: Mapping[str, Any]) -> None:
        path: list[tuple[_TrieNode, str]] = []
        node = self._root
        for word in routing_key.split("."):
            child = node.children.get(word)
            if child is None:
                return
            path.append((node, word))
            node = child
        _dec(node.dests, dest)
        # prune empty branches bottom-up so the trie does not grow with churn
        for parent, word in reversed(path):
            child = parent.children[word]
            if child.dests or child.children:
                break
            del parent.children[word]

    def route(self, routing_key: str, headers: Mapping[str, Any] | None) -> list[Dest]:
        words = routing_key.split(".")
        n = len(words)
        found: dict[Dest, None] = {}
        seen: set[tuple[int, int]] = set()
        stack: list[tuple[_TrieNode, int]] = [(self._root, 0)]
        while stack:
            node, i = stack.pop()
            key = (id(node), i)
            if key in seen:
                continue
            seen.add(key)
            if i == n and node.dests:
                for dest in node.dests:
                    found[dest] = None
            hash_child = node.children.get("#")
            if hash_child is not None:
                # '#' consumes zero or more words: try every split point
                stack.extend((hash_child, j) for j in range(i, n + 1))
            if i < n:
                exact = node.children.get(words[i])
                if exact is not None:
                    stack.append((exact, i + 1))
                star = node.children.get("*")
                if star is not None:
                    stack.append((star, i + 1))
        return list(found)


class _XMatch(Enum):
    ALL = "all"
    ANY = "any"
    ALL_WITH_X = "all-with-x"
    ANY_WITH_X = "any-with-x"


@dataclass(slots=True)
class _HeadersBinding:
    dest: Dest
    key: tuple[tuple[str, str], ...]
    match_all: bool
    pairs: list[tuple[str, Any]]


def parse_x_match(args: Mapping[str, Any]) -> tuple[bool, bool]:
    """(match_all, include_x_keys) from binding arguments; ValueError on a bad x-match."""
    raw = args.get("x-match", "all")
    if isinstance(raw, bytes):
        raw = raw.decode("utf-8", "replace")
    try:
        mode = _XMatch(raw)
    except ValueError:
        raise ValueError(
            f"Invalid x-match field value {raw!r}; expected all, any, all-with-x, or any-with-x"
        ) from None
    return mode in (_XMatch.ALL, _XMatch.ALL_WITH_X), mode in (
        _XMatch.ALL_WITH_X,
        _XMatch.ANY_WITH_X,
    )


class HeadersTable(Table):
    """Match on message headers per RabbitMQ's headers exchange.

    A binding argument whose value is void (None) matches on presence only. Keys starting with
    "x-" are ignored unless x-match ends in "-with-x". With no comparable keys, "all" matches
    every message and "any" none (RabbitMQ's behaviour).
    """

    def __init__(self) -> None:
        self._bindings: list[_HeadersBinding] = []

    @property
    def uses_headers(self) -> bool:
        return True

    def add(self, dest: Dest, routing_key: str, args: Mapping[str, Any]) -> None:
        match_all, with_x = parse_x_match(args)
        pairs = [
            (k, v) for k, v in args.items() if k != "x-match" and (with_x or not k.startswith("x-"))
        ]
        self._bindings.append(_HeadersBinding(dest, _args_key(args), match_all, pairs))

    def remove(self, dest: Dest, routing_key: str, args: Mapping[str, Any]) -> None:
        key = _args_key(args)
        for i, b in enumerate(self._bindings):
            if b.dest == dest and b.key == key:
                del self._bindings[i]
                return

    def route(self, routing_key: str, headers: Mapping[str, Any] | None) -> list[Dest]:
        hdrs: Mapping[str, Any] = headers or {}
        found: dict[Dest, None] = {}
        for b in self._bindings:
            if b.dest in found:
                continue
            if _headers_match(b, hdrs):
                found[b.dest] = None
        return list(found)


_MISSING: Final = object()


def _headers_match(b: _HeadersBinding, headers: Mapping[str, Any]) -> bool:
    if b.match_all:
        for k, want in b.pairs:
            got = headers.get(k, _MISSING)
            if got is _MISSING or (want is not None and got != want):
                return False
        return True
    for k, want in b.pairs:
        got = headers.get(k, _MISSING)
        if got is not _MISSING and (want is None or got == want):
            return True
    return False


def new_table(kind: ExchangeType) -> Table:
    """A fresh binding table for an exchange type (delayed uses its x-delayed-type's table)."""
    match kind:
        case ExchangeType.DIRECT:
            return DirectTable()
        case ExchangeType.FANOUT:
            return FanoutTable()
        case ExchangeType.TOPIC:
            return TopicTable()
        case ExchangeType.HEADERS:
            return HeadersTable()
        case ExchangeType.DELAYED:
            raise ValueError("a delayed exchange routes with its x-delayed-type's table")
