"""What management needs from the server: the `Runtime` port and its records.

Theory of operation: the server (`server.runtime`) implements `Runtime`: its live connections
and listeners, and the batch in which a management call runs (so the writes and effects it
causes are flushed as one, like a client read's). Management calls the broker only through its
facade (`admin.CoreAdmin`) and the server only through this port, so the HTTP layer and the
tests (`tests/management/conftest.FakeRuntime`) depend on these names alone.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from ringmq.core.effects import Effect

_T = TypeVar("_T")


@dataclass(slots=True)
class ConnectionInfo:
    """A live client connection, as the server sees it."""

    conn_id: int
    name: str
    """RabbitMQ style: "127.0.0.1:53210 -> 127.0.0.1:5672"."""
    user: str
    vhost: str
    peer_host: str
    peer_port: int
    host: str
    port: int
    connected_at_ms: int
    state: str = "running"
    """running, blocking (alarm raised, not yet published), blocked, closing."""
    blocked_reason: str | None = None
    channels: int = 0
    client_properties: dict[str, Any] = field(default_factory=dict)
    recv_oct: int = 0
    send_oct: int = 0
    heartbeat_s: int = 0
    frame_max: int = 0
    channel_max: int = 0
    auth_mechanism: str = "PLAIN"


@dataclass(slots=True)
class ListenerInfo:
    protocol: str
    ip_address: str
    port: int


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
