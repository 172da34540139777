"""ringmq.protocol: the sans-IO AMQP 0-9-1 server connection (handshake, channels, commands).

``ServerConnection.receive_data(bytes) -> list[Event]``; output via ``data_to_send()``.
"""

from __future__ import annotations

from ringmq.protocol.channel import ChannelState
from ringmq.protocol.connection import ConnectionState, ServerConnection
from ringmq.protocol.events import (
    ChannelClosed,
    ChannelOpened,
    Command,
    ConnectionClosed,
    Event,
    LoginRequested,
    OpenRequested,
    ProtocolError,
    SecretUpdated,
)
from ringmq.protocol.handshake import TuneParams

__all__ = [
    "ChannelClosed",
    "ChannelOpened",
    "ChannelState",
    "Command",
    "ConnectionClosed",
    "ConnectionState",
    "Event",
    "LoginRequested",
    "OpenRequested",
    "ProtocolError",
    "SecretUpdated",
    "ServerConnection",
    "TuneParams",
]
