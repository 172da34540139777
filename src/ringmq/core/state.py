"""What the broker's owners share: the registry of vhosts and connections, and the call in
progress.

Theory of operation: the broker is split by ownership (topology, publish, delivery, dead
letters, transactions and confirms, resources, timers; `broker.py` composes them). Each owner
keeps its own state private and offers public steps to the others. What they all read is here,
in one `State` object the broker creates and hands to each owner: the configuration, users and
permissions, policies, vhosts, connections, counters, the storage glue (`durability`, None
without a store) and the shards' definitions feed (`feed`, None unless this shard feeds the
others: `core/deffeed.py`).

The call in progress is explicit too. The call protocol (`core/call.py`, `Calls`) starts
each call with a fresh effect list (`out`, appended to by every owner) at `now_ms`, and ends it
by its one dispatch rule (`dirty`: the queues the call touched, dispatched by the delivery
owner's `flush`; `eager`: a publish of the call reached a queue that must dispatch before the
next publish, a ring, a limit, LVQ, priorities, browsing; `defer_dispatch`: the server
dispatches plain publishes once per read batch), then writes the durable definitions the call
changed. `backlog` holds the queues that had more to deliver than one call may. No owner writes
another's private fields; they write these, through the names below. Nothing outside `core/`
touches the call fields (`out`, `now_ms`, `calling`, `dirty`, `eager`, `defer_dispatch`):
callers go through `Calls` (or the pipeline's one-publish call, its third form).

Pure: no I/O, no clock (`now_ms` is an argument of every call).
"""

from __future__ import annotations

import base64
import random
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ringmq.core.asks import DefinitionElsewhere, DefinitionRequest
from ringmq.core.auth import AuthDB
from ringmq.core.config import BrokerConfig
from ringmq.core.dedup import PublishDedup
from ringmq.core.limits import TenantLimits
from ringmq.core.parameters import Parameters
from ringmq.core.policies import AddressSettingsTable, PolicyTable
from ringmq.core.session import ProtocolCounts

if TYPE_CHECKING:
    from ringmq.core.asks import Asks
    from ringmq.core.deffeed import DefinitionFeed
    from ringmq.core.durability import Durability
    from ringmq.core.effects import Effect
    from ringmq.core.entities import QueueEntity
    from ringmq.core.session import Conn, Session
    from ringmq.core.vhost import VHost

STAT_NAMES: tuple[str, ...] = (
    "published",
    "delivered",
    "returned",
    "unroutable",
    "confirmed",
    "nacked",
    "dead_lettered",
    # churn, as rabbitmq_prometheus counts it (*_opened_total, queues_declared_total...)
    "connections_opened",
    "connections_closed",
    "channels_opened",
    "channels_closed",
    "queues_declared",
    "queues_created",
    "queues_deleted",
)


