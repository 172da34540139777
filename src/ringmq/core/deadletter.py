"""Dead-lettering: a queue's dead letters routed to its dead-letter exchange, with `x-death`.

Theory of operation: the engine `Queue` collects the messages it dead-letters (expired,
rejected, over a limit, over the delivery limit) in its outbox; after each dispatch of a queue
that has a dead-letter exchange, `DeadLetters.drain` takes them and routes each one, as
RabbitMQ's `rabbit_dead_letter` does: the message gets an `x-death` entry (count, reason,
queue, time, exchange, routing keys; one entry per (queue, reason), counted up when it dies
there again) and the `x-first-death-*` / `x-last-death-*` headers, its expiration is dropped
(kept as `original-expiration` in the entry), and it is published to the queues the DLX routes
it to, except to a queue it already died in when no client rejection is in the cycle (RabbitMQ
drops such cycles). The new headers are encoded in the message's own protocol form
(`Message.reheadered`). Targets are marked dirty for the flush in progress.

A letter for an Artemis dead-letter or expiry address (`DeadLetter.address`) goes, with the
same headers plus Artemis' `_AMQ_ORIG_ADDRESS` / `_AMQ_ORIG_QUEUE`, to what the address names
in ringmq's model: an exchange of that name (a broker.xml multicast address) routes it with
its routing key, else the queue of that name (an anycast address), else nowhere (Artemis
drops a letter whose address has no queue). With `auto-create-*-resources` the queue
`prefix + queue + suffix` is created (durable) when missing and receives it as well, as
Artemis' auto-created queue filtered on the original address does.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any

from ringmq.core.entities import QueueEntity
from ringmq.core.exchange import Exchange
from ringmq.core.forwarding import Forwards
from ringmq.core.queue import DeadLetter, PublishOutcome
from ringmq.core.routing import ExchangeType
from ringmq.core.state import State
from ringmq.core.texts import as_str
from ringmq.core.vhost import VHost

CreateQueue = Callable[..., QueueEntity]
"""`Topology.create_queue`: (vhost, name, *, durable, now_ms) -> the new queue."""


class DeadLetters:
    """Routes queues' dead letters (see the module docstring)."""

    def __init__(
        self,
        state: State,
        create_queue: CreateQueue | None = None,
        forwards: Forwards | None = None,
    ) -> None:
        self.state = state
        self.create_queue = create_queue
        """Creates the auto-created dead-letter and expiry queues (`Topology.create_queue`)."""
        self.forwards = forwards if forwards is not None else Forwards()
        """Dead letters for other shards' queues (core/forwarding.py)."""

    def drain(self, q: QueueEntity, now_ms: int) -> None:
        """Route what `q` dead-lettered since the last drain."""
        dead = q.queue.drain_dead_letters()
        if not dead:
            return
        vh = self.state.vhosts.get(q.vhost)
        if vh is None:
            return
        for item in dead:
            if item.address:
                self._dead_letter(vh, None, item, now_ms)
                continue
            dlx = vh.exchanges.get(item.exchange)
            if dlx is None:
                continue
            self._dead_letter(vh, dlx, item, now_ms)

    def _address_targets(
        self, vh: VHost, dead: DeadLetter, headers: dict[str, Any], now_ms: int
    ) -> tuple[str, str, list[QueueEntity]]:
        # (exchange, routing key, queues) of a letter for an Artemis address (module doc).
        msg = dead.message
        address = dead.exchange
        targets: list[QueueEntity] = []
        exchange, rk = "", address
        x = vh.exchanges.get(address) if address else None
        if x is not None and x.type is not ExchangeType.DELAYED:
            exchange, rk = address, msg.routing_key
            targets.extend(vh.route(x, rk, headers))
        elif (q := vh.queues.get(address)) is not None:
            targets.append(q)
        extra = dead.address_queue
        if extra is not None:
            q = vh.queues.get(extra)
            if q is None and self.create_queue is not None:
                q = self.create_queue(vh.name, extra, durable=True, now_ms=now_ms)
            if q is not None and all(t is not q for t in targets):
                targets.append(q)
        return exchange, rk, targets

    def _dead_letter(self, vh: VHost, dlx: Exchange | None, dead: DeadLetter, now_ms: int) -> None:
        # Route one dead letter to its DLX (None: its Artemis address) with RabbitMQ's
        # `x-death` bookkeeping.
        msg = dead.message
        reason = str(dead.reason)
        qname = dead.queue
        headers = dict(msg.headers or {})
        routing_keys = [msg.routing_key]
        cc = headers.get("CC")
        if isinstance(cc, list):
            routing_keys.extend(str(k) for k in cc)
        deaths = [d for d in headers.get("x-death", []) if isinstance(d, dict)]
        rejected_in_history = any(as_str(d.get("reason")) == "rejected" for d in deaths)
        entry: dict[str, Any] | None = None
        for d in deaths:
            if as_str(d.get("queue")) == qname and as_str(d.get("reason")) == reason:
                entry = d
                break
        if entry is not None:
            deaths.remove(entry)
            entry = dict(entry)
            entry["count"] = int(entry.get("count", 0)) + 1
            entry["time"] = datetime.fromtimestamp(now_ms // 1000, UTC)
        else:
            entry = {
                "count": 1,
                "reason": reason,
                "queue": qname,
                "time": datetime.fromtimestamp(now_ms // 1000, UTC),
                "exchange": msg.exchange,
                "routing-keys": routing_keys,
            }
            expiration = msg.expiration_text()
            if expiration is not None:
                entry["original-expiration"] = expiration
        deaths.insert(0, entry)
        headers["x-death"] = deaths
        headers.setdefault("x-first-death-reason", reason)
        headers.setdefault("x-first-death-queue", qname)
        headers.setdefault("x-first-death-exchange", msg.exchange)
        headers["x-last-death-reason"] = reason
        headers["x-last-death-queue"] = qname
        headers["x-last-death-exchange"] = msg.exchange
        targets: Iterable[QueueEntity]
        if dlx is None:
            headers.setdefault("_AMQ_ORIG_ADDRESS", msg.exchange or msg.routing_key)
            headers.setdefault("_AMQ_ORIG_QUEUE", qname)
            exchange, rk, targets = self._address_targets(vh, dead, headers, now_ms)
        else:
            exchange = dlx.name
            rk = dead.routing_key if dead.routing_key is not None else msg.routing_key
            targets = vh.route(dlx, rk, headers) if dlx.type is not ExchangeType.DELAYED else ()
        new = msg.reheadered(
            headers, exchange=exchange, routing_key=rk, drop_expiration=True, timestamp_ms=now_ms
        )
        state = self.state
        state.stats["dead_lettered"] += 1
        durability = state.durability
        for target in targets:
            # RabbitMQ drops a dead letter that would cycle back to a queue it already died
            # in, unless a client rejection is part of the cycle.
            if (
                not rejected_in_history
                and reason != "rejected"
                and any(as_str(d.get("queue")) == target.name for d in deaths)
            ):
                continue
            if target.deleted:
                continue
            if target.owner is not None:  # another shard's queue: its owner takes it
                self.forwards.forward(target, new, None, 0, 0)
                continue
            if target.stream is not None:
                target.stream.append((new,), now_ms)  # a stream takes dead letters too
                state.dirty[id(target)] = target
            else:
                outcome = target.queue.publish(new, now_ms)
                if outcome is PublishOutcome.SCHEDULED:
                    state.track_timers(target)
                if new.persistent and target.durable and durability is not None:
                    durability.published(target, new, outcome, now_ms)
                state.dirty[id(target)] = target
