"""What management needs from the server: the `Runtime` port and its records.

Theory of operation: the server (`server.runtime`) implements `Runtime`: its live connections
and listeners, and the batch in which a management call runs (so the writes and effects it
causes are flushed as one, like a client read's). Management calls the broker only through its
facade (`admin.CoreAdmin`) and the server only through this port, so the HTTP layer and the
tests (`tests/management/conftest.FakeRuntime`) depend on these names alone.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Protocol, TypeVar

from ringmq.core.effects import Effect
from ringmq.status import ConnectionInfo, ListenerInfo

__all__ = ["ConnectionInfo", "ListenerInfo", "Runtime"]

_T = TypeVar("_T")


class Runtime(Protocol):
    """What the server tells management about live connections and itself."""

    node: str
    started_at_ms: int

    def connections(self) -> list[ConnectionInfo]: ...
    def close_connection(self, name: str, reason: str) -> bool:
        """Close the named connection with 320 CONNECTION_FORCED; False if unknown."""
        ...

    def listeners(self) -> list[ListenerInfo]: ...
    def run_batch(self, fn: Callable[[], _T]) -> _T:
        """Run a core call made outside a client read; flush the writes it caused."""
        ...

    def apply_effects(self, effects: Iterable[Effect]) -> None:
        """Apply effects the core returned to a management call (deliveries, closes...)."""
        ...