class State:
    """The shared registry and the call in progress (see the module docstring)."""

    __slots__ = (
        "address_settings",
        "asks",
        "auth",
        "backlog",
        "by_protocol",
        "calling",
        "config",
        "connection_shard",
        "conns",
        "consumer_check_ms",
        "dedup",
        "defer_dispatch",
        "defs_dirty",
        "dirty",
        "durability",
        "eager",
        "feed",
        "limits",
        "now_ms",
        "out",
        "parameters",
        "policies",
        "rng",
        "shards",
        "stats",
        "streams",
        "timed",
        "unshown",
        "vhosts",
    )

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.auth = AuthDB()
        self.policies = PolicyTable()
        self.address_settings = AddressSettingsTable()
        self.limits = TenantLimits()
        """Vhost and user limits (`core/limits.py`)."""
        self.parameters = Parameters()
        """Runtime parameters kept from definitions (`core/parameters.py`)."""
        self.vhosts: dict[str, VHost] = {}
        self.conns: dict[int, Conn] = {}
        # message_id de-duplication and Artemis' _AMQ_DUPL_ID caches (core/dedup.py)
        self.dedup = PublishDedup(
            id_cache_size=config.id_cache_size, persist_id_cache=config.persist_id_cache
        )
        self.durability: Durability | None = None
        self.shards = 1
        """How many shards the broker runs (`Broker.set_shards`): what `balanced` spreads
        queues over."""
        self.connection_shard = 0
        """The shard of the connection whose step the call makes: this one (0), but for a
        step shard 0 makes for another shard's client (`core/askrun.py`), where a
        client-local queue is placed."""
        self.asks: Asks | None = None
        """The definition changes this shard asks shard 0 to make (`core/asks.py`), when it
        follows shard 0 (None: it makes them itself)."""
        self.feed: DefinitionFeed | None = None
        """The definitions feed of the other shards' copies (`core/deffeed.py`), when on."""
        self.stats: dict[str, int] = dict.fromkeys(STAT_NAMES, 0)
        self.by_protocol: dict[str, ProtocolCounts] = {"amqp091": ProtocolCounts()}
        """Message counters per protocol label (`Conn.counts`), kept after connections close."""
        self.out: list[Effect] = []
        self.now_ms = 0
        self.calling = False
        """A call is in progress (`call.py`): a call begun now nests inside it."""
        self.dirty: dict[int, QueueEntity] = {}
        """Queues touched by the call, by id: dispatched and drained by `Dispatcher.flush`."""
        self.backlog: dict[int, QueueEntity] = {}
        """Queues with more to deliver than one call may (`DISPATCH_BATCH`)."""
        self.timed: dict[int, QueueEntity] = {}
        """Queues that ever had timer work (TTL, x-expires, schedules): what `tick` visits."""
        self.streams: dict[int, QueueEntity] = {}
        """Stream queues (by id): the tick applies their retention by age."""
        self.unshown: dict[int, QueueEntity] = {}
        """Stream queues dispatched while their log held chunks readers may not see yet
        (`StreamLog.end`): dispatched again when the store shows more (`Broker.stored`)."""
        self.consumer_check_ms: int | None = None
        """When the oldest acknowledgement-required delivery may pass its consumer timeout
        (`Timers.consumer_timeouts`); None while none is tracked since the last check."""
        self.eager = False
        self.defer_dispatch = False
        """When True, dispatching after a publish that reached only plain queues waits for the
        end of the read batch (`Broker.dispatch_pending`; the rule is `Calls.end`'s)."""
        self.defs_dirty = False
        self.rng = random.Random(config.name_seed)  # noqa: S311 - names, not secrets

    def gen_name(self, prefix: str) -> str:
        """A fresh server-chosen name (`amq.gen-...` queues, `amq.ctag-...` consumer tags)."""
        raw = self.rng.getrandbits(128).to_bytes(16, "big")
        return prefix + base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")

    def mark(self, q: QueueEntity) -> None:
        """`q` may have work (deliveries, dead letters, unblocking): visit it on the flush."""
        if not q.deleted:
            self.dirty[id(q)] = q

    def arm_consumer_check(self, q: QueueEntity, delivered_at: int) -> None:
        """A delivery of `q` at `delivered_at` waits for its acknowledgement: make sure the
        consumer-timeout check runs by its deadline (once per dispatch, not per message)."""
        timeout = q.settings.consumer_timeout_ms or self.config.consumer_timeout_ms
        if timeout is None:
            return
        due = delivered_at + timeout
        current = self.consumer_check_ms
        if current is None or due < current:
            self.consumer_check_ms = due

    def track_timers(self, q: QueueEntity) -> None:
        """Remember a queue that may have timer work (TTL, x-expires, scheduled messages)."""
        self.timed[id(q)] = q

    def elsewhere(self, s: Session, op: str, vhost: str, **fields: Any) -> None:
        """Session `s`'s step is about to change a definition: on a shard that follows shard
        0 it raises `DefinitionElsewhere` instead when `s`'s adapter parks (core/asks.py);
        else nothing."""
        if self.asks is not None and s.conn.parks:
            raise DefinitionElsewhere(DefinitionRequest(op, vhost, fields))

    def touch(self, kind: str, vhost: str, name: str, *, durable: bool = True) -> None:
        """A queue or exchange was created or deleted, or an exchange's bindings changed:
        written after the call (to the store when `durable`, to the feed in any case)."""
        if durable and self.durability is not None:
            self.durability.touch(kind, vhost, name)
            self.defs_dirty = True
        if self.feed is not None:
            self.feed.touch(kind, vhost, name)
            self.defs_dirty = True

    def touch_binding(
        self,
        vhost: str,
        source: str,
        dest: tuple[str, str],
        routing_key: str,
        arguments: Mapping[str, Any] | None,
        *,
        durable: bool,
    ) -> None:
        """A binding from exchange `source` was added or removed: written after the call (to
        the store when the exchange is `durable`, to the feed in any case)."""
        if durable and self.durability is not None:
            self.durability.touch_binding(vhost, source, dest, routing_key, arguments)
            self.defs_dirty = True
        if self.feed is not None:
            self.feed.touch_binding(vhost, source, dest, routing_key, arguments)
            self.defs_dirty = True

    def sync_definitions(self, *, full: bool = True) -> None:
        """Write the definitions that changed to the store and the feed (`full=False`: only
        what `touch` recorded)."""
        self.defs_dirty = False
        if self.durability is not None:
            self.durability.sync_definitions(full=full)
        if self.feed is not None:
            self.feed.sync(full=full)
