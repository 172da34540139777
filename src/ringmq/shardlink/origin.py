"""The origin side of a shard link: forward publishes, consume remote queues (sans-IO).

Theory of operation
-------------------
An `OriginSession` is one link from the shard that holds a client's connection to the shard
that owns queues the client uses. The server writes what `data_to_send()` returns to the
link's socket and feeds what it reads to `receive_data`, which returns events.

Publishes. `forward(vhost, queues, message)` gives the message the link's next sequence and
buffers it; `data_to_send()` closes the buffer into `Forward` frames (one per `BATCH_BYTES`),
so a read batch of publishes crosses in one write. Sequences are sent in order on one stream, so
the owner enqueues them in the order they were forwarded: one publisher's messages to one
queue keep their order. The owner answers with cumulative `Outcome`s; each becomes one
`Resolved(first, upto, rejected)` event: the sequences `first..upto` are settled, those in
`rejected` refused (with the owner's code), the others stored. The server confirms an origin
publish once every link it went over (and the origin's own store) resolved it.

Consumers. `subscribe(vhost, queue, credit, ...)` asks the owner for a consumer on `queue`
for a client's consumer here, with that consumer's flags and arguments (the owner consumes
as the client's consume would: `x-priority`...); the owner never sends more deliveries than
the credit granted (`grant` adds to it; a `Deliveries` frame beyond it is a protocol error),
and tags run on per consumer. `settle(cid, outcome, tags)` sends what the client did; only
delivered, unsettled tags of a consumer that is not pre-settled may be settled (anything else
is the caller's bug: `ValueError`). `cancel(cid)` asks the owner to stop; deliveries already
sent still arrive (the server requeues those its client no longer takes), unsettled tags
stay settleable, and the owner's `Cancelled` ends the consumer (`ConsumerGone`). An owner
whose queue went cancels on its own and drops the consumer's unsettled deliveries with it.

Definitions (the link to shard 0). `follow()` asks for the definitions feed; each
`Definitions` frame becomes `DefinitionsReceived`: the snapshot first (every definition as a
put, at one sequence), then changes in increasing sequence order (anything else breaks the
link); the server applies them (`Broker.apply_definitions`).

Asks (the link to shard 0). `ask(rid, request)` sends a client's definition step; the
owner's `Answer` becomes `Answered` (the feed sequence of the change, or a refusal's code);
an answer to no ask breaks the link.

Loss. When the link's socket is gone, `lost()` ends the session and returns `Lost`: the
sequences forwarded but not resolved (the server nacks their publishes: the owner may have
stored them, so a publisher that resends may duplicate, as with RabbitMQ's nack when a queue
is lost) and the consumers that were open (the server cancels them, as RabbitMQ cancels a
consumer whose queue went; the owner requeues their unsettled deliveries).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from ringmq.core.asks import DefinitionRequest
from ringmq.core.deffeed import DefinitionChange
from ringmq.core.message import Message
from ringmq.shardlink.codec import (
    BATCH_BYTES,
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
    shard: int


@dataclass(frozen=True, slots=True)
class Refused:
    reason: str


@dataclass(frozen=True, slots=True)
class Resolved:
    first: int
    upto: int
    rejected: dict[int, int]
    """Sequence -> the owner's code, for those of `first..upto` refused."""


@dataclass(frozen=True, slots=True)
class ConsumerReady:
    cid: int


@dataclass(frozen=True, slots=True)
class ConsumerRefused:
    cid: int
    code: int
    text: str


@dataclass(frozen=True, slots=True)
class Delivered:
    cid: int
    first_tag: int
    entries: tuple[Delivery, ...]


@dataclass(frozen=True, slots=True)
class ConsumerGone:
    """The owner stopped the consumer: its answer to `cancel`, or its queue went."""

    cid: int
    reason: str
    dropped: tuple[int, ...]
    """Unsettled tags the owner no longer holds (nothing to settle: its queue went)."""


