"""AMQP 1.0 sessions and links: windows, handles, credit, transfers and their assembly.

Theory of operation
-------------------
A `Session` is one begun session of a connection (spec part 2.5); the broker answers each
peer's begin on the same channel number the peer chose (channel numbers are independent per
direction, so reusing the peer's is always free), and names each link by the peer's handle
for both directions likewise. It owns

* the **session windows** (2.5.6): transfer frames the peer may still send before the broker
  widens its incoming window again (`incoming_left`; reopened by a session flow when half is
  used), and transfer frames the peer will still take (`remote_incoming`, from its begin and
  flows). A transfer that does not fit waits in `pending`, in order, and goes out when the
  peer's flow opens the window;
* its **links** (`Link`, by handle, at most `handle_max + 1`): for a link the broker
  *receives* on, the credit it granted (topped up by a flow once half is spent, unless
  `paused`: a blocked publisher) and the message being assembled from transfer frames
  (`more`, `aborted`, at most `max_message_size` bytes); for a link the broker *sends* on, its
  delivery count and the peer's credit (`credit` = the peer's delivery count + link credit -
  ours, 2.6.7);
* transfer ids (the window's count of frames) and delivery ids (one per message).

It raises `SessionError` / `LinkError` for the peer's mistakes; `Connection` catches them.
It sends through the `send(channel, performative, payload)` callable it is given.
Pure: no I/O, no clock; imports nothing of ringmq outside `ringmq.amqp10`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

from ringmq.amqp10 import conditions as c
from ringmq.amqp10 import performatives as p
from ringmq.amqp10.events import CreditGranted, Event, MessageReceived, Settled
from ringmq.amqp10.frames import encode_body_frame, encode_transfer_frames
from ringmq.amqp10.hotpath import TRANSFER_FRAME_SIZE, transfer_frame_head, transfer_frame_start
from ringmq.amqp10.performatives import ROLE_RECEIVER, ROLE_SENDER, encode_disposition

Send = Callable[[int, Any, bytes], int]
"""`send(channel, performative, payload) -> bytes queued` (the connection's output); `emit`
queues frames already encoded (the hot paths: transfers and dispositions)."""

SERIAL: Final = 1 << 32
WINDOW: Final = 1 << 16
"""The incoming window the broker offers (transfer frames); reopened when half is used."""
RECEIVE_CREDIT: Final = 1000
"""Link credit the broker grants a sending peer (topped up once half is spent)."""
HALF_WINDOW: Final = WINDOW // 2
HALF_CREDIT: Final = RECEIVE_CREDIT // 2


@dataclass(slots=True)
class Link:
    """One attached link, named by the peer's handle (the broker's handle is the same)."""

    handle: int
    name: str
    receiving: bool
    """The broker receives on it (the peer is the sender)."""
    delivery_count: int = 0
    credit: int = 0
    """Receiving: credit the broker granted and the peer has not used. Sending: the peer's
    credit still open."""
    drain: bool = False
    detaching: bool = False
    """The broker sent its detach and waits for the peer's."""
    paused: bool = False
    """Receiving: no credit top-ups (the publisher is blocked)."""
    max_message_size: int = 0
    # the message being assembled (receiving)
    parts: list[bytes] = field(default_factory=list)
    size: int = 0
    first: Any = None
    """The first transfer frame of the message being assembled (None between messages)."""
    transfer_head: bytes | None = b""
    """Sending: ``hotpath.transfer_frame_head`` of the link (b"": not made yet; None: its
    handle has no such head)."""


