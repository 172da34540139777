"""Channel 0: the handshake, the tuned values and the connection's own close.

Theory of operation
-------------------
``ConnectionMethods`` is the part of ``ServerConnection`` (``protocol.connection``) that owns
the connection state (``_state``, a ``ConnectionState``) and what the handshake learns: the
offered and tuned values, the client's properties, mechanism, user name and vhost, and the
close code and text. Channel-0 methods move the state through one table, ``TRANSITIONS``
(``protocol.states``), read by ``_process0``; a method not in the table for the current state
is CHANNEL_ERROR (504, "unexpected method in connection state", as RabbitMQ)::

    AWAIT_HEADER --header--> START_SENT --Start-Ok--> AUTHENTICATING --accept_login()-->
    TUNE_SENT --Tune-Ok--> AWAIT_OPEN --Open--> OPENING --accept_open()--> OPEN
    any --Close--> CLOSED (Close-Ok sent);  close()/error --> CLOSING --Close-Ok--> CLOSED

Authentication and vhost access are delegated: Start-Ok yields ``LoginRequested`` (PLAIN or
AMQPLAIN already parsed) and Open yields ``OpenRequested``; the caller answers with
``accept_login()``/``reject_login()`` and ``accept_open()``/``close(...)``. While such a decision
is pending the receive loop leaves later bytes buffered; ``accept_login()`` and
``accept_open()`` run it (``_drain``, owned by ``ServerConnection``) and return its events.

What it reads from the other parts (declared below, owned elsewhere): the frame reader (whose
``frame_max`` Tune-Ok sets) and the channel table (cleared when the connection ends); it
writes frames through ``FrameWriter``. This module imports only ``ringmq.amqp`` and its
siblings in ``ringmq.protocol``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

from ringmq.amqp import spec
from ringmq.amqp.frames import PROTOCOL_HEADER, FrameReader, ProtocolHeader
from ringmq.amqp.reply_codes import AMQPError, ReplyCode
from ringmq.amqp.spec import Method
from ringmq.protocol.events import (
    ConnectionClosed,
    Event,
    LoginRequested,
    OpenRequested,
    SecretUpdated,
)
from ringmq.protocol.handshake import MECHANISMS, TuneParams, negotiate, parse_sasl
from ringmq.protocol.states import CLIENT_METHODS, TRANSITIONS, ConnectionState
from ringmq.protocol.writer import FrameWriter, reply_text

S = ConnectionState


class ConnectionMethods(FrameWriter):
    """Channel 0 of ``ServerConnection`` (see the module docstring)."""

    # Owned here (set by init_handshake).
    _state: ConnectionState
    offered: TuneParams
    tuned: TuneParams
    client_properties: dict[str, Any]
    mechanism: str
    username: str
    mechanisms: tuple[str, ...]
    vhost: str
    _server_properties: dict[str, Any]
    _close_code: int
    _close_text: str
    # Owned by ServerConnection, read here.
    _reader: FrameReader

    if TYPE_CHECKING:

        def _drain(self, events: list[Event]) -> None: ...

    def init_handshake(self, offered: TuneParams, server_properties: dict[str, Any]) -> None:
        self._state = S.AWAIT_HEADER
        self.offered = offered
        self.tuned = offered
        self.client_properties = {}
        self.mechanism = ""
        self.username = ""
        self.mechanisms = MECHANISMS
        """Offered in Start; the server adds EXTERNAL where a verified client certificate
        may name the user (before the protocol header arrives)."""
        self.vhost = ""
        self._server_properties = server_properties
        self._close_code = 0
        self._close_text = ""

    def _on_protocol_header(self, header: ProtocolHeader, events: list[Event]) -> None:
        if not header.valid:
            # AMQP §4.2.2: answer a bad header with ours, then close the socket.
            self._write(PROTOCOL_HEADER)
            self._state = S.CLOSED
            events.append(ConnectionClosed(0, "bad protocol header", by_peer=True))
            return
        self._send0(
            spec.ConnectionStart(
                version_major=0,
                version_minor=9,
                server_properties=self._server_properties,
                mechanisms=" ".join(self.mechanisms).encode(),
                locales=b"en_US",
            )
        )
        self._state = S.START_SENT

    # ----------------------------------------------------------------------- channel 0

    def _process0(self, method: Method, events: list[Event]) -> None:
        nxt = TRANSITIONS.get((self._state, type(method)))
        if nxt is None:
            if type(method) not in CLIENT_METHODS:
                raise AMQPError(
                    ReplyCode.COMMAND_INVALID,
                    f"{method.NAME} may not be sent by a client",
                    class_id=method.CLASS_ID,
                    method_id=method.METHOD_ID,
                )
            raise AMQPError(
                ReplyCode.CHANNEL_ERROR,
                f"unexpected method {method.NAME} in connection state {self._state.value}",
                class_id=method.CLASS_ID,
                method_id=method.METHOD_ID,
            )
        self._HANDLERS0[type(method)](self, method, events)
        if self._state is not S.CLOSED:
            self._state = nxt

    def _on_start_ok(self, method: Method, events: list[Event]) -> None:
        assert isinstance(method, spec.ConnectionStartOk)
        if method.mechanism not in self.mechanisms:
            raise AMQPError(
                ReplyCode.COMMAND_INVALID,
                f"unknown authentication mechanism {method.mechanism!r}",
                class_id=method.CLASS_ID,
                method_id=method.METHOD_ID,
            )
        creds = parse_sasl(method.mechanism, method.response)
        self.client_properties = method.client_properties
        self.mechanism = method.mechanism
        self.username = creds.username
        events.append(
            LoginRequested(
                mechanism=method.mechanism,
                response=method.response,
                username=creds.username,
                password=creds.password,
                client_properties=method.client_properties,
                locale=method.locale,
            )
        )

    def _on_tune_ok(self, method: Method, events: list[Event]) -> None:
        assert isinstance(method, spec.ConnectionTuneOk)
        self.tuned = negotiate(self.offered, method.channel_max, method.frame_max, method.heartbeat)
        self._reader.frame_max = self.tuned.frame_max

    def _on_open(self, method: Method, events: list[Event]) -> None:
        assert isinstance(method, spec.ConnectionOpen)
        self.vhost = method.virtual_host
        events.append(OpenRequested(method.virtual_host))

    def _on_close(self, method: Method, events: list[Event]) -> None:
        assert isinstance(method, spec.ConnectionClose)
        by_peer = self._state is not S.CLOSING
        self._send0(spec.ConnectionCloseOk())
        if by_peer:
            self._close_code, self._close_text = method.reply_code, method.reply_text
        self._finish(events, by_peer=by_peer)

    def _on_close_ok(self, method: Method, events: list[Event]) -> None:
        self._finish(events, by_peer=False)

    def _on_update_secret(self, method: Method, events: list[Event]) -> None:
        assert isinstance(method, spec.ConnectionUpdateSecret)
        self._send0(spec.ConnectionUpdateSecretOk())
        events.append(SecretUpdated(method.new_secret, method.reason))

    def _finish(self, events: list[Event], *, by_peer: bool) -> None:
        self._state = S.CLOSED
        self._channels.clear()
        events.append(ConnectionClosed(self._close_code, self._close_text, by_peer=by_peer))

    def accept_login(self) -> list[Event]:
        """Accept the login of ``LoginRequested``: send Tune; process pipelined bytes."""
        if self._state is not S.AUTHENTICATING:
            raise RuntimeError(f"accept_login() in state {self._state.value}")
        o = self.offered
        self._send0(spec.ConnectionTune(o.channel_max, o.frame_max, o.heartbeat_s))
        self._state = S.TUNE_SENT
        events: list[Event] = []
        self._drain(events)
        return events

    def reject_login(self, explanation: str | None = None) -> None:
        """Refuse the login: Connection.Close with ACCESS_REFUSED (403), as RabbitMQ does."""
        if self._state is not S.AUTHENTICATING:
            raise RuntimeError(f"reject_login() in state {self._state.value}")
        text = explanation or (
            f"Login was refused using authentication mechanism {self.mechanism}. "
            "For details see the broker logfile."
        )
        self.close(ReplyCode.ACCESS_REFUSED, text, 10, 11)

    def accept_open(self) -> list[Event]:
        """Accept ``OpenRequested``: send Open-Ok, move to OPEN; process pipelined bytes."""
        if self._state is not S.OPENING:
            raise RuntimeError(f"accept_open() in state {self._state.value}")
        self._send0(spec.ConnectionOpenOk())
        self._state = S.OPEN
        events: list[Event] = []
        self._drain(events)
        return events

    def close(self, code: int, text: str, class_id: int = 0, method_id: int = 0) -> None:
        """Server-initiated close: queue Connection.Close and wait for Close-Ok (``CLOSING``).

        ``text`` is the explanation; the reply text sent is "CODE_NAME - text" (<= 255 bytes).
        Before the protocol header was accepted there is nobody to tell: the connection just
        ends. The caller should arm a timeout and drop the transport if Close-Ok never comes.
        """
        if self._state in (S.CLOSING, S.CLOSED):
            return
        if self._state is S.AWAIT_HEADER:
            self._state = S.CLOSED
            return
        text_sent = reply_text(code, text)
        self._close_code, self._close_text = int(code), text_sent
        self._send0(spec.ConnectionClose(int(code), text_sent, class_id, method_id))
        self._state = S.CLOSING

    _HANDLERS0: ClassVar[
        dict[type[Method], Callable[[ConnectionMethods, Method, list[Event]], None]]
    ] = {
        spec.ConnectionStartOk: _on_start_ok,
        spec.ConnectionTuneOk: _on_tune_ok,
        spec.ConnectionOpen: _on_open,
        spec.ConnectionClose: _on_close,
        spec.ConnectionCloseOk: _on_close_ok,
        spec.ConnectionUpdateSecret: _on_update_secret,
    }
    """Channel-0 method handlers, read by ``_process0`` after ``TRANSITIONS`` allowed one."""


__all__ = ["ConnectionMethods"]