@dataclass(frozen=True, slots=True)
class DefinitionsReceived:
    """Shard 0's definitions: the snapshot (every definition; what is not in it is gone),
    or the changes made after it, in order."""

    snapshot: bool
    changes: tuple[DefinitionChange, ...]


@dataclass(frozen=True, slots=True)
class Answered:
    rid: int
    seq: int
    """The feed sequence of the change shard 0 made (0 when refused)."""
    code: int
    """0: made; else the refusal's AMQP reply code."""
    text: str


@dataclass(frozen=True, slots=True)
class Lost:
    first: int
    upto: int
    """Sequences `first..upto` were forwarded and not resolved (empty when first > upto)."""
    consumers: tuple[int, ...]
    asks: tuple[int, ...] = ()
    """The asks shard 0 had not answered."""


Event = (
    Opened
    | Refused
    | Resolved
    | ConsumerReady
    | ConsumerRefused
    | Delivered
    | ConsumerGone
    | DefinitionsReceived
    | Answered
)


@dataclass(slots=True)
class _Consumer:
    settled: bool
    credit: int
    ready: bool = False
    cancelled: bool = False  # this side asked the owner to stop
    gone: bool = False  # the owner stopped: nothing more arrives
    next_tag: int = 1
    unsettled: set[int] = field(default_factory=set)