class Session:
    """One begun session (see the module docstring)."""

    def __init__(
        self,
        channel: int,
        begin: Any,
        send: Send,
        emit: Callable[[bytes], None],
        *,
        handle_max: int,
        max_message_size: int,
        frame_max: int,
    ) -> None:
        self.channel = channel
        self.send = send
        self.emit = emit
        self.handle_max = handle_max
        self.max_message_size = max_message_size
        self.frame_max = frame_max
        """The largest frame the broker sends (the peer's max-frame-size, capped)."""
        self.links: dict[int, Link] = {}
        self.next_incoming_id = int(begin.next_outgoing_id)
        self.incoming_left = WINDOW
        self.next_outgoing_id = 0
        self.next_delivery_id = 0
        self.remote_incoming = int(begin.incoming_window)
        self.pending: list[tuple[int, bytes]] = []
        self.ending = False
        """The broker sent its end and waits for the peer's."""

    # ------------------------------------------------------------------ frames
    def begin_reply(self) -> Any:
        """The broker's begin answering the peer's."""
        return p.Begin(
            remote_channel=self.channel,
            next_outgoing_id=self.next_outgoing_id,
            incoming_window=WINDOW,
            outgoing_window=SERIAL - 1,
            handle_max=self.handle_max,
        )

    def _flow(self, link: Link | None = None, *, echo: bool = False) -> Any:
        return p.Flow(
            next_incoming_id=self.next_incoming_id,
            incoming_window=self.incoming_left,
            next_outgoing_id=self.next_outgoing_id,
            outgoing_window=SERIAL - 1,
            handle=None if link is None else link.handle,
            delivery_count=None if link is None else link.delivery_count % SERIAL,
            link_credit=None if link is None else max(link.credit, 0),
            drain=False if link is None else link.drain,
            echo=echo,
        )

    # ------------------------------------------------------------------ links
    def attaching(self, attach: Any) -> int:
        """Check the peer's attach; return its handle."""
        handle = int(attach.handle)
        if handle > self.handle_max:
            raise c.ConnectionLevelError(
                c.FRAMING_ERROR, f"handle {handle} is above handle-max {self.handle_max}"
            )
        if handle in self.links:
            raise c.SessionError(self.channel, c.HANDLE_IN_USE, f"handle {handle} is in use")
        return handle

    def attach(
        self,
        attach: Any,
        *,
        source: Any,
        target: Any,
        snd_settle_mode: int | None = None,
        properties: dict[Any, Any] | None = None,
        offered_capabilities: Any = None,
    ) -> Link:
        """Answer the peer's attach: the link exists (a receiving link gets its credit)."""
        receiving = attach.role == ROLE_SENDER
        handle = int(attach.handle)
        link = Link(handle, str(attach.name), receiving, max_message_size=self.max_message_size)
        self.links[handle] = link
        if receiving:
            link.delivery_count = int(attach.initial_delivery_count or 0)
        self.send(
            self.channel,
            p.Attach(
                name=attach.name,
                handle=handle,
                role=ROLE_RECEIVER if receiving else ROLE_SENDER,
                snd_settle_mode=attach.snd_settle_mode
                if snd_settle_mode is None
                else snd_settle_mode,
                rcv_settle_mode=attach.rcv_settle_mode,
                source=source,
                target=target,
                initial_delivery_count=None if receiving else 0,
                max_message_size=None if not receiving else self.max_message_size,
                offered_capabilities=offered_capabilities,
                properties=properties,
            ),
            b"",
        )
        if receiving:
            link.credit = RECEIVE_CREDIT
            self.send(self.channel, self._flow(link), b"")
        return link

    def refuse_attach(self, attach: Any, error: Any) -> None:
        """Answer the peer's attach with a link that is not there (null source or target)
        followed by a closing detach with `error` (2.6.3); the link waits for the peer's detach."""
        receiving = attach.role == ROLE_SENDER
        handle = attach.handle
        self.links[handle] = Link(handle, str(attach.name), receiving, detaching=True)
        self.send(
            self.channel,
            p.Attach(
                name=attach.name,
                handle=handle,
                role=ROLE_RECEIVER if receiving else ROLE_SENDER,
                source=attach.source if receiving else None,
                target=None if receiving else attach.target,
                initial_delivery_count=None if receiving else 0,
            ),
            b"",
        )
        self.send(self.channel, p.Detach(handle=handle, closed=True, error=error), b"")

    def detach(self, handle: int, error: Any) -> None:
        """The broker closes link `handle` (it waits for the peer's detach)."""
        link = self.links.get(handle)
        if link is None or link.detaching:
            return
        link.detaching = True
        self.send(self.channel, p.Detach(handle=handle, closed=True, error=error), b"")

    def detached(self, detach: Any) -> Link | None:
        """The peer's detach: answered unless the broker started it; the link when the peer
        started it (None when it answered the broker's)."""
        handle = int(detach.handle)
        link = self.links.pop(handle, None)
        if link is None:
            raise c.SessionError(self.channel, c.UNATTACHED_HANDLE, f"no link {handle}")
        if link.detaching:
            return None
        self.send(self.channel, p.Detach(handle=handle, closed=detach.closed), b"")
        return link

    def _link(self, handle: Any) -> Link:
        link = self.links.get(int(handle))
        if link is None:
            raise c.SessionError(self.channel, c.UNATTACHED_HANDLE, f"no link {handle}")
        return link

    # ------------------------------------------------------------------ flow
    def flow(self, flow: Any, out: list[Event]) -> None:
        """The peer's flow: the session window, and a link's credit or state."""
        if flow.next_incoming_id is None:
            self.remote_incoming = int(flow.incoming_window)
        else:  # serial arithmetic (2.5.6): transfer ids wrap at 2**32
            room = (flow.next_incoming_id + flow.incoming_window - self.next_outgoing_id) % SERIAL
            self.remote_incoming = room if room < SERIAL // 2 else 0
        self._resend()
        if flow.handle is None:
            if flow.echo:
                self.send(self.channel, self._flow(), b"")
            return
        link = self._link(flow.handle)
        if link.detaching:
            return
        if link.receiving:
            if flow.echo:
                self.send(self.channel, self._flow(link), b"")
            return
        remote_count = int(flow.delivery_count or 0)
        credit = (remote_count + int(flow.link_credit or 0) - link.delivery_count) % SERIAL
        if credit >= SERIAL // 2:  # behind the broker's count: nothing open
            credit = 0
        link.credit = credit
        link.drain = bool(flow.drain)
        out.append(CreditGranted(self.channel, link.handle, credit, link.drain))
        if flow.echo and not link.drain:
            self.send(self.channel, self._flow(link), b"")

    def drained(self, handle: int) -> None:
        """A draining link has no message for its credit: the credit is spent, its delivery
        count advances by it, and the flow is echoed (2.6.7)."""
        link = self.links.get(handle)
        if link is None or link.detaching:
            return
        link.delivery_count = (link.delivery_count + max(link.credit, 0)) % SERIAL
        link.credit = 0
        self.send(self.channel, self._flow(link), b"")
        link.drain = False

    def set_paused(self, paused: bool) -> None:
        """Stop (or resume) topping up the credit of the links the broker receives on."""
        for link in self.links.values():
            if link.receiving:
                link.paused = paused
                if not paused and link.credit < RECEIVE_CREDIT // 2 and not link.detaching:
                    link.credit = RECEIVE_CREDIT
                    self.send(self.channel, self._flow(link), b"")

    # ------------------------------------------------------------------ transfers in
    def transfer(self, t: Any, payload: bytes, out: list[Event]) -> None:
        """One transfer frame from the peer: window and credit, then the message's assembly."""
        left = self.incoming_left - 1
        if left < 0:
            raise c.SessionError(
                self.channel, c.WINDOW_VIOLATION, "transfer beyond the incoming window"
            )
        self.incoming_left = left
        self.next_incoming_id = (self.next_incoming_id + 1) % SERIAL
        link = self.links.get(t.handle)
        if link is None or not link.receiving:
            self._errant(t.handle, link)
        assert link is not None
        if link.detaching:
            return
        if link.first is None and not t.more and not t.aborted:
            # the common case: a whole message in one frame
            did = t.delivery_id
            if did is None:
                raise c.SessionError(
                    self.channel, c.NOT_ALLOWED, "first transfer of a delivery without an id"
                )
            link.delivery_count = (link.delivery_count + 1) % SERIAL
            link.credit -= 1
            if len(payload) > link.max_message_size:
                self._too_large(link)
            out.append(
                MessageReceived(
                    self.channel,
                    link.handle,
                    did,
                    t.delivery_tag or b"",
                    bool(t.settled),
                    payload,
                    t.state,
                    t.message_format or 0,
                )
            )
        else:
            self._assemble(link, t, payload, out)
        if left < HALF_WINDOW or link.credit < HALF_CREDIT:
            self.top_up(link)

    def top_up(self, link: Link) -> None:
        """After a transfer on `link`: widen the incoming window again once half is used, and
        top the link's credit up once half is spent (unless the publisher is paused)."""
        if self.incoming_left < HALF_WINDOW:
            self.incoming_left = WINDOW
            self.send(self.channel, self._flow(), b"")
        if link.credit < HALF_CREDIT and not link.paused:
            link.credit = RECEIVE_CREDIT
            self.send(self.channel, self._flow(link), b"")

    def _errant(self, handle: Any, link: Link | None) -> None:
        if link is None:
            raise c.SessionError(self.channel, c.UNATTACHED_HANDLE, f"no link {handle}")
        raise c.SessionError(
            self.channel, c.ERRANT_LINK, f"transfer on link {link.handle}, a receiving link"
        )

    def _too_large(self, link: Link) -> None:
        self._reset(link)
        raise c.LinkError(
            self.channel,
            link.handle,
            c.MESSAGE_SIZE_EXCEEDED,
            f"message larger than {link.max_message_size} bytes",
        )

    def _assemble(self, link: Link, t: Any, payload: bytes, out: list[Event]) -> None:
        # A message in several frames (more=true), or aborted.
        if link.first is None:
            if t.delivery_id is None:
                raise c.SessionError(
                    self.channel, c.NOT_ALLOWED, "first transfer of a delivery without an id"
                )
            link.first = t
            link.delivery_count = (link.delivery_count + 1) % SERIAL
            link.credit -= 1
        if t.aborted:
            self._reset(link)
            return
        link.size += len(payload)
        if link.size > link.max_message_size:
            self._too_large(link)
        link.parts.append(payload)
        if not t.more:
            first = link.first
            body = link.parts[0] if len(link.parts) == 1 else b"".join(link.parts)
            self._reset(link)
            out.append(
                MessageReceived(
                    self.channel,
                    link.handle,
                    int(first.delivery_id),
                    bytes(first.delivery_tag or b""),
                    bool(first.settled) or bool(t.settled),
                    body,
                    first.state,
                    int(first.message_format or 0),
                )
            )

    @staticmethod
    def _reset(link: Link) -> None:
        link.first = None
        link.parts = []
        link.size = 0

    # ------------------------------------------------------------------ transfers out
    def send_transfer(
        self, handle: int, tag: bytes, payload: bytes, settled: bool, body: bytes = b""
    ) -> int:
        """Send a message, ``payload + body``, on link `handle` (split to the peer's frame
        size); return its delivery id. The link's credit is spent; frames beyond the peer's
        incoming window wait for its flow. (The message in two parts: a single frame queues
        them as they are, without joining them.)"""
        link = self.links[handle]
        did = self.next_delivery_id
        self.next_delivery_id = (did + 1) % SERIAL
        link.delivery_count = (link.delivery_count + 1) % SERIAL
        link.credit -= 1
        frame_max = self.frame_max
        head = link.transfer_head
        if head == b"":
            head = link.transfer_head = transfer_frame_head(self.channel, handle)
        size = len(payload) + len(body)
        if (
            head is not None
            and did >= 256
            and len(tag) == 8
            and size + TRANSFER_FRAME_SIZE <= frame_max
        ):  # the common case: one frame from the link's pre-encoded head
            start = transfer_frame_start(head, did, tag, settled, size)
            if self.remote_incoming >= 1 and not self.pending:
                self.remote_incoming -= 1
                self.next_outgoing_id = (self.next_outgoing_id + 1) % SERIAL
                emit = self.emit
                emit(start)
                emit(payload)
                if body:
                    emit(body)
                return did
            data = start + payload + body
            frames = 1
        else:
            if body:
                payload += body
            data = encode_transfer_frames(
                self.channel, handle, did, tag, payload, settled=settled, max_frame_size=frame_max
            )
            frames = 1 if len(payload) + 64 < frame_max else _count_frames(data)
        if self.remote_incoming < frames or self.pending:
            self.pending.append((frames, data))
        else:
            self.remote_incoming -= frames
            self.next_outgoing_id = (self.next_outgoing_id + frames) % SERIAL
            self.emit(data)
        return did

    def _resend(self) -> None:
        # Transfers that waited for the peer's window, in order, as far as it now goes.
        pending = self.pending
        i = 0
        while i < len(pending) and self.remote_incoming >= pending[i][0]:
            frames, data = pending[i]
            self.remote_incoming -= frames
            self.next_outgoing_id = (self.next_outgoing_id + frames) % SERIAL
            self.emit(data)
            i += 1
        del pending[:i]

    # ------------------------------------------------------------------ dispositions
    def disposition(self, d: Any, out: list[Event]) -> None:
        """The peer's disposition: of the broker's deliveries when the peer is the receiver."""
        if d.role == ROLE_RECEIVER:
            first = int(d.first)
            last = first if d.last is None else int(d.last)
            out.append(Settled(self.channel, first, last, bool(d.settled), d.state))

    def settle(self, first: int, last: int, state: Any, *, receiving: bool) -> None:
        """Settle deliveries `first`..`last` with outcome `state`: ones the peer sent
        (`receiving`) or, after the peer's unsettled disposition, ones the broker sent."""
        body = encode_disposition(
            ROLE_RECEIVER if receiving else ROLE_SENDER,
            first,
            None if last == first else last,
            True,
            state,
        )
        self.emit(encode_body_frame(self.channel, body))


def _count_frames(data: bytes) -> int:
    # The frames of a multi-frame transfer, by their size fields (each takes a window slot).
    n = pos = 0
    while pos < len(data):
        pos += int.from_bytes(data[pos : pos + 4], "big")
        n += 1
    return n
