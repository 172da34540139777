"""The AMQP 1.0 connection machine, server side: bytes in, events out; calls in, frames out.

Theory of operation
-------------------
`Connection` owns one client connection's protocol state, with no socket and no clock (time
comes in through `tick(mono_ms)`). Its states (`State`), each with the frames it takes
(`EXPECTS`):

    HEADER --"AMQP 3 1 0 0"--> SASL_INIT --sasl-init--> SASL_CHECK --sasl_outcome(ok)-->
    AMQP_HEADER --"AMQP 0 1 0 0"--> OPEN --open--> OPENED --close--> CLOSED
    HEADER --"AMQP 0 1 0 0" (no SASL: an anonymous login to check)--> SASL_CHECK --> OPEN
        (refused: the broker's open and close with amqp:unauthorized-access --> CLOSE_SENT)
    OPENED --close(): the broker's close--> CLOSE_SENT --the peer's close--> CLOSED

The machine answers the protocol's own steps itself: the protocol headers, the SASL
mechanisms (PLAIN, ANONYMOUS), the open (with the broker's limits and the `ANONYMOUS-RELAY`
capability), begin and end, the peer's detach, empty frames for the peer's idle timeout. What
needs the broker comes out as `events` (`Authenticate`, `LinkAttaching`, `MessageReceived`,
`CreditGranted`, `Settled`...), and the broker's answers come in as calls (`sasl_outcome`,
`attach` / `refuse_attach`, `send_transfer`, `settle`, `drained`, `detach`, `end`, `close`).
Sessions and links live in `session.py`. With `message_runs` (the broker's handler sets it),
whole-message transfers are read in place first (`transfers.take`, the receiving fast path)
and come out as one `MessagesReceived` per run of them on a link; whatever it does not
recognise goes through the general path frame by frame.

Negotiated limits: frames the broker sends are at most the peer's max-frame-size; the peer's
frames at most the broker's (the frame reader enforces it: framing error); channels above the
broker's channel-max and handles above handle-max are framing errors.

Errors are raised where the rule lives (`conditions.ConnectionLevelError`, `SessionError`,
`LinkError`, the codec's `DecodeError` and the frame reader's framing error) and caught at one
boundary, `receive_data`: a link error detaches the link, a session error ends the session,
anything else closes the connection with its condition (`amqp:decode-error`,
`amqp:connection:framing-error`, `amqp:not-allowed`...). A framing error leaves a stream that
cannot be read further: the machine closes at once (`closed`) after queueing its close.

Idle timeout (2.4.5): the broker offers `idle_timeout_ms`; a peer silent for twice that is
closed (`amqp:resource-limit-exceeded`). The peer's own idle timeout is honoured with an empty
frame whenever the broker has sent nothing for half of it.
"""

from __future__ import annotations

import logging
from enum import Enum
from typing import Any, Final

from ringmq.amqp10 import conditions as c
from ringmq.amqp10 import frames as f
from ringmq.amqp10 import performatives as p
from ringmq.amqp10.events import (
    Authenticate,
    Event,
    LinkAttaching,
    LinkDetached,
    Opened,
    SessionBegun,
    SessionEnded,
)
from ringmq.amqp10.frames import AMQP_HEADER, EMPTY_FRAME, SASL_HEADER
from ringmq.amqp10.performatives import MIN_MAX_FRAME_SIZE
from ringmq.amqp10.session import Link, Session
from ringmq.amqp10.transfers import take
from ringmq.amqp10.types import DecodeError

log = logging.getLogger(__name__)

ANONYMOUS_RELAY: Final = "ANONYMOUS-RELAY"
CLOSE_WAIT_MS: Final = 2000
"""How long the broker waits for the peer's close after its own."""


class State(Enum):
    HEADER = "header"
    SASL_INIT = "sasl-init"
    SASL_CHECK = "sasl-check"
    AMQP_HEADER = "amqp-header"
    OPEN = "open"
    OPENED = "opened"
    CLOSE_SENT = "close-sent"
    CLOSED = "closed"


