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

Pure: no I/O, no clock.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from ringmq.core.exchange import Exchange
from ringmq.core.queue import DeadLetter, PublishOutcome
from ringmq.core.routing import ExchangeType
from ringmq.core.state import State
from ringmq.core.texts import as_str
from ringmq.core.vhost import QueueEntity, VHost


class DeadLetters:
    """Routes queues' dead letters (see the module docstring)."""

    def __init__(self, state: State) -> None:
        self.state = state

    def drain(self, q: QueueEntity, now_ms: int) -> None:
        """Route what `q` dead-lettered since the last drain."""
        dead = q.queue.drain_dead_letters()
        if not dead:
            return
        vh = self.state.vhosts.get(q.vhost)
        if vh is None:
            return
        for item in dead:
            dlx = vh.exchanges.get(item.exchange)
            if dlx is None:
                continue
            self._dead_letter(vh, dlx, item, now_ms)

    def _dead_letter(self, vh: VHost, dlx: Exchange, dead: DeadLetter, now_ms: int) -> None:
        # Route one dead letter to its DLX with RabbitMQ's `x-death` bookkeeping.
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
        rk = dead.routing_key if dead.routing_key is not None else msg.routing_key
        new = msg.reheadered(
            headers, exchange=dlx.name, routing_key=rk, drop_expiration=True, timestamp_ms=now_ms
        )
        targets = vh.route(dlx, rk, headers) if dlx.type is not ExchangeType.DELAYED else ()
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
            if not target.deleted and target.stream is not None:
                target.stream.append((new,), now_ms)  # a stream takes dead letters too
                state.dirty[id(target)] = target
            elif not target.deleted:
                outcome = target.queue.publish(new, now_ms)
                if outcome is PublishOutcome.SCHEDULED:
                    state.track_timers(target)
                if new.persistent and target.durable and durability is not None:
                    durability.published(target, new, outcome, now_ms)
                state.dirty[id(target)] = target
