"""Publishing: the one pipeline every publish takes, from any protocol or the management API.

Theory of operation
-------------------
A protocol adapter builds the `Message` (reading only what its protocol form says is present),
checks the target with `exchange_for` (exists, not internal, the session may write to it;
cached per session) and calls `publish`, which returns what it did (`Published`, published.py:
the outcome and whether the message was persisted). The pipeline is that one method, in four
steps:

1. **classify**: count it; a publish while a resource alarm is on blocks its connection
   (`Resources.alarm_publish`); a transactional session only buffers it (applied at commit);
   a confirm session numbers it.
2. **route**: a message without headers or message id, to an exchange that does not delay,
   goes to the queues its exchange binds (the default exchange: the queue of that name); when
   that finds none, or for any other message, the full routing (core/fullroute.py): a
   delayed exchange holds a message with a positive `x-delay` until it is due (`holding`,
   visited by the broker's tick); a publish to `amq.rabbitmq.reply-to.*` goes straight to its reply
   consumer; otherwise the vhost routes it (bindings, alternate exchanges), widened by the CC
   and BCC headers (RabbitMQ sender-selected distribution: BCC is removed before delivery)
   and narrowed by de-duplication on message id. Nothing reached: counted unroutable, and
   handed back to a `mandatory` publisher (`Bounce`).
3. **enqueue each**: the per-queue step, the same for every path: the engine decides
   (enqueued, scheduled, refused by a limit), persistent messages reaching durable queues are
   journaled, the queue is marked dirty, and the step notes what the call must do next:
   dispatch before the next publish (`State.eager`: a ring, a limit, LVQ, priorities,
   browsing, or a TTL'd message), pause the publisher (RabbitMQ flow: a consumed unbounded
   queue over `FLOW_HIGH`), block it (Artemis BLOCK), or fail it (Artemis FAIL,
   `address_full`). A queue another shard owns is forwarded to it instead
   (core/forwarding.py). A plain queue (`Queue.plain`: no setting changes what a publish does;
   limits.py's `FastPaths` is the one rule) has nothing to note but publisher flow: the step
   tests that one property in front of the options.
4. **confirm** (`Confirms.confirm_publish`): refused -> negative confirm with the reason
   (`OVERFLOW`, `ADDRESS_FULL`; the store's failure: `STORE_FAILED`); persisted under
   delayed confirms -> held for the fsync; forwarded to other shards -> held until their
   owners answer too (`Confirms.confirm_joined`); else confirmed now, or, in a batch, released with
   the batch's other acks (`released`).

Every entry runs these steps through `publish`: `publishbatch.publish_batch` (a batch with
one confirm step, the streams API's bulk publish and the 0-9-1 publish runs; its bulk form,
core/ingest.py, is a guard in front of these steps) calls it per message with the batch's
`released` acks; callers that count, classify and confirm themselves run steps 2 and 3
(`classify=False`: `route`, for a transaction's commit and delayed messages now due;
`enqueue`, step 3 into given queues; `publish_without_session`, the management API).

Hot path: an AMQP 0-9-1 publish to a plain queue is one Python call into the core,
`publish_call` (the same function as a whole call: the call protocol's begin and end folded
in), then the queue engine's `publish`; everything optional (headers, delays, dedup, CC/BCC,
limits) is behind one test each, and the common results are shared constants (no object per
publish). Callers pass `publish` keywords; the batch loop calls it by position as `pipeline`,
which CPython specialises.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from ringmq.core.auth import Access
from ringmq.core.call import Calls
from ringmq.core.dedup import DUPL_ID_HEADER
from ringmq.core.delivery import Delivery
from ringmq.core.effects import Effect
from ringmq.core.entities import QueueEntity
from ringmq.core.errors import BrokerError, Condition
from ringmq.core.exchange import Exchange
from ringmq.core.forwarding import Forwards
from ringmq.core.fullroute import FullRoute
from ringmq.core.message import Message
from ringmq.core.published import (
    ADDRESS_FULL,
    DONE,
    DONE_STORED,
    HELD_BY_TX,
    NO_ROUTE,
    OVERFLOW,
    RESULTS,
    UNROUTABLE,
    Published,
    address_full,
)
from ringmq.core.queue import PublishOutcome
from ringmq.core.resources import FLOW_HIGH, FLOW_HIGH_BYTES, Resources
from ringmq.core.routing import ExchangeType
from ringmq.core.session import PublishMode, Session, TxPublish
from ringmq.core.settings import LimitAction
from ringmq.core.state import State
from ringmq.core.streamspec import ConfirmRule
from ringmq.core.transactions import STORE_FAILED, Confirms, Transactions
from ringmq.core.vhost import VHost

_REJECTED: Final = PublishOutcome.REJECTED
_SCHEDULED: Final = PublishOutcome.SCHEDULED
_TX: Final = PublishMode.TX
_DELAYED: Final = ExchangeType.DELAYED
_BLOCK: Final = LimitAction.BLOCK
_CONFIRM: Final = PublishMode.CONFIRM
_WRITTEN: Final = ConfirmRule.WRITTEN


class Publisher:
    """The publish pipeline (see the module docstring)."""

    def __init__(
        self,
        state: State,
        resources: Resources,
        delivery: Delivery,
        confirms: Confirms,
        calls: Calls,
        forwards: Forwards,
    ) -> None:
        self.state = state
        self.forwards = forwards
        """Publishes for other shards' queues (core/forwarding.py)."""
        self.calls = calls
        """The call protocol, for the one-publish call (`publish_call`)."""
        self.resources = resources
        self.delivery = delivery
        self.confirms = confirms
        self.max_message_size = state.config.max_message_size
        self.full_route = FullRoute(state, delivery)
        """Step 2 in full (core/fullroute.py)."""
        self.holding = self.full_route.holding
        """Delayed exchanges holding messages, by id (the broker's tick releases them)."""
        # The shared dicts the per-message steps read, bound once (they are never replaced):
        # one attribute hop less per publish (benchmarks/hotpath_bench.py).
        self._dirty = state.dirty
        self._stats = state.stats
        self._alarms_on = resources.alarms_on
        self._blocked_by = resources.blocked_by

    # ------------------------------------------------------------------ checks
    def exchange_for(
        self, s: Session, name: str, routing_key: str | None = None
    ) -> tuple[VHost, Exchange]:
        """The exchange a publish on `s` names, checked: exists, not internal, writable, and
        `routing_key` (when given) allowed by the user's topic permission on it, if any
        (`Session.check_topic`). An exchange with such a permission never joins the session's
        cached `write_ok`, so the callers that skip this call for a cached exchange (the 0-9-1
        publish) come here for each publish on it; the others that publish several messages
        after one call check each key with `Session.check_topic` when the name is not in
        `write_ok` (`publish_batch`)."""
        vh = s.vhost
        x = vh.exchanges.get(name)
        if x is None:
            raise BrokerError(Condition.NOT_FOUND, f"no exchange '{name}' in vhost '{vh.name}'")
        if x.internal:
            raise BrokerError(
                Condition.ACCESS_REFUSED,
                f"cannot publish to internal exchange '{name}' in vhost '{vh.name}'",
            )
        auth = self.state.auth
        if s.perm_generation != auth.generation or name not in s.write_ok:
            s.check(auth, Access.WRITE, "exchange", name)
            if not s.check_topic(auth, x, "write", routing_key):
                s.write_ok.add(name)
        return vh, x

    def check_size(self, size: int) -> None:
        """Refuse a body over the configured `max_message_size` (406, RabbitMQ's text)."""
        if size > self.max_message_size:
            raise BrokerError(
                Condition.PRECONDITION_FAILED,
                f"message size {size} is larger than configured max size {self.max_message_size}",
            )

    # ------------------------------------------------------------------ the pipeline
    def pipeline(
        self,
        msg: Message,
        session: Session | None,
        vhost: VHost,
        exchange: Exchange,
        now_ms: int,
        mandatory: bool = False,
        call: list[Effect] | None = None,
        classify: bool = True,
        queues: tuple[QueueEntity, ...] = (),
        released: list[int] | None = None,
    ) -> Published:
        """Publish `msg` on `session` to `exchange` of `vhost` (checked by `exchange_for`):
        steps 1 to 4. Returns what it did (`Published`: the outcome, for adapters whose
        protocol settles each publish, such as AMQP 1.0's accepted / released / rejected, and
        whether it was persisted).

        `classify=False` runs steps 2 and 3 only, for a caller that counts, classifies and
        confirms itself (`route`); `session` may then be None (no session: no return, no
        flow). `queues` given: they are the route (`enqueue`). `released`: a batch's acks
        (`publish_batch`): an accepted publish's confirm joins them instead of going out now.

        Raises BrokerError when an Artemis FAIL queue refuses a publish its publisher does
        not confirm (`address_full`): its send fails.

        `call` given: the publish is a whole call of its own (the call protocol's one-publish
        call, `call.py`), whose effects go in that list: begun here, ended by the call's rule
        on return, aborted on an exception (`publish_call`).

        Callers use `publish` (the same function, keywords only); the core's own per-message
        callers (`publish_batch`) pass the parameters by position under this name, and the
        AMQP 0-9-1 adapter's publish calls it as `publish_call` (see `publish`).
        """
        if call is not None:  # the one-publish call (call.py): its begin
            state = self.state
            nested = state.calling
            if nested:  # inside another call: the general form, which nests
                self.calls.begin(now_ms, call)
            else:  # `Calls.begin` written out (one Python call less per publish)
                state.calling = True
                state.out = call
                state.now_ms = now_ms
        try:
            seq = 0
            if classify:  # 1. classify
                assert session is not None
                self._stats["published"] += 1
                session.counts.received += 1
                conn_id: int | None = session.conn_id
                if self._alarms_on:
                    self.resources.alarm_publish(session.conn_id)
                mode = session.mode
                if mode is _TX:
                    assert session.tx is not None
                    session.tx.publishes.append(
                        TxPublish(exchange.name, msg.routing_key, mandatory, msg)
                    )
                    return HELD_BY_TX
                if mode is _CONFIRM:
                    seq = session.next_publish_seq()
            else:
                conn_id = session.conn_id if session is not None else None
            # 2. route (unless `enqueue` gave the queues): a guard for the common message (no
            # headers, no message id, not delayed) in front of the full routing (core/fullroute.py),
            # which the rest takes.
            if (
                not queues
                and msg.headers is None
                and msg.message_id is None
                and exchange.type is not _DELAYED
            ):
                if exchange.name:
                    queues = vhost.route(exchange, msg.routing_key, None)
                else:  # the default exchange: the queue of that name (reply-to names are none)
                    queues = vhost.direct.get(msg.routing_key) or vhost.route(
                        exchange, msg.routing_key, None
                    )
            if not queues:
                queues, msg, held = self.full_route.route(
                    vhost, exchange, msg, mandatory, session, now_ms
                )
                if not queues:  # held, answered by a reply-to consumer, a duplicate or unroutable
                    stored = bool(held)
                    if seq:
                        assert session is not None
                        self.confirms.confirm_publish(session, seq, None, stored, released)
                    if held is None:
                        return NO_ROUTE
                    return DONE_STORED if stored else DONE
            refused: str | None = None
            full: QueueEntity | None = None  # the Artemis FAIL queue that refused it
            stored = False
            written = False  # reached a stream whose confirm waits for the write, not the fsync
            owners = 0  # other shards' queues it was forwarded to (their answers are due)
            # 3. enqueue each: the engine decides; persistent messages reaching durable queues are
            # journaled; the queue is marked dirty; then what the call must do next.
            dirty = self._dirty
            persistent = msg.persistent
            for q in queues:
                if q.no_local is not None and q.no_local.excludes(conn_id):
                    continue  # a no-local consumer's queue: not its own connection's messages
                if q.owner is not None:  # another shard's queue: its owner enqueues it
                    self.forwards.forward(q, msg, conn_id, session.channel if session else 0, seq)
                    owners += 1
                    continue
                log = q.stream
                if log is not None:  # a stream: appended to its log, durable whatever the mode
                    if seq and self._store_failing():
                        refused = STORE_FAILED
                        continue
                    log.append((msg,), now_ms)
                    log.enforce(now_ms)
                    if self.state.durability is not None:
                        if self.state.config.stream_confirm == _WRITTEN:
                            written = True
                        else:
                            stored = True
                    dirty[id(q)] = q
                    continue
                if seq and persistent and q.durable and self._store_failing():
                    refused = STORE_FAILED  # not enqueued: it could not be made durable
                    continue
                engine = q.queue
                outcome = engine.publish(msg, now_ms)
                if outcome is _REJECTED:
                    limit = q.settings.limit
                    if limit is not None and limit.family == "address":
                        full = q
                        refused = ADDRESS_FULL  # it decides: the producer's send fails
                    elif refused is None:
                        refused = OVERFLOW
                    if msg.message_id is not None:
                        self.state.dedup.refused(vhost.name, exchange, q, msg.message_id)
                    hdrs = msg.headers
                    if hdrs and DUPL_ID_HEADER in hdrs:
                        address = exchange.name or msg.routing_key
                        self.state.dedup.refused_address(vhost.name, address, hdrs[DUPL_ID_HEADER])
                else:
                    if outcome is _SCHEDULED or msg.expiration_ms is not None:
                        self.state.timed[id(q)] = q
                    if persistent and q.durable:
                        dur = self.state.durability
                        if dur is None or dur.published(q, msg, outcome, now_ms, hold=seq != 0):
                            stored = True
                dirty[id(q)] = q
                if not engine.plain:
                    # The options (`Queue.plain` is the guard: a plain queue has none to act on).
                    st = q.settings
                    limit = st.limit
                    if limit is not None or st.lvq_key is not None or st.non_destructive:
                        # A ring counts what waits: deliver before the next publish. Nothing to do
                        # now when this queue is the only dirty one and has no consumer, no dead
                        # letters to move, no blocked publisher and no message that may expire
                        # (the flush would only mark it clean).
                        if (
                            q.consumers.all
                            or st.dead_letter_exchange is not None
                            or len(dirty) > 1
                            or self._blocked_by
                            or msg.expiration_ms is not None
                        ):
                            self.state.eager = True
                        if (
                            limit is not None
                            and limit.action is _BLOCK
                            and engine.over_limit
                            and conn_id is not None
                        ):
                            self.resources.block(conn_id, q)
                        continue
                    if st.max_priority:  # a higher priority may overtake: dispatch before it
                        self.state.eager = True
                # An unbounded queue (no limit, LVQ or non-destructive consumers): publisher flow.
                if conn_id is not None and q.consumers.fetchers:
                    counters = engine.counters
                    if counters.ready > FLOW_HIGH or counters.ready_bytes > FLOW_HIGH_BYTES:
                        self.resources.flow_requests[conn_id] = q
            # 4. confirm
            if seq:
                assert session is not None
                if owners:
                    self.confirms.confirm_joined(
                        session, seq, refused, stored, written, owners, released
                    )
                else:
                    self.confirms.confirm_publish(session, seq, refused, stored, released, written)
            elif full is not None and classify:
                # Artemis FAIL without confirms: the producer's send fails (a session error);
                # under confirms the negative confirm says it (RabbitMQ reject-publish is silent).
                # A limited queue was published to: the next command flushes.
                self.state.eager = True
                raise address_full(full)
            if refused is None:
                return DONE_STORED if stored else DONE
            return RESULTS[refused, stored]

        except BaseException:
            if call is not None:  # the call ends with the exception: aborted, not ended below
                call = None
                self.calls.abort()
            raise
        finally:
            # The one-publish call's end, after a normal return: `Calls.end(publish=True)`,
            # behind a guard that skips it when all it would do is close the call (nothing
            # makes a deferred publish dispatch now, no definitions to write, not nested).
            if call is not None:
                if nested or state.eager or not state.defer_dispatch or state.defs_dirty:
                    self.calls.end(True)
                else:
                    state.calling = False

    if TYPE_CHECKING:

        def publish(
            self,
            msg: Message,
            *,
            session: Session | None,
            vhost: VHost,
            exchange: Exchange,
            now_ms: int,
            mandatory: bool = False,
            call: list[Effect] | None = None,
            classify: bool = True,
            queues: tuple[QueueEntity, ...] = (),
            released: list[int] | None = None,
        ) -> Published:
            """The pipeline, steps 1 to 4 (`pipeline`, whose docstring says the rest)."""

        def publish_call(
            self,
            msg: Message,
            session: Session,
            vhost: VHost,
            exchange: Exchange,
            now_ms: int,
            mandatory: bool,
            call: list[Effect],
            /,
        ) -> Published:
            """One publish as a whole call whose effects go in `call` (`pipeline`)."""

    else:
        # One function under two names: `publish`, the API, takes keywords only (mypy holds
        # every caller to it; the stub above is its signature), and `pipeline` takes them by
        # position. A keyword call costs CPython its specialised call (CALL_PY_WITH_DEFAULTS
        # wants positional arguments and no keyword-only parameters): about 900 of a 50,000
        # instruction publish under callgrind (benchmarks/hotpath_bench.py), so the core's
        # per-message callers call `pipeline`, and the one-publish call `publish_call` (the
        # call protocol folded into the pipeline: a Python call less per publish than a
        # call-protocol method around it). No wrapper: that would be a call more.
        publish = pipeline
        publish_call = pipeline

    def _store_failing(self) -> bool:
        # The store's writes fail (hold.py): a confirmed publish of a persistent message to a
        # durable queue is refused before it enters the queue, so no consumer sees what its
        # publisher is told to send again.
        dur = self.state.durability
        return dur is not None and dur.failing

    def publish_chunk(
        self, session: Session, q: QueueEntity, data: bytes, entries: int, records: int,
        now_ms: int,
    ) -> int:  # fmt: skip
        """Append a stream-protocol publish frame's `records` messages (`data`: its entries,
        as they arrived) to stream `q` as one chunk, kept as it is (core/streamchunk.py):
        steps 1, 3 and 4 for the whole chunk, with one confirm seq (returned; 0 when the
        session does not confirm). The frame's messages go to the stream of its publisher, so
        there is no routing step."""
        log = q.stream
        assert log is not None
        self._stats["published"] += records
        session.counts.received += records
        if self._alarms_on:
            self.resources.alarm_publish(session.conn_id)
        seq = session.next_publish_seq() if session.mode is _CONFIRM else 0
        if seq and self._store_failing():
            self.confirms.confirm_publish(session, seq, STORE_FAILED, False)
            return seq
        log.append_chunk(data, entries, records, now_ms)
        log.enforce(now_ms)
        self._dirty[id(q)] = q
        if seq and self.state.durability is not None:
            # held for the fsync or the write, by the confirm rule (`BrokerConfig.stream_confirm`)
            written = self.state.config.stream_confirm == _WRITTEN
            self.confirms.confirm_publish(session, seq, None, not written, written=written)
        elif seq:
            self.confirms.confirm_publish(session, seq, None, False)
        return seq

    def publish_in(
        self, txn: int, msg: Message, *, session: Session, exchange: Exchange,
        mandatory: bool = False,
    ) -> Published:  # fmt: skip
        """Step 1 of a publish into transaction `txn` declared on `session`
        (`Transactions.declare`, AMQP 1.0's transactional transfers): counted as received and
        buffered until the commit routes it (`BUFFERED`). A session in transactional mode
        needs no such call: `publish` buffers its publishes in its own transaction.

        Raises:
            BrokerError: NOT_FOUND when `session` has no open transaction `txn`.
        """
        tx = Transactions.declared(session, txn)
        self._stats["published"] += 1
        session.counts.received += 1
        if self._alarms_on:
            self.resources.alarm_publish(session.conn_id)
        tx.publishes.append(TxPublish(exchange.name, msg.routing_key, mandatory, msg))
        return HELD_BY_TX

    def publish_without_session(
        self, msg: Message, *, vhost: VHost, exchange: Exchange, now_ms: int
    ) -> Published:
        """Publish `msg` to `exchange` for a caller with no session (the management API,
        which authorised its user): counted, routed and enqueued as a client's publish (steps
        1 to 3), with no confirm, return or publisher flow. Its outcome is `ACCEPTED`,
        `UNROUTABLE`, or why a queue refused it (`OVERFLOW`, `ADDRESS_FULL`): no producer to
        fail."""
        self._stats["published"] += 1  # received, as a client's publish counts
        # RabbitMQ's management publishes over an internal AMQP 0-9-1 connection: counted so
        counts = self.state.by_protocol["amqp091"]
        counts.received += 1
        done = self.publish(
            msg, session=None, vhost=vhost, exchange=exchange, now_ms=now_ms, classify=False
        )
        if done.outcome is UNROUTABLE:
            counts.unroutable += 1
        return done

    def route(
        self,
        msg: Message,
        *,
        vhost: VHost,
        exchange: Exchange,
        now_ms: int,
        session: Session | None = None,
        mandatory: bool = False,
    ) -> Published:
        """Steps 2 and 3 of `publish` for a caller that counts, classifies and confirms itself
        (a transaction's commit, a delayed message now due)."""
        return self.publish(
            msg,
            session=session,
            vhost=vhost,
            exchange=exchange,
            now_ms=now_ms,
            mandatory=mandatory,
            classify=False,
        )

    def enqueue(
        self,
        msg: Message,
        *,
        vhost: VHost,
        exchange: Exchange,
        queues: tuple[QueueEntity, ...],
        now_ms: int,
        session: Session | None = None,
    ) -> Published:
        """Step 3 alone: `msg` into `queues`, as the per-queue step of a publish from
        `exchange` (a protocol's own delivery to queues it knows, such as MQTT's retained
        messages)."""
        if not queues:
            return DONE
        return self.publish(
            msg,
            session=session,
            vhost=vhost,
            exchange=exchange,
            now_ms=now_ms,
            classify=False,
            queues=queues,
        )
