"""The connection's states and the tables that move them (rules as tables, h11/h2 style).

Theory of operation
-------------------
``ConnectionState`` is the one state of an AMQP 0-9-1 server connection; ``TRANSITIONS`` maps
``(state, channel-0 method type)`` to the next state and is read by one function,
``ConnectionMethods.process0`` (``protocol.opening``). ``CLIENT_METHODS`` is every method a
client may send; any other method from a client is COMMAND_INVALID (503). ``PAUSED`` and
``TUNED`` group states for the receive loop and the heartbeat checks. Data only: this module
owns no mutable state and imports only ``ringmq.amqp``.
"""

from __future__ import annotations

from enum import Enum
from typing import Final

from ringmq.amqp import spec
from ringmq.amqp.spec import Method


class ConnectionState(Enum):
    #: waiting for the 8-byte protocol header.
    AWAIT_HEADER = "await_header"
    #: Connection.Start sent, waiting for Start-Ok.
    START_SENT = "start_sent"
    #: LoginRequested emitted; waiting for accept_login()/reject_login().
    AUTHENTICATING = "authenticating"
    #: Connection.Tune sent, waiting for Tune-Ok.
    TUNE_SENT = "tune_sent"
    #: tuned, waiting for Connection.Open.
    AWAIT_OPEN = "await_open"
    #: OpenRequested emitted; waiting for accept_open() or close().
    OPENING = "opening"
    #: open: channels and commands flow.
    OPEN = "open"
    #: we sent Connection.Close; waiting for Close-Ok.
    CLOSING = "closing"
    #: finished; write data_to_send() and close the transport.
    CLOSED = "closed"


S = ConnectionState

TRANSITIONS: Final[dict[tuple[ConnectionState, type[Method]], ConnectionState]] = {
    (S.START_SENT, spec.ConnectionStartOk): S.AUTHENTICATING,
    (S.TUNE_SENT, spec.ConnectionTuneOk): S.AWAIT_OPEN,
    (S.AWAIT_OPEN, spec.ConnectionOpen): S.OPENING,
    (S.OPEN, spec.ConnectionUpdateSecret): S.OPEN,
    (S.START_SENT, spec.ConnectionClose): S.CLOSED,
    (S.TUNE_SENT, spec.ConnectionClose): S.CLOSED,
    (S.AWAIT_OPEN, spec.ConnectionClose): S.CLOSED,
    (S.OPEN, spec.ConnectionClose): S.CLOSED,
    (S.CLOSING, spec.ConnectionClose): S.CLOSED,
    (S.CLOSING, spec.ConnectionCloseOk): S.CLOSED,
}
"""Channel-0 methods accepted in each connection state, and the state they lead to."""

# States in which receive_data stops and leaves bytes buffered. (Tuples, not frozensets:
# membership is then an identity test, while hashing an Enum member runs Python code.)
PAUSED: Final = (S.AUTHENTICATING, S.OPENING, S.CLOSED)

# States in which heartbeats have been negotiated and run.
TUNED: Final = (S.AWAIT_OPEN, S.OPENING, S.OPEN, S.CLOSING)

CLIENT_METHODS: Final[frozenset[type[Method]]] = frozenset(
    {
        spec.ConnectionStartOk,
        spec.ConnectionSecureOk,
        spec.ConnectionTuneOk,
        spec.ConnectionOpen,
        spec.ConnectionClose,
        spec.ConnectionCloseOk,
        spec.ConnectionUpdateSecret,
        spec.ChannelOpen,
        spec.ChannelFlow,
        spec.ChannelFlowOk,
        spec.ChannelClose,
        spec.ChannelCloseOk,
        spec.ExchangeDeclare,
        spec.ExchangeDelete,
        spec.ExchangeBind,
        spec.ExchangeUnbind,
        spec.QueueDeclare,
        spec.QueueBind,
        spec.QueuePurge,
        spec.QueueDelete,
        spec.QueueUnbind,
        spec.BasicQos,
        spec.BasicConsume,
        spec.BasicCancel,
        spec.BasicPublish,
        spec.BasicGet,
        spec.BasicAck,
        spec.BasicReject,
        spec.BasicRecoverAsync,
        spec.BasicRecover,
        spec.BasicNack,
        spec.ConfirmSelect,
        spec.TxSelect,
        spec.TxCommit,
        spec.TxRollback,
    }
)
"""Methods a client may send; any other method from the client is COMMAND_INVALID."""

CONNECTION_CLASS: Final = 10
CHANNEL_CLASS: Final = 20

__all__ = [
    "CHANNEL_CLASS",
    "CLIENT_METHODS",
    "CONNECTION_CLASS",
    "PAUSED",
    "TRANSITIONS",
    "TUNED",
    "ConnectionState",
]