class OriginSession:
    """One link to an owner shard, origin side (see the module docstring)."""

    def __init__(self, shard: int, secret: bytes, nonce: bytes | None = None) -> None:
        self.shard = shard
        self.owner: int | None = None
        self.closed = False
        self._reader = FrameReader()
        nonce = nonce if nonce is not None else os.urandom(16)
        self._out: list[bytes] = [encode(Hello(shard, nonce, hello_mac(secret, shard, nonce)))]
        self._batch: list[Entry] = []
        self._batch_bytes = 0
        self._batch_first = 1
        self.next_seq = 1
        """The sequence the next forwarded message gets."""
        self.resolved = 0
        """Every sequence up to this one is resolved."""
        self._consumers: dict[int, _Consumer] = {}
        self._next_cid = 1
        self.following = False
        """`follow` asked for the definitions feed."""
        self.definitions_seq: int | None = None
        """The sequence of the last definition change received (None: no snapshot yet)."""
        self._asked: set[int] = set()

    # definitions

    def follow(self) -> None:
        """Ask the owner (shard 0) for its definitions feed: `DefinitionsReceived` events, a
        snapshot first, then the changes as they are made."""
        self._check_open()
        if self.following:
            raise ValueError("the link follows the definitions already")
        self.following = True
        self._emit(Follow())

    def ask(self, rid: int, request: DefinitionRequest) -> None:
        """Ask the owner (shard 0) to make a client's definition step (`Answered` comes)."""
        self._check_open()
        if rid in self._asked:
            raise ValueError(f"ask {rid} is waiting already")
        self._asked.add(rid)
        self._emit(Ask(rid, request))

    # publishes

    def forward(self, vhost: str, queues: tuple[str, ...], message: Message) -> int:
        """Buffer `message` for the owner's `queues` of `vhost`; its link sequence."""
        self._check_open()
        seq = self.next_seq
        self.next_seq = seq + 1
        batch = self._batch
        if not batch:
            self._batch_first = seq
        batch.append(Entry(vhost, queues, message))
        # 64 for the entry's own bytes: a batch also closes long before `MAX_ENTRIES`
        self._batch_bytes += len(message.body) + len(message.properties_bin) + 64
        if self._batch_bytes >= BATCH_BYTES:
            self._close_batch()
        return seq

    @property
    def unresolved(self) -> int:
        """How many forwarded messages wait for their outcome."""
        return self.next_seq - 1 - self.resolved

    # consumers

    def subscribe(
        self,
        vhost: str,
        queue: str,
        credit: int,
        *,
        settled: bool = False,
        exclusive: bool = False,
        arguments: dict[str, Any] | None = None,
    ) -> int:
        """Ask the owner for a consumer on `queue` of `vhost`, with `credit` deliveries
        granted; its id (never reused on this link). `settled`: deliveries come pre-settled
        (a no-ack consumer); `exclusive` and `arguments` as the client's consume gave them
        (an argument with no field table type raises `TypeError` or `ValueError`, and
        nothing is asked)."""
        self._check_open()
        cid = self._next_cid
        # encoded first: arguments that cannot be sent leave no consumer behind
        self._emit(Subscribe(cid, vhost, queue, credit, settled, exclusive, arguments or {}))
        self._next_cid = cid + 1
        self._consumers[cid] = _Consumer(settled, credit)
        return cid

    def grant(self, cid: int, add: int) -> None:
        """Let the owner send `add` more deliveries to consumer `cid`."""
        c = self._consumers.get(cid)
        if c is None or add <= 0 or c.cancelled or c.gone:
            return  # ended (or ending): credit means nothing any more
        c.credit += add
        self._emit(Credit(cid, add))

    def credit(self, cid: int) -> int:
        """Deliveries the owner may still send to `cid`."""
        return self._consumer(cid).credit

    def settle(self, cid: int, outcome: Outcome, tags: list[int]) -> None:
        """Send what the client did with deliveries `tags` of consumer `cid`."""
        c = self._consumer(cid)
        if c.settled:
            raise ValueError(f"consumer {cid} takes pre-settled deliveries")
        missing = [t for t in tags if t not in c.unsettled]
        if missing or len(set(tags)) != len(tags):
            raise ValueError(f"consumer {cid}: tags {missing or tags} are not outstanding")
        c.unsettled.difference_update(tags)
        self._emit(Settle(cid, outcome, _ranges(sorted(tags))))
        self._forget_if_done(cid, c)

    def cancel(self, cid: int) -> None:
        """Ask the owner to stop deliveries to `cid`; its `ConsumerGone` answers. Deliveries
        already on their way still arrive; unsettled tags stay settleable."""
        c = self._consumers.get(cid)
        if c is None or c.cancelled or c.gone:
            return  # already ended by the owner (its queue went), or asked already
        c.cancelled = True
        self._emit(Cancel(cid))

    def unsettled(self, cid: int) -> frozenset[int]:
        """Tags of `cid` delivered and not settled yet."""
        c = self._consumers.get(cid)
        return frozenset(c.unsettled) if c is not None else frozenset()

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
        """The bytes to write to the link now (forwarded messages included)."""
        if self._batch:
            self._close_batch()
        out = b"".join(self._out)
        self._out.clear()
        return out

    def lost(self) -> Lost:
        """The link's socket is gone: what was not resolved and which consumers were open."""
        self.closed = True
        self._batch.clear()
        consumers = tuple(cid for cid, c in self._consumers.items() if not c.gone)
        self._consumers.clear()
        out = Lost(self.resolved + 1, self.next_seq - 1, consumers, tuple(sorted(self._asked)))
        self._asked.clear()
        self.resolved = self.next_seq - 1
        return out

    def _handle(self, frame: Frame) -> list[Event]:
        match frame:
            case Welcome() if self.owner is None:
                self.owner = frame.shard
                return [Opened(frame.shard)]
            case Refuse():
                self.closed = True
                return [Refused(frame.reason)]
            case OutcomeFrame() if self.owner is not None:
                return [self._outcome(frame)]
            case Subscribed() if self.owner is not None:
                c = self._consumer_frame(frame.cid)
                c.ready = True
                return [ConsumerReady(frame.cid)]
            case SubscribeRefused() if self.owner is not None:
                self._consumer_frame(frame.cid)
                del self._consumers[frame.cid]
                return [ConsumerRefused(frame.cid, frame.code, frame.text)]
            case Deliveries() if self.owner is not None:
                return self._deliveries(frame)
            case Answer() if frame.rid in self._asked:
                self._asked.discard(frame.rid)
                return [Answered(frame.rid, frame.seq, frame.code, frame.text)]
            case Definitions() if self.following and self.owner is not None:
                return [self._definitions(frame)]
            case Cancelled() if self.owner is not None:
                c = self._consumer_frame(frame.cid)
                c.gone = True
                c.credit = 0
                dropped = () if frame.kept else tuple(sorted(c.unsettled))
                if not frame.kept:
                    c.unsettled.clear()  # the owner no longer holds them (its queue went)
                self._forget_if_done(frame.cid, c)
                return [ConsumerGone(frame.cid, frame.reason, dropped)]
        raise ProtocolError(f"unexpected {type(frame).__name__} on an origin link")

    def _definitions(self, frame: Definitions) -> DefinitionsReceived:
        # a snapshot first and once, all at one sequence; then changes in increasing order
        seqs = [c.seq for c in frame.changes]
        last = self.definitions_seq
        if frame.snapshot:
            if last is not None or len(set(seqs)) > 1:
                raise ProtocolError("a second definitions snapshot, or one of several sequences")
            self.definitions_seq = seqs[0] if seqs else 0
        else:
            if last is None:
                raise ProtocolError("definition changes before the snapshot")
            if any(b <= a for a, b in zip([last, *seqs], seqs, strict=False)):
                raise ProtocolError("definition changes out of order")
            if seqs:
                self.definitions_seq = seqs[-1]
        return DefinitionsReceived(frame.snapshot, frame.changes)

    def _outcome(self, frame: OutcomeFrame) -> Resolved:
        first = self.resolved + 1
        if not self.resolved <= frame.upto < self.next_seq:
            raise ProtocolError(f"outcome up to {frame.upto} of {self.next_seq - 1} forwarded")
        rejected = dict(frame.rejected)
        if any(not first <= seq <= frame.upto for seq in rejected):
            raise ProtocolError("a rejection outside the outcome's range")
        self.resolved = frame.upto
        return Resolved(first, frame.upto, rejected)

    def _deliveries(self, frame: Deliveries) -> list[Event]:
        c = self._consumer_frame(frame.cid)
        n = len(frame.entries)
        if n > c.credit:
            raise ProtocolError(f"{n} deliveries to consumer {frame.cid} with credit {c.credit}")
        if frame.first_tag != c.next_tag:
            raise ProtocolError(f"consumer {frame.cid}: tag {frame.first_tag}, {c.next_tag} due")
        c.credit -= n
        c.next_tag += n
        if not c.settled:
            c.unsettled.update(range(frame.first_tag, frame.first_tag + n))
        return [Delivered(frame.cid, frame.first_tag, frame.entries)]

    def _consumer(self, cid: int) -> _Consumer:
        c = self._consumers.get(cid)
        if c is None:
            raise ValueError(f"no consumer {cid} on this link")
        return c

    def _consumer_frame(self, cid: int) -> _Consumer:
        c = self._consumers.get(cid)
        if c is None:
            raise ProtocolError(f"no consumer {cid} on this link")
        return c

    def _forget_if_done(self, cid: int, c: _Consumer) -> None:
        if c.gone and not c.unsettled:
            del self._consumers[cid]

    def _check_open(self) -> None:
        if self.closed:
            raise ValueError("the link is closed")

    def _close_batch(self) -> None:
        self._out.append(encode(Forward(self._batch_first, tuple(self._batch))))
        self._batch = []
        self._batch_bytes = 0

    def _emit(self, frame: Frame) -> None:
        if self._batch:
            self._close_batch()  # a frame after forwards keeps its place behind them
        self._out.append(encode(frame))


def _ranges(tags: list[int]) -> tuple[tuple[int, int], ...]:
    out: list[tuple[int, int]] = []
    for t in tags:
        if out and out[-1][1] + 1 == t:
            out[-1] = (out[-1][0], t)
        else:
            out.append((t, t))
    return tuple(out)