_S = State
_PAUSED: Final = (_S.SASL_CHECK, _S.CLOSED)
"""States in which received frames wait (the login's outcome) or are dropped (a tuple: its
test is by identity, where a set would call the Enum's hash, Python code, per frame)."""
EXPECTS: Final[dict[State, frozenset[type]]] = {
    _S.HEADER: frozenset(),
    _S.SASL_INIT: frozenset({p.SaslInit}),
    _S.SASL_CHECK: frozenset(),
    _S.AMQP_HEADER: frozenset(),
    _S.OPEN: frozenset({p.Open}),
    _S.OPENED: frozenset(
        {p.Begin, p.Attach, p.Flow, p.Transfer, p.Disposition, p.Detach, p.End, p.Close}
    ),
    _S.CLOSE_SENT: frozenset({p.Close}),
    _S.CLOSED: frozenset(),
}
"""The performatives each state takes; anything else is `amqp:illegal-state`
(`CLOSE_SENT` drops everything but the peer's close, 2.4.3)."""
_TAKES_OPENED: Final = EXPECTS[_S.OPENED]


def error(condition: str, description: str) -> Any:
    """An `error` performative value."""
    return p.Error(condition=condition, description=description)


class Connection:
    """One AMQP 1.0 connection, server side (see the module docstring)."""

    def __init__(
        self,
        *,
        container_id: str,
        max_frame_size: int,
        channel_max: int,
        idle_timeout_ms: int,
        max_message_size: int,
        handle_max: int = 1023,
        mechanisms: tuple[str, ...] = ("PLAIN", "ANONYMOUS"),
        properties: dict[Any, Any] | None = None,
        message_runs: bool = False,
    ) -> None:
        self.container_id = container_id
        self.message_runs = message_runs
        """Whole-message transfers come as `MessagesReceived` runs (`transfers.take`, the
        receiving fast path), not one `MessageReceived` each."""
        self.max_frame_size = max(max_frame_size, MIN_MAX_FRAME_SIZE)
        self.channel_max = channel_max
        self.idle_timeout_ms = idle_timeout_ms
        self.max_message_size = max_message_size
        self.handle_max = handle_max
        self.mechanisms = mechanisms
        self.properties = properties or {}
        self.state = State.HEADER
        self.sessions: dict[int, Session] = {}
        self.remote_max_frame_size = MIN_MAX_FRAME_SIZE
        self.remote_idle_timeout_ms = 0
        self.remote_container_id = ""
        self._sasl = True
        self._reader = f.FrameReader()
        self.answer_pending = False
        """A `LinkAttaching` waits for `attach` / `refuse_attach`: frames after it wait too
        (they may name the link); `receive_data(b"")` goes on once it is answered."""
        self._out: list[bytes] = []
        self._emit = self._out.append
        """Queue frames already encoded (bound once: the per-transfer call is C's)."""
        self._rx = False
        self._tx = False
        self._last_rx = -1
        self._last_tx = -1
        self._close_sent_ms = -1
        self._paused = False

    # ------------------------------------------------------------------ status
    @property
    def opened(self) -> bool:
        """The peer's open arrived (and was answered)."""
        return self.state in (State.OPENED, State.CLOSE_SENT) or (
            self.state is State.CLOSED and bool(self.remote_container_id)
        )

    @property
    def closed(self) -> bool:
        """Nothing more to read or write after `data_to_send`: close the socket."""
        return self.state is State.CLOSED

    def link(self, channel: int, handle: int) -> Link | None:
        """The attached link `handle` of session `channel` (None when not attached)."""
        s = self.sessions.get(channel)
        return s.links.get(handle) if s is not None else None

    def data_to_send(self) -> bytes:
        """Everything queued since the last call."""
        out = self._out
        if not out:
            return b""
        data = out[0] if len(out) == 1 else b"".join(out)
        out.clear()  # the same list: the sessions hold its append (`_emit`)
        self._tx = True
        return data

    # ------------------------------------------------------------------ input
    def receive_data(self, data: bytes, events: list[Event] | None = None) -> list[Event]:
        """Take bytes from the socket; return the events they make (in order)."""
        if events is None:
            events = []
        if self.state is State.CLOSED:
            return events
        if data:
            self._rx = True
        try:
            self._receive(data, events)
        except c.ConnectionLevelError as exc:
            self.close(exc.condition, exc.description)
        except DecodeError as exc:
            self.close(c.DECODE_ERROR, str(exc))
        except f.FramingError as exc:
            self.close(c.FRAMING_ERROR, str(exc))
            self.state = State.CLOSED
        return events

    def _receive(self, data: bytes, events: list[Event]) -> None:
        reader = self._reader
        reader.feed(data)
        while self.state not in _PAUSED and not self.answer_pending:
            if self.state is _S.OPENED and self.message_runs:  # whole messages, in place
                unread = reader.unread()
                if unread is not None:
                    buf, pos = unread
                    end = take(self.sessions, buf, pos, reader.max_frame_size, events)
                    if end != pos:
                        reader.advance(end)
            frame = reader.next_frame()
            if frame is None:
                return
            if type(frame) is f.ProtocolHeader:
                self._header(frame, events)
                continue
            if self.state in (State.HEADER, State.AMQP_HEADER):
                raise f.FramingError("a frame where the protocol header was expected")
            try:
                self._frame(frame, events)
            except c.LinkError as exc:
                s = self.sessions.get(exc.channel)
                if s is not None:
                    s.detach(exc.handle, error(exc.condition, exc.description))
                    events.append(LinkDetached(exc.channel, exc.handle, True, None))
            except c.SessionError as exc:
                self.end(exc.channel, exc.condition, exc.description)
                events.append(SessionEnded(exc.channel, None))

    def _header(self, header: Any, events: list[Event]) -> None:
        if self.state is State.HEADER and header.is_sasl:
            self._emit(SASL_HEADER)
            self._send(0, p.SaslMechanisms(sasl_server_mechanisms=self.mechanisms), b"")
            self.state = State.SASL_INIT
        elif self.state in (State.HEADER, State.AMQP_HEADER) and header.is_amqp:
            self._emit(AMQP_HEADER)
            if self.state is State.HEADER:  # no SASL: an anonymous login
                self.state = State.SASL_CHECK
                self._sasl = False
                events.append(Authenticate("ANONYMOUS", b"", None, sasl=False))
            else:
                self.state = State.OPEN
        else:
            # 2.2: answer with the header the broker supports, then close.
            self._emit(SASL_HEADER if self.state is State.HEADER else AMQP_HEADER)
            self.state = State.CLOSED

    def _frame(self, frame: Any, events: list[Event]) -> None:
        body = frame.body
        if not body:
            return  # an empty frame: the peer's heartbeat
        perf, offset = p.decode_performative(body)
        state = self.state
        if type(perf) not in (_TAKES_OPENED if state is _S.OPENED else EXPECTS[state]):
            if self.state is State.CLOSE_SENT:
                return
            raise c.ConnectionLevelError(
                c.ILLEGAL_STATE, f"{type(perf).__name__} in state {self.state.value}"
            )
        channel = int(frame.channel)
        handler = _HANDLERS[type(perf)]
        handler(self, channel, perf, body, offset, events)

    # ------------------------------------------------------------------ SASL and open
    def _on_sasl_init(self, channel: int, m: Any, body: Any, off: int, events: list[Event]) -> None:
        mech = m.mechanism
        if mech not in self.mechanisms:
            self._send(0, p.SaslOutcome(code=p.SASL_AUTH), b"")  # unsupported mechanism
            self.state = State.CLOSED
            return
        self.state = State.SASL_CHECK
        events.append(Authenticate(mech, m.initial_response or b"", m.hostname, sasl=True))

    def sasl_outcome(self, ok: bool, description: str = "") -> list[Event]:
        """Answer the `Authenticate` event: the login succeeded or not (then closed).

        A refused SASL login gets the outcome `auth`. A peer that skipped SASL has no outcome
        to read: a refusal is an open and at once a close with `amqp:unauthorized-access` and
        `description` (2.4.5, as RabbitMQ 4 and Artemis answer it); the peer's open is then
        dropped and its close ends the connection.

        Returns the events of what the peer sent behind its login (its header and open)."""
        if self.state is not State.SASL_CHECK:
            return []
        if not self._sasl:  # the peer skipped SASL
            if not ok:
                self.state = State.OPEN
                self.close(c.UNAUTHORIZED_ACCESS, description or "login refused")
                return []
            self.state = State.OPEN
        else:
            self._send(0, p.SaslOutcome(code=p.SASL_OK if ok else p.SASL_AUTH), b"")
            self.state = State.AMQP_HEADER if ok else State.CLOSED
        events: list[Event] = []
        if ok:
            if self._sasl:
                self._reader.expect_header()
            self.receive_data(b"", events)
        return events

    def _on_open(self, channel: int, m: Any, body: Any, off: int, events: list[Event]) -> None:
        self.remote_container_id = str(m.container_id)
        remote_max = int(m.max_frame_size) if m.max_frame_size is not None else 1 << 32
        if remote_max < MIN_MAX_FRAME_SIZE:
            raise c.ConnectionLevelError(
                c.FRAME_SIZE_TOO_SMALL, f"max-frame-size {remote_max} is below 512"
            )
        self.remote_max_frame_size = min(remote_max, 1 << 32)
        self.remote_idle_timeout_ms = int(m.idle_time_out or 0)
        self._send(
            0,
            p.Open(
                container_id=self.container_id,
                max_frame_size=self.max_frame_size,
                channel_max=self.channel_max,
                idle_time_out=self.idle_timeout_ms or None,
                offered_capabilities=(ANONYMOUS_RELAY,),
                properties=self.properties or None,
            ),
            b"",
        )
        self.state = State.OPENED
        self._reader.max_frame_size = self.max_frame_size
        props = dict(m.properties or {})
        events.append(Opened(self.remote_container_id, m.hostname, props))

    def _on_close(self, channel: int, m: Any, body: Any, off: int, events: list[Event]) -> None:
        if self.state is not State.CLOSE_SENT:
            self._send(0, p.Close(), b"")
            if m.error is not None:
                log.info("AMQP 1.0 peer closed with %s", m.error)
        self.state = State.CLOSED
        events.extend(SessionEnded(ch, None) for ch in list(self.sessions))
        self.sessions.clear()

    def close(self, condition: str | None = None, description: str = "") -> None:
        """Close the connection (with an error when `condition` is given); the peer's close
        ends it."""
        if self.state in (State.CLOSED, State.CLOSE_SENT):
            return
        if self.state in (State.HEADER, State.SASL_INIT, State.SASL_CHECK, State.AMQP_HEADER):
            self.state = State.CLOSED  # no open to close
            return
        if self.state is State.OPEN:
            self._send(0, p.Open(container_id=self.container_id), b"")  # 2.4.5: open, close
        err = error(condition, description) if condition else None
        self._send(0, p.Close(error=err), b"")
        self.state = State.CLOSE_SENT

    # ------------------------------------------------------------------ sessions
    def _session(self, channel: int) -> Session:
        s = self.sessions.get(channel)
        if s is None:
            raise c.ConnectionLevelError(c.NOT_ALLOWED, f"no session on channel {channel}")
        return s

    def _on_begin(self, channel: int, m: Any, body: Any, off: int, events: list[Event]) -> None:
        if channel > self.channel_max:
            raise c.ConnectionLevelError(
                c.FRAMING_ERROR, f"channel {channel} is above channel-max {self.channel_max}"
            )
        if m.remote_channel is not None or channel in self.sessions:
            raise c.ConnectionLevelError(c.NOT_ALLOWED, f"channel {channel} is in use")
        handle_max = self.handle_max
        if m.handle_max is not None:
            handle_max = min(handle_max, int(m.handle_max))
        s = Session(
            channel,
            m,
            self._send,
            self._emit,
            handle_max=handle_max,
            max_message_size=self.max_message_size,
            frame_max=self._frame_max(),
        )
        self.sessions[channel] = s
        self._send(channel, s.begin_reply(), b"")
        events.append(SessionBegun(channel))

    def _frame_max(self) -> int:
        return min(self.remote_max_frame_size, 1 << 20)

    def _on_end(self, channel: int, m: Any, body: Any, off: int, events: list[Event]) -> None:
        s = self._session(channel)
        del self.sessions[channel]
        if not s.ending:
            self._send(channel, p.End(), b"")
            events.append(SessionEnded(channel, m.error))

    def end(self, channel: int, condition: str | None = None, description: str = "") -> None:
        """End session `channel` (with an error when `condition` is given); its frames are
        dropped until the peer's end."""
        s = self.sessions.get(channel)
        if s is None or s.ending:
            return
        s.ending = True
        err = error(condition, description) if condition else None
        self._send(channel, p.End(error=err), b"")

    # ------------------------------------------------------------------ links
    def _on_attach(self, channel: int, m: Any, body: Any, off: int, events: list[Event]) -> None:
        s = self._session(channel)
        if s.ending:
            return
        handle = s.attaching(m)
        events.append(LinkAttaching(channel, handle, m))
        self.answer_pending = True  # what follows may use the link: wait for the answer

    def attach(self, channel: int, attach: Any, **fields: Any) -> Link | None:
        """Answer a `LinkAttaching`: the link exists, with the given `source` and `target`
        (and optionally `snd_settle_mode`, `properties`, `offered_capabilities`)."""
        self.answer_pending = False
        s = self.sessions.get(channel)
        if s is None or s.ending:
            return None
        return s.attach(attach, **fields)

    def refuse_attach(self, channel: int, attach: Any, condition: str, description: str) -> None:
        """Answer a `LinkAttaching`: the link cannot exist (the peer gets the condition)."""
        self.answer_pending = False
        s = self.sessions.get(channel)
        if s is not None and not s.ending:
            s.refuse_attach(attach, error(condition, description))

    def detach(self, channel: int, handle: int, condition: str | None, description: str) -> None:
        """Close link `handle` of session `channel` from the broker's side."""
        s = self.sessions.get(channel)
        if s is not None and not s.ending:
            s.detach(handle, error(condition, description) if condition else None)

    def _on_detach(self, channel: int, m: Any, body: Any, off: int, events: list[Event]) -> None:
        s = self._session(channel)
        if s.ending:
            return
        link = s.detached(m)
        if link is not None:
            events.append(LinkDetached(channel, link.handle, bool(m.closed), m.error))

    def _on_flow(self, channel: int, m: Any, body: Any, off: int, events: list[Event]) -> None:
        s = self._session(channel)
        if not s.ending:
            s.flow(m, events)

    def _on_transfer(self, channel: int, m: Any, body: Any, off: int, events: list[Event]) -> None:
        s = self._session(channel)
        if not s.ending:
            s.transfer(m, bytes(body[off:]), events)

    def _on_disposition(
        self, channel: int, m: Any, body: Any, off: int, events: list[Event]
    ) -> None:
        s = self._session(channel)
        if not s.ending:
            s.disposition(m, events)

    def send_transfer(
        self, channel: int, handle: int, tag: bytes, payload: bytes, settled: bool
    ) -> int:
        """Send a message on link `handle` of session `channel`; return its delivery id."""
        return self.sessions[channel].send_transfer(handle, tag, payload, settled)

    def settle(
        self, channel: int, first: int, last: int, state: Any, *, receiving: bool = True
    ) -> None:
        """Settle deliveries `first`..`last` of session `channel` with outcome `state`."""
        s = self.sessions.get(channel)
        if s is not None and not s.ending:
            s.settle(first, last, state, receiving=receiving)

    def drained(self, channel: int, handle: int) -> None:
        """A draining link's unused credit is spent (advance and echo, 2.6.7)."""
        s = self.sessions.get(channel)
        if s is not None and not s.ending:
            s.drained(handle)

    def pause_incoming(self, paused: bool) -> None:
        """Withhold (or give again) the credit of every link the broker receives on."""
        if paused == self._paused:
            return
        self._paused = paused
        for s in self.sessions.values():
            if not s.ending:
                s.set_paused(paused)

    # ------------------------------------------------------------------ output and time
    def _send(self, channel: int, performative: Any, payload: bytes) -> int:
        data = f.encode_frame(channel, performative, payload)
        self._out.append(data)
        return len(data)

    def tick(self, mono_ms: int) -> None:
        """The periodic sweep: the broker's idle timeout, the peer's heartbeats, and a close
        the peer never answered."""
        if self._rx or self._last_rx < 0:
            self._rx = False
            self._last_rx = mono_ms
        if self._tx or self._last_tx < 0:
            self._tx = False
            self._last_tx = mono_ms
        if self.state is State.CLOSE_SENT:
            if self._close_sent_ms < 0:
                self._close_sent_ms = mono_ms
            elif mono_ms - self._close_sent_ms >= CLOSE_WAIT_MS:
                self.state = State.CLOSED
            return
        if self.state is not State.OPENED:
            return
        idle = self.idle_timeout_ms
        if idle and mono_ms - self._last_rx > 2 * idle:
            self.close(c.RESOURCE_LIMIT_EXCEEDED, f"no frame for {2 * idle} ms (idle timeout)")
            return
        remote = self.remote_idle_timeout_ms
        if remote and mono_ms - self._last_tx >= remote // 2 and not self._out:
            self._out.append(EMPTY_FRAME)


_HANDLERS: Final[dict[type, Any]] = {
    p.SaslInit: Connection._on_sasl_init,  # noqa: SLF001 (the class's own dispatch table)
    p.Open: Connection._on_open,  # noqa: SLF001
    p.Close: Connection._on_close,  # noqa: SLF001
    p.Begin: Connection._on_begin,  # noqa: SLF001
    p.End: Connection._on_end,  # noqa: SLF001
    p.Attach: Connection._on_attach,  # noqa: SLF001
    p.Detach: Connection._on_detach,  # noqa: SLF001
    p.Flow: Connection._on_flow,  # noqa: SLF001
    p.Transfer: Connection._on_transfer,  # noqa: SLF001
    p.Disposition: Connection._on_disposition,  # noqa: SLF001
}
"""The handler of each performative the machine takes (`EXPECTS` says in which states)."""
