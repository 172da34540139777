"""The owner side of a shard link: take forwarded publishes, serve remote consumers (sans-IO).

Theory of operation
-------------------
An `OwnerSession` is one link from an origin shard, on the shard that owns the queues. The
origin speaks first: a `Hello` whose MAC the broker's secret must verify (`Welcome`, or
`Refuse` and the session ends).

Publishes. Each `Forward` becomes a `Received(first, entries)` event: the server enqueues the
entries in order (their sequences follow on from the last without a gap, or the link is
broken: `ProtocolError`) and resolves each sequence with `accept(seq)` once it is stored as
the queue stores it, or `reject(seq, code)`. Resolutions may come in any order; the session
answers cumulatively, up to the first unresolved sequence, so one `Outcome` frame per
`data_to_send()` covers a whole group commit.

Consumers. `Subscribe` becomes `SubscribeAsked` (the vhost, the queue, the consumer's flags and
arguments: the server consumes as the origin's client asked); the server answers
`subscribed(cid)` or `refuse(cid, code, text)` (a `Cancel` that comes first is answered after
that answer). `deliver(cid, redelivered, count, message)` sends one delivery (`count`: the
queue's delivery count) while the consumer has credit (`credit(cid)`; the origin adds to it
with `Credit`, the `CreditAdded` event) and returns its tag; deliveries to one consumer are
batched into one `Deliveries` frame per `data_to_send()`. The origin's `Settle` becomes
`Settled` (tags must be outstanding); `Cancel` becomes `CancelAsked` and is answered at once
with a `Cancelled` that keeps the outstanding deliveries settleable. `gone(cid, reason)` ends a
consumer whose queue went, dropping its outstanding deliveries; frames the origin sent for it
(or for a refused one) before it learnt that are ignored.

Definitions (the link to shard 0). `Follow` becomes `FollowAsked` (once per link); the server
answers with `definitions(snapshot, snapshot=True)`, every definition of its feed, then
`definitions(changes)` with the changes as they are made, in order (core/deffeed.py).

Asks (the link to shard 0). `Ask` becomes `AskReceived` (a client's definition step of the
origin shard); the server makes it and answers `answer(rid, seq)` with the feed sequence of
the change, or `answer(rid, 0, code, text)` with its refusal.

Loss. `lost()` ends the session: the sequences received and not resolved (the server still
resolves nothing more for them; whatever it stored stays stored) and each consumer's
outstanding tags, which the server requeues.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass, field
from typing import Any

from ringmq.core.asks import DefinitionRequest
from ringmq.core.deffeed import DefinitionChange
from ringmq.core.message import Message
from ringmq.shardlink.codec import (
    BATCH_BYTES,
    VERSION,
    Answer,
    Ask,
    Cancel,
    Cancelled,
    Credit,
    Definitions,
    Deliveries,
    Delivery,
    Entry,
    Follow,
    Forward,
    Frame,
    FrameReader,
    Hello,
    Outcome,
    OutcomeFrame,
    ProtocolError,
    Refuse,
    Settle,
    Subscribe,
    Subscribed,
    SubscribeRefused,
    Welcome,
    encode,
    hello_mac,
)


@dataclass(frozen=True, slots=True)
class Opened:
    origin: int


@dataclass(frozen=True, slots=True)
class Received:
    first: int
    entries: tuple[Entry, ...]


@dataclass(frozen=True, slots=True)
class SubscribeAsked:
    cid: int
    vhost: str
    queue: str
    credit: int
    settled: bool
    exclusive: bool
    arguments: dict[str, Any]


@dataclass(frozen=True, slots=True)
class CreditAdded:
    cid: int
    add: int


@dataclass(frozen=True, slots=True)
class Settled:
    cid: int
    outcome: Outcome
    tags: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class CancelAsked:
    cid: int


@dataclass(frozen=True, slots=True)
class AskReceived:
    rid: int
    request: DefinitionRequest


@dataclass(frozen=True, slots=True)
class FollowAsked:
    """The origin asks for the definitions feed: a snapshot first, then the changes."""


@dataclass(frozen=True, slots=True)
class Closed:
    reason: str


@dataclass(frozen=True, slots=True)
class Lost:
    first: int
    upto: int
    """Sequences `first..upto` were received and not resolved (empty when first > upto)."""
    outstanding: dict[int, tuple[int, ...]]
    """Consumer -> its tags delivered and not settled: to requeue."""


Event = (
    Opened
    | Received
    | SubscribeAsked
    | CreditAdded
    | Settled
    | CancelAsked
    | FollowAsked
    | AskReceived
    | Closed
)


@dataclass(slots=True)
class _Consumer:
    settled: bool
    credit: int
    answered: bool = False  # `subscribed` was called (a `Cancel` before it waits for it)
    cancelled: bool = False
    next_tag: int = 1
    outstanding: set[int] = field(default_factory=set)
    batch: list[Delivery] = field(default_factory=list)
    batch_first: int = 1
    batch_bytes: int = 0


class OwnerSession:
    """One link from an origin shard, owner side (see the module docstring)."""

    def __init__(self, shard: int, secret: bytes) -> None:
        self.shard = shard
        self.origin: int | None = None
        self.closed = False
        self._secret = secret
        self._reader = FrameReader()
        self._out: list[bytes] = []
        self.received = 0
        """The last sequence received."""
        self.answered = 0
        """Every sequence up to this one is resolved and its outcome queued to send."""
        self._ahead: dict[int, int] = {}  # sequence -> code (0: accepted), beyond `answered`
        self._rejected: list[tuple[int, int]] = []  # resolved, not sent yet
        self._sent_upto = 0
        self._consumers: dict[int, _Consumer] = {}
        self._dropped: set[int] = set()  # consumers ended by `gone`: late frames ignored
        self._pending: list[int] = []  # consumers with a delivery batch open
        self.following = False
        """The origin asked for the definitions feed (`FollowAsked`)."""
        self._snapshot_sent = False
        self._asked: set[int] = set()

    # definitions

    def definitions(self, changes: list[DefinitionChange], *, snapshot: bool = False) -> None:
        """Send definition `changes` to a following origin: the snapshot first (every
        definition as a put), then the changes made after it, in order."""
        if not self.following or self.closed:
            raise ValueError("the origin does not follow the definitions")
        if snapshot == self._snapshot_sent:
            raise ValueError("the snapshot goes first, and once")
        self._snapshot_sent = True
        if changes or snapshot:
            self._emit(Definitions(snapshot, tuple(changes)))

    def answer(self, rid: int, seq: int, code: int = 0, text: str = "") -> None:
        """Answer ask `rid`: made (`code` 0; `seq` the feed sequence of the change), or
        refused with `code` and `text`."""
        if rid not in self._asked:
            raise ValueError(f"ask {rid} is not waiting for an answer")
        self._asked.discard(rid)
        if not self.closed:
            self._emit(Answer(rid, seq, code, text))

    # publishes

    def accept(self, seq: int) -> None:
        """Forwarded message `seq` is stored."""
        self._resolve(seq, 0)

    def reject(self, seq: int, code: int) -> None:
        """Forwarded message `seq` was refused (`code`: the server's reason, e.g. a full
        queue's reject-publish)."""
        if code <= 0:
            raise ValueError("a rejection code is positive")
        self._resolve(seq, code)

    # consumers

    def subscribed(self, cid: int) -> None:
        """The consumer asked for is attached."""
        c = self._consumers.get(cid)
        if c is None or c.answered:
            raise ValueError(f"consumer {cid} is not waiting for an answer")
        c.answered = True
        self._emit(Subscribed(cid))
        if c.cancelled:  # the origin cancelled meanwhile: its answer follows the first one
            self._emit(Cancelled(cid, "cancelled", True))
            self._forget_if_done(cid, c)

    def refuse(self, cid: int, code: int, text: str) -> None:
        """The consumer asked for cannot be attached (no such queue, exclusive, ...)."""
        self._consumers.pop(cid, None)
        self._dropped.add(cid)  # the origin's frames sent before it learns this are ignored
        self._emit(SubscribeRefused(cid, code, text))

    def credit(self, cid: int) -> int:
        """Deliveries consumer `cid` may take now (0 once cancelled)."""
        c = self._consumers.get(cid)
        return 0 if c is None or not c.answered or c.cancelled else c.credit

    def deliver(self, cid: int, redelivered: bool, delivery_count: int, message: Message) -> int:
        """Send one delivery to consumer `cid` (it must have credit); its tag."""
        c = self._consumers.get(cid)
        if c is None or not c.answered or c.cancelled or c.credit <= 0:
            raise ValueError(f"consumer {cid} has no credit")
        c.credit -= 1
        tag = c.next_tag
        c.next_tag = tag + 1
        if not c.batch:
            c.batch_first = tag
            self._pending.append(cid)
        c.batch.append(Delivery(redelivered, delivery_count, message))
        c.batch_bytes += len(message.body) + len(message.properties_bin) + 64
        if not c.settled:
            c.outstanding.add(tag)
        if c.batch_bytes >= BATCH_BYTES:
            self._close_batch(cid, c)
        return tag

    def outstanding(self, cid: int) -> frozenset[int]:
        """Tags of `cid` delivered and not settled."""
        c = self._consumers.get(cid)
        return frozenset(c.outstanding) if c is not None else frozenset()

    def gone(self, cid: int, reason: str) -> tuple[int, ...]:
        """End consumer `cid` because its queue went; the outstanding tags it drops."""
        c = self._consumers.get(cid)
        if c is None:
            return ()
        if not c.answered:
            self.refuse(cid, 404, reason)
            return ()
        del self._consumers[cid]
        if c.batch:
            self._close_batch(cid, c)
        self._dropped.add(cid)
        if not c.cancelled:  # a consumer already cancelled had its answer: its settlements
            self._emit(Cancelled(cid, reason, False))  # now find nothing and are ignored
        return tuple(sorted(c.outstanding))

    # the wire

    def receive_data(self, data: bytes) -> list[Event]:
        """Feed bytes read from the link; the events they complete."""
        if not self.closed:
            self._reader.feed(data)
        events: list[Event] = []
        while not self.closed and (frame := self._reader.next_frame()) is not None:
            events += self._handle(frame)  # a refusal closes the session: the rest is void
        return events

    def data_to_send(self) -> bytes:
        """The bytes to write to the link now (outcomes and deliveries included)."""
        for cid in self._pending:
            c = self._consumers.get(cid)
            if c is not None and c.batch:
                self._close_batch(cid, c)
        self._pending.clear()
        if self.answered > self._sent_upto:
            self._out.append(encode(OutcomeFrame(self.answered, tuple(self._rejected))))
            self._rejected.clear()
            self._sent_upto = self.answered
        out = b"".join(self._out)
        self._out.clear()
        return out

    def lost(self) -> Lost:
        """The link's socket is gone: what was not resolved, and what to requeue."""
        self.closed = True
        outstanding = {
            cid: tuple(sorted(c.outstanding)) for cid, c in self._consumers.items() if c.outstanding
        }
        self._consumers.clear()
        out = Lost(self.answered + 1, self.received, outstanding)
        self.answered = self._sent_upto = self.received
        self._ahead.clear()
        return out

    def _handle(self, frame: Frame) -> list[Event]:
        if self.origin is None:
            if isinstance(frame, Hello):
                return self._hello(frame)
            raise ProtocolError(f"{type(frame).__name__} before Hello")
        match frame:
            case Forward():
                if frame.first != self.received + 1:
                    raise ProtocolError(f"forward from {frame.first}, {self.received + 1} due")
                self.received += len(frame.entries)
                return [Received(frame.first, frame.entries)]
            case Subscribe():
                if frame.cid in self._consumers or frame.cid in self._dropped:
                    raise ProtocolError(f"consumer {frame.cid} subscribed twice")
                self._consumers[frame.cid] = _Consumer(frame.settled, frame.credit)
                return [_asked(frame)]
            case Credit():
                c = self._live(frame.cid)
                if c is None or c.cancelled:
                    return []
                c.credit += frame.add
                return [CreditAdded(frame.cid, frame.add)]
            case Settle():
                return self._settle(frame)
            case Cancel():
                c = self._live(frame.cid)
                if c is None or c.cancelled:
                    return []
                if c.batch:
                    self._close_batch(frame.cid, c)  # sent before the answer
                c.cancelled = True
                if c.answered:  # else `subscribed` answers both, in order
                    self._emit(Cancelled(frame.cid, "cancelled", True))
                    self._forget_if_done(frame.cid, c)
                return [CancelAsked(frame.cid)]
            case Ask() if frame.rid not in self._asked:
                self._asked.add(frame.rid)
                return [AskReceived(frame.rid, frame.request)]
            case Follow() if not self.following:
                self.following = True
                return [FollowAsked()]
            case Refuse():
                self.closed = True
                return [Closed(frame.reason)]
        raise ProtocolError(f"unexpected {type(frame).__name__} on an owner link")

    def _hello(self, hello: Hello) -> list[Event]:
        want = hello_mac(self._secret, hello.shard, hello.nonce)
        if hello.version != VERSION or not hmac.compare_digest(want, hello.mac):
            reason = "bad secret" if hello.version == VERSION else "other protocol version"
            self._out.append(encode(Refuse(f"shard link refused: {reason}")))
            self.closed = True
            return [Closed(reason)]
        self.origin = hello.shard
        self._out.append(encode(Welcome(self.shard)))
        return [Opened(hello.shard)]

    def _settle(self, frame: Settle) -> list[Event]:
        c = self._live(frame.cid)
        if c is None:
            return []
        tags = tuple(t for first, last in frame.ranges for t in range(first, last + 1))
        if any(t not in c.outstanding for t in tags) or len(set(tags)) != len(tags):
            raise ProtocolError(f"consumer {frame.cid}: a settlement of tags not outstanding")
        c.outstanding.difference_update(tags)
        self._forget_if_done(frame.cid, c)
        return [Settled(frame.cid, frame.outcome, tags)]

    def _live(self, cid: int) -> _Consumer | None:
        c = self._consumers.get(cid)
        if c is None and cid not in self._dropped:
            raise ProtocolError(f"no consumer {cid} on this link")
        return c

    def _forget_if_done(self, cid: int, c: _Consumer) -> None:
        if c.cancelled and not c.outstanding and not c.batch:
            del self._consumers[cid]

    def _resolve(self, seq: int, code: int) -> None:
        if not self.answered < seq <= self.received or seq in self._ahead:
            raise ValueError(f"sequence {seq} is not waiting for an outcome")
        self._ahead[seq] = code
        while (nxt := self.answered + 1) in self._ahead:
            code = self._ahead.pop(nxt)
            if code:
                self._rejected.append((nxt, code))
            self.answered = nxt

    def _close_batch(self, cid: int, c: _Consumer) -> None:
        self._out.append(encode(Deliveries(cid, c.batch_first, tuple(c.batch))))
        c.batch = []
        c.batch_bytes = 0

    def _emit(self, frame: Frame) -> None:
        self._out.append(encode(frame))


def _asked(f: Subscribe) -> SubscribeAsked:
    return SubscribeAsked(f.cid, f.vhost, f.queue, f.credit, f.settled, f.exclusive, f.arguments)
