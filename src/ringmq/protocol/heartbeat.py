"""Heartbeats: when to send one, and when the peer counts as gone.

Theory of operation
-------------------
``Heartbeats`` is the part of ``ServerConnection`` (``protocol.connection``) that owns the
liveness stamps: when bytes last arrived (``_last_recv_ms``) and when output was last taken
(``_last_sent_ms``). The machine reads no clock: ``receive_data`` and ``data_to_send`` record
the caller's ``now_ms`` when they have it, or mark the stamp "unseen", in which case the next
check takes its own ``now_ms`` as the stamp (the bytes moved at some point since the last
check). Those two writes are the only ones from outside this module.

RabbitMQ's cadence: a heartbeat is due when nothing was sent for half the negotiated interval,
and the peer is gone when nothing arrived for two intervals. Heartbeats run only once tuned
(``TUNED``); before Tune-Ok the server's handshake timeout applies. What it reads from the other
parts (declared below): the connection state, the tuned values and the output buffer.

This module imports only ``ringmq.amqp`` and its siblings in ``ringmq.protocol``.
"""

from __future__ import annotations

from ringmq.amqp.frames import HEARTBEAT_FRAME
from ringmq.protocol.handshake import TuneParams
from ringmq.protocol.states import TUNED, ConnectionState


class Heartbeats:
    """Heartbeat checks of ``ServerConnection`` (see the module docstring)."""

    # Owned here (set by init_heartbeats).
    _last_recv_ms: int | None
    _last_sent_ms: int | None
    _recv_unseen: bool
    _sent_unseen: bool
    # Owned by the other parts of ServerConnection, read here.
    _state: ConnectionState
    tuned: TuneParams
    _out: list[bytes]

    def init_heartbeats(self) -> None:
        self._last_recv_ms = None
        self._last_sent_ms = None
        self._recv_unseen = False
        self._sent_unseen = False

    def heartbeat_due(self, now_ms: int) -> bool:
        """True when nothing was sent for half the heartbeat interval (RabbitMQ's cadence).

        Call ``send_heartbeat()`` when it is. Output taken by ``data_to_send()`` counts.
        """
        if self._sent_unseen or self._last_sent_ms is None:
            self._sent_unseen = False
            self._last_sent_ms = now_ms
            return False
        hb = self.tuned.heartbeat_s
        if hb == 0 or self._state not in TUNED:
            return False
        return now_ms - self._last_sent_ms >= hb * 500

    def send_heartbeat(self) -> None:
        """Queue a heartbeat frame."""
        if self._state is not ConnectionState.CLOSED:
            self._out.append(HEARTBEAT_FRAME)

    def peer_timed_out(self, now_ms: int) -> bool:
        """True when no byte arrived for two heartbeat intervals (the peer is gone)."""
        if self._recv_unseen or self._last_recv_ms is None:
            self._recv_unseen = False
            self._last_recv_ms = now_ms
            return False
        hb = self.tuned.heartbeat_s
        if hb == 0 or self._state not in TUNED:
            return False  # before Tune-Ok the server's handshake timeout applies
        return now_ms - self._last_recv_ms > 2 * hb * 1000


__all__ = ["Heartbeats"]
