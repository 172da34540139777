"""What a running node reports about its client connections and listening sockets.

One record of each, shared by the server, which fills them (`BrokerServer.connections`,
`listeners`), and the management API, which shows them (its `Runtime` port): neither layer
imports the other, and the composition root passes the server's lists through unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


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
    protocol: str = "AMQP 0-9-1"
    """As RabbitMQ names it: "AMQP 0-9-1", "AMQP 1.0", "STOMP 1.2", "MQTT 3.1.1"..."""
    ssl: bool = False


@dataclass(slots=True)
class ListenerInfo:
    """A listening socket: its protocol (RabbitMQ's names: amqp, amqp/ssl, stomp, mqtt, http)
    and address."""

    protocol: str
    ip_address: str
    port: int
