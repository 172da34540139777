"""The links from this shard to the owners of other shards' queues (the origin side).

Theory of operation
-------------------
After every batch (`Connections.flush`), `after_batch` drains what the core noted for other
shards' queues (`Broker.drain_forwards`: publishes and dead letters, in order) and hands each
to the link to its owner (`OriginSession.forward`, ringmq.shardlink: sequenced on the link,
closed into `Forward` frames when the link writes), then writes what each link has to send.
There is one link per owner, opened on first use to the owner's link listener (`peers`: its
shard index -> host and port, loopback) with this shard's index and the shards' shared
secret; while it connects, its forwards wait in its session. A link's sequences go out in the
order they were drained, so a publisher's messages to one queue keep their order.

Answers: a `Resolved` event settles the link sequences `first..upto`; those that carried a
confirmed publish (`ForwardPublish.seq` > 0) are answered to the core in one call for what
one read brought (`Broker.forwards_resolved`): stored, or refused with the owner's code turned
back into the confirm's reason (`ringmq.shardlink.codes.reason_of`), applied as one batch.

Consumers: the core's subscriptions of copies (core/remotes.py: `Broker.drain_remote_ops`,
drained with the forwards) become link consumers (`OriginSession.subscribe`, `settle` followed
by a `grant` of as many deliveries as were settled, `cancel`); the owner's deliveries go to
`Broker.remote_delivered`, and its end of a consumer (its answer to a cancel, its queue gone,
its refusal) to `Broker.remote_gone`.

Definitions: a shard other than 0 follows shard 0's definitions (`follow`, called at start):
the link to shard 0 asks for its feed (`OriginSession.follow`) and each `DefinitionsReceived`
is applied as one core call (`Broker.apply_definitions`: the snapshot replaces what is here,
the changes after it apply in order; core/defcopies.py). A lost link to shard 0 is made again
and followed again (a new snapshot) `RETRY_S` later, until the server stops. Such a shard
also asks shard 0 to make its clients' definition steps (`Broker.defer_definitions`,
core/asks.py): the asks drained after each batch go on the link to shard 0; an answer that
made the change is handed to the core (`definition_answered`) once this shard has applied
the feed up to the change's sequence (held until then), a refusal at once. Asks that cannot
be sent (no link to shard 0) or whose link goes are refused (`UNREACHABLE`: the client may
declare again; one that shard 0 made meanwhile is then an equivalent redeclare).

Loss: a link whose connect fails, whose socket drops, whose hello the owner refuses, or that
the owner has not welcomed within `OPEN_TIMEOUT_S` is closed; every sequence it had not
resolved is refused (`LINK_LOST`: the owner may have stored it, so a publisher that resends
may duplicate, as after RabbitMQ nacks a publish to a queue it lost), its consumers end (the
owner requeues what they had not settled), and the next forward to that owner opens a new
link, at most one attempt per `RETRY_S` (forwards drained meanwhile are refused at once, not
buffered without bound). An owner that stops answering on an open socket (a stopped or wedged
process) is found by its silence: a link whose owner has sent nothing for `stall_s` while
forwards wait for it is dropped as lost (checked every `stall_s / 4`; an idle link, or one
that only waits for deliveries, is left alone: silence is all an owner with nothing to say
sends).

Owns the links. Owned by the loop thread.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Final, cast

from ringmq.core.effects import Effect
from ringmq.core.errors import Condition
from ringmq.core.remotes import RemoteCancel, RemoteOp, RemoteSettle, RemoteSubscribe
from ringmq.core.session import SettleKind
from ringmq.shardlink.codec import Outcome
from ringmq.shardlink.codes import condition_of, reason_of
from ringmq.shardlink.origin import (
    Answered,
    ConsumerGone,
    ConsumerRefused,
    DefinitionsReceived,
    Delivered,
    Lost,
    OriginSession,
    Refused,
    Resolved,
)

if TYPE_CHECKING:
    from ringmq.core.broker import Broker
    from ringmq.core.forwarding import ForwardPublish

log = logging.getLogger(__name__)

LINK_LOST: Final = "shard-link-lost"
"""The confirm reason of a forward whose link went before the owner answered."""
RETRY_S: Final = 1.0
"""Least time between two connects to one owner."""
OPEN_TIMEOUT_S: Final = 10.0
"""A link the owner has not welcomed by then (connect and hello) is dropped."""
STALL_S: Final = 60.0
"""A link whose owner has said nothing for this long while forwards wait for its answer is
dropped (RabbitMQ's inter-node net_ticktime is 60 s too)."""
UNREACHABLE: Final = (
    "shard 0 could not be reached: the definition change was not made here; try again"
)
"""The refusal of an ask that could not be sent or whose link went."""

_Release = Callable[[Callable[[], list[Effect]]], None]
_Call = Callable[[], list[Effect]]
_OUTCOMES: Final = {
    SettleKind.ACK: Outcome.ACK,
    SettleKind.REQUEUE: Outcome.REQUEUE,
    SettleKind.RELEASE: Outcome.REQUEUE,
    SettleKind.REJECT: Outcome.REJECT,
}


@dataclass(slots=True, eq=False)
class _Link(asyncio.Protocol):
    owner: int
    session: OriginSession
    waiting: dict[int, tuple[int, int, int]] = field(default_factory=dict)
    """Link sequence -> (conn_id, channel, publish seq) of a confirm that waits for it."""
    subs: dict[int, int] = field(default_factory=dict)
    """Link consumer id -> the core's subscription."""
    cancelled: set[int] = field(default_factory=set)
    """Link consumers this side cancelled."""
    transport: asyncio.Transport | None = None
    closed: bool = False
    heard: float = 0.0
    """When the owner last sent something, or forwards last began to wait (loop time)."""
    on_data: Callable[[_Link, bytes], None] | None = None
    on_lost: Callable[[_Link], None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses: no isinstance test
        self.transport = cast("asyncio.Transport", transport)
        self.flush()

    def data_received(self, data: bytes) -> None:
        self.heard = asyncio.get_running_loop().time()
        if self.on_data is not None:
            self.on_data(self, data)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.on_lost is not None:
            self.on_lost(self)

    def flush(self) -> None:
        if self.transport is not None and not self.closed:
            out = self.session.data_to_send()
            if out:
                self.transport.write(out)


class ShardLinks:
    """This shard's links to other shards (see the module docstring).

    Args:
        broker: the core (`drain_forwards`, `forwards_resolved`, the remote consumers' calls).
        loop: the server's loop.
        release: runs a function producing effects as one server batch (applies, flushes).
        shard: this shard's index (the links' hello).
        secret: the shards' shared secret.
        peers: owner shard index -> (host, port) of its link listener.
        now_ms: the server's wall clock (the calls that apply definitions take it).
    """

    def __init__(
        self,
        broker: Broker,
        loop: asyncio.AbstractEventLoop,
        release: _Release,
        shard: int,
        secret: bytes,
        peers: dict[int, tuple[str, int]],
        now_ms: Callable[[], int],
    ) -> None:
        self.broker = broker
        self.now_ms = now_ms
        self.loop = loop
        self.release = release
        self.shard = shard
        self.secret = secret
        self.peers = dict(peers)
        self._links: dict[int, _Link] = {}
        self._subs: dict[int, tuple[_Link, int]] = {}  # the core's subscription -> link, cid
        self.stall_s = STALL_S
        """See the module docstring (tests shorten it)."""
        self._watching: asyncio.TimerHandle | None = None
        self._next_connect: dict[int, float] = {}
        self._closing = False
        self._following = False
        self._held: list[tuple[int, int]] = []
        """(feed sequence, ask id) of asks shard 0 made, waiting until this shard applies it."""

    def follow(self) -> None:
        """Follow shard 0's definitions (module docstring), now and after every lost link."""
        if not self._following:
            self.broker.defer_definitions()
        self._following = True
        if self._closing:
            return
        link = self._link(0)
        if link is None:  # too soon after the last connect: again when it may be
            self.loop.call_later(RETRY_S, self.follow)
            return
        if not link.session.following:
            link.session.follow()
            link.flush()

    def after_batch(self) -> None:
        """End of a batch: forward what the core noted, write what the links have."""
        broker = self.broker
        forwards = broker.drain_forwards()
        ops = broker.drain_remote_ops()
        asks = broker.drain_definition_asks() if self._following else []
        if not forwards and not ops and not asks:
            return
        touched: dict[int, _Link] = {}
        if asks:
            link = self._link(0)
            if link is None:
                failed = [rid for rid, _ in asks]
                self.loop.call_soon(self._refuse_asks, failed)
            else:
                for rid, request in asks:
                    link.session.ask(rid, request)
                touched[0] = link
        for op in ops:
            link = self._operate(op)
            if link is not None:
                touched[link.owner] = link
        refused: list[ForwardPublish] = []
        for f in forwards:
            link = touched.get(f.shard) or self._link(f.shard)
            if link is None:
                refused.append(f)
                continue
            touched[f.shard] = link
            if not link.session.unresolved:  # forwards begin to wait: the silence counts now
                link.heard = self.loop.time()
            seq = link.session.forward(f.vhost, (f.queue,), f.message)
            if f.seq:
                link.waiting[seq] = (f.conn_id, f.channel, f.seq)
        for link in touched.values():
            link.flush()
        if touched and self._watching is None:
            self._watching = self.loop.call_later(self.stall_s / 4, self._watch)
        if refused:
            waiting = [(f.conn_id, f.channel, f.seq) for f in refused if f.seq]
            if waiting:
                self.loop.call_soon(self._refuse, waiting, LINK_LOST)

    def _operate(self, op: RemoteOp) -> _Link | None:
        # One operation of the core's subscriptions on its link (None: nothing to write).
        if isinstance(op, RemoteSubscribe):
            link = self._link(op.shard)
            if link is None:  # no link to the owner now: the consumers hear it ended
                self.loop.call_soon(self.release, lambda: self.broker.remote_gone(op.sub))
                return None
            cid = link.session.subscribe(op.vhost, op.queue, op.credit)
            link.subs[cid] = op.sub
            self._subs[op.sub] = (link, cid)
            return link
        found = self._subs.get(op.sub)
        if found is None or found[0].closed:
            return None  # ended by the owner or the link: nothing to tell it
        link, cid = found
        session = link.session
        if isinstance(op, RemoteCancel):
            session.cancel(cid)
            link.cancelled.add(cid)
            return link
        assert isinstance(op, RemoteSettle)
        outstanding = session.unsettled(cid)
        tags = [t for t in op.tags if t in outstanding]
        if tags:
            session.settle(cid, _OUTCOMES[op.outcome], tags)
            session.grant(cid, len(tags))
        if cid not in link.subs and not session.unsettled(cid):
            del self._subs[op.sub]  # ended, and its last delivery settled
        return link

    def _link(self, owner: int) -> _Link | None:
        link = self._links.get(owner)
        if link is not None and not link.closed:
            return link
        peer = self.peers.get(owner)
        now = self.loop.time()
        if peer is None or self._closing or now < self._next_connect.get(owner, 0.0):
            return None
        self._next_connect[owner] = now + RETRY_S
        link = _Link(owner, OriginSession(self.shard, self.secret))
        link.on_data = self._received
        link.on_lost = self._lost
        self._links[owner] = link
        self.loop.create_task(self._connect(link, *peer), name=f"shard link to {owner}")
        return link

    async def _connect(self, link: _Link, host: str, port: int) -> None:
        self.loop.call_later(OPEN_TIMEOUT_S, self._check_open, link)
        try:
            await asyncio.wait_for(
                self.loop.create_connection(lambda: link, host, port), OPEN_TIMEOUT_S
            )
        except (OSError, TimeoutError) as exc:
            log.warning("shard link to shard %d (%s:%d): %r", link.owner, host, port, exc)
            self._lost(link)

    def _watch(self) -> None:
        # Drop the links whose owner stays silent while forwards wait (module docstring).
        self._watching = None
        now = self.loop.time()
        for link in list(self._links.values()):
            if link.session.unresolved and now - link.heard > self.stall_s:
                log.warning(
                    "shard link to shard %d: no answer in %.0f s with %d forwards waiting",
                    link.owner,
                    now - link.heard,
                    link.session.unresolved,
                )
                self._drop(link)
        if self._links and not self._closing:
            self._watching = self.loop.call_later(self.stall_s / 4, self._watch)

    def _check_open(self, link: _Link) -> None:
        if not link.closed and link.session.owner is None:
            log.warning("shard link to shard %d: no welcome in %.0f s", link.owner, OPEN_TIMEOUT_S)
            self._drop(link)

    def _received(self, link: _Link, data: bytes) -> None:
        answered: list[tuple[int, int, int, str | None]] = []
        calls: list[_Call] = []
        broker = self.broker
        for ev in link.session.receive_data(data):
            if isinstance(ev, Resolved):
                for seq in range(ev.first, ev.upto + 1):
                    who = link.waiting.pop(seq, None)
                    if who is not None:
                        code = ev.rejected.get(seq)
                        answered.append((*who, None if code is None else reason_of(code)))
            elif isinstance(ev, Delivered):
                sub = link.subs.get(ev.cid)
                if sub is not None:
                    entries = [(d.message, d.redelivered, d.delivery_count) for d in ev.entries]
                    calls.append(partial(broker.remote_delivered, sub, ev.first_tag, entries))
            elif isinstance(ev, DefinitionsReceived):
                apply = partial(
                    broker.apply_definitions,
                    ev.changes,
                    shard=self.shard,
                    now_ms=self.now_ms(),
                    snapshot=ev.snapshot,
                )
                calls.append(apply)
                calls += self._release_held(link)
            elif isinstance(ev, Answered):
                if ev.code:
                    condition = condition_of(ev.code)
                    calls.append(partial(broker.definition_answered, ev.rid, condition, ev.text))
                else:
                    self._held.append((ev.seq, ev.rid))
                    calls += self._release_held(link)
            elif isinstance(ev, ConsumerGone | ConsumerRefused):
                calls += self._consumer_ended(link, ev)
            elif isinstance(ev, Refused):
                log.warning("shard link to shard %d refused: %s", link.owner, ev.reason)
        if answered:
            calls.insert(0, partial(self._answer, answered))
        if calls:
            self.release(lambda: [e for call in calls for e in call()])
        if link.session.closed:
            self._drop(link)
        else:
            link.flush()

    def _release_held(self, link: _Link) -> list[_Call]:
        # the asks whose change this shard has applied now: the feed received on the link to
        # shard 0 (`link`), whose apply calls come before these in the read's calls
        applied = link.session.definitions_seq or 0
        ready = [rid for seq, rid in self._held if seq <= applied]
        if not ready:
            return []
        self._held = [(seq, rid) for seq, rid in self._held if seq > applied]
        return [partial(self.broker.definition_answered, rid, None) for rid in ready]

    def _refuse_asks(self, rids: list[int]) -> None:
        broker = self.broker
        condition = Condition.PRECONDITION_FAILED
        self.release(
            lambda: [
                e for rid in rids for e in broker.definition_answered(rid, condition, UNREACHABLE)
            ]
        )

    def _consumer_ended(self, link: _Link, ev: ConsumerGone | ConsumerRefused) -> list[_Call]:
        sub = link.subs.pop(ev.cid, None)
        if sub is None:
            return []
        if isinstance(ev, ConsumerRefused):
            log.warning("shard link to shard %d: consumer refused: %s", link.owner, ev.text)
        kept = isinstance(ev, ConsumerGone) and ev.cid in link.cancelled and not ev.dropped
        link.cancelled.discard(ev.cid)
        if not kept or not link.session.unsettled(ev.cid):
            self._subs.pop(sub, None)
        return [partial(self.broker.remote_gone, sub, kept=kept)]

    def _answer(self, answered: list[tuple[int, int, int, str | None]]) -> list[Effect]:
        return self.broker.forwards_resolved(answered)

    def _refuse(self, waiting: list[tuple[int, int, int]], reason: str) -> None:
        self.release(lambda: self._answer([(*w, reason) for w in waiting]))

    def _lost(self, link: _Link) -> None:
        if link.closed:
            return
        lost: Lost = link.session.lost()
        link.closed = True
        waiting = [link.waiting[s] for s in range(lost.first, lost.upto + 1) if s in link.waiting]
        link.waiting.clear()
        subs = list(link.subs.values())
        link.subs.clear()
        for sub in subs:
            self._subs.pop(sub, None)
        if subs:
            self.loop.call_soon(
                self.release, lambda: [e for sub in subs for e in self.broker.remote_gone(sub)]
            )
        if self._links.get(link.owner) is link:
            del self._links[link.owner]
        if link.owner == 0 and self._following:
            unanswered = [*lost.asks, *(rid for _, rid in self._held)]
            self._held.clear()
            if unanswered:
                self.loop.call_soon(self._refuse_asks, unanswered)
            if not self._closing:
                log.warning("shard link to shard 0 lost: following its definitions again")
                self.loop.call_later(RETRY_S, self.follow)
        if waiting:
            log.warning(
                "shard link to shard %d lost: %d confirmed publishes refused",
                link.owner,
                len(waiting),
            )
            self._refuse(waiting, LINK_LOST)

    def _drop(self, link: _Link) -> None:
        transport = link.transport
        self._lost(link)
        if transport is not None:
            transport.close()

    def close(self) -> None:
        """The server stops: close every link (what waits is refused)."""
        self._closing = True
        if self._watching is not None:
            self._watching.cancel()
            self._watching = None
        for link in list(self._links.values()):
            self._drop(link)
