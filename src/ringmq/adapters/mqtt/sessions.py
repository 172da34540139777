"""What outlives one MQTT connection: sessions, client ids in use, delayed wills, retained.

Theory of operation
-------------------
One `Registry` per broker (`registry_of`), shared by every MQTT connection of that broker,
all on the loop thread. It owns:

* `live`: the connection that holds each client id (per vhost, as RabbitMQ scopes them); a
  new CONNECT with a held id takes the session over (§3.1.4: the old connection is closed);
* `saved`: the parts of a persistent session that are not in the queues, kept between its
  connections: subscription options, shared subscriptions, and the packet ids in flight
  (inbound PUBREC sent, outbound PUBREL sent, outbound publishes not acknowledged). These
  live in memory only; after a broker restart a session is rebuilt from its queues and their
  bindings (`Sub.from_binding`: the binding arguments carry each subscription's options; a
  shared queue has one binding per member, naming it);
* `wills`: wills waiting out their 5.0 Will Delay Interval, published by `due_wills` from
  any MQTT connection's periodic tick, cancelled when the client comes back first.

The messages themselves are never here: a session's messages wait in its queues
(`queue_name`: RabbitMQ's `mqtt-subscription-<client id>qos0` and `...qos1`), durable for a
persistent session, so they survive restarts and take the policies that match their names.
Retained messages are a durable last-value queue per vhost (`RETAINED_QUEUE`, keyed by the
`x-mqtt-retain` header = the topic), read without consuming when a subscription matches.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from ringmq.adapters.mqtt.message import RETAIN_HEADER, retained_topic
from ringmq.adapters.mqtt.topics import matches, to_routing_key
from ringmq.core.message import Message

if TYPE_CHECKING:
    from ringmq.core.broker import Broker
    from ringmq.core.entities import QueueEntity

RETAINED_QUEUE: Final = "mqtt-retained"
RETAINED_MAX: Final = 100_000
"""Most retained messages read for one subscription."""
_QOS_ARG: Final = "x-mqtt-qos"
_NO_LOCAL_ARG: Final = "x-mqtt-no-local"
_RAP_ARG: Final = "x-mqtt-retain-as-published"
_SUB_ID_ARG: Final = "x-mqtt-subscription-id"
MEMBER_ARG: Final = "x-mqtt-member"
"""On a shared queue's binding: the client id of the group member it stands for."""
GROUP_ARG: Final = "x-mqtt-group"
SHARED_PREFIX: Final = "mqtt-shared-"


def queue_name(client_id: str, qos: int) -> str:
    """The queue of a client's subscriptions of QoS 0, or of QoS 1 and 2 (RabbitMQ's names)."""
    return f"mqtt-subscription-{client_id}qos{0 if qos == 0 else 1}"


def shared_queue_name(group: str, topic_filter: str) -> str:
    """The one queue a shared subscription's group consumes."""
    return f"{SHARED_PREFIX}{group}-{to_routing_key(topic_filter)}"


@dataclass(slots=True)
class Sub:
    """One subscription of a session and its options."""

    topic_filter: str
    qos: int
    no_local: bool = False
    retain_as_published: bool = False
    retain_handling: int = 0
    identifier: int | None = None
    group: str | None = None
    """The shared subscription's group (None: a plain subscription)."""

    @property
    def queue_qos(self) -> int:
        """0 or 1: which of the session's two queues holds its messages."""
        return 0 if self.qos == 0 else 1

    def binding_args(self, member: str | None = None) -> dict[str, Any]:
        """The binding arguments that record the options (read back by `from_binding`); a
        shared subscription's also name its member (`member`, the client id) and group."""
        args: dict[str, Any] = {_QOS_ARG: self.qos}
        if self.group is not None:
            args[GROUP_ARG] = self.group
            args[MEMBER_ARG] = member
        if self.no_local:
            args[_NO_LOCAL_ARG] = True
        if self.retain_as_published:
            args[_RAP_ARG] = True
        if self.identifier is not None:
            args[_SUB_ID_ARG] = self.identifier
        return args

    @classmethod
    def from_binding(cls, topic_filter: str, args: dict[str, Any], queue_qos: int) -> Sub:
        """The subscription a binding of a session queue records."""
        qos = args.get(_QOS_ARG, queue_qos)
        ident = args.get(_SUB_ID_ARG)
        group = args.get(GROUP_ARG)
        return cls(
            topic_filter,
            qos if isinstance(qos, int) and 0 <= qos <= 2 else queue_qos,
            no_local=bool(args.get(_NO_LOCAL_ARG)),
            retain_as_published=bool(args.get(_RAP_ARG)),
            identifier=ident if isinstance(ident, int) else None,
            group=group if isinstance(group, str) else None,
        )


@dataclass(slots=True)
class SavedSession:
    """The in-memory part of a persistent session between two connections."""

    subs: dict[str, Sub] = field(default_factory=dict)
    shared: dict[str, Sub] = field(default_factory=dict)
    qos2_in: set[int] = field(default_factory=set)
    pubrel_out: set[int] = field(default_factory=set)
    resend_ids: dict[tuple[str, int], int] = field(default_factory=dict)
    expires_ms: int | None = None
    """When the session ends if the client does not come back (None: never)."""
    """The packet ids of messages sent and not acknowledged, by (queue, seq): they go again
    under the same ids when the session resumes."""


@dataclass(slots=True)
class PendingWill:
    """A will waiting for its delay (5.0 Will Delay Interval)."""

    due_ms: int
    message: Message
    retained: bool


class Registry:
    """The MQTT state of one broker shared by its connections (see the module docstring)."""

    def __init__(self) -> None:
        self.live: dict[tuple[str, str], Any] = {}
        self.saved: dict[tuple[str, str], SavedSession] = {}
        self.wills: dict[tuple[str, str], PendingWill] = {}

    def saved_session(self, key: tuple[str, str], now_ms: int) -> SavedSession | None:
        """The saved part of session `key` unless it expired (5.0 Session Expiry Interval)."""
        saved = self.saved.get(key)
        if saved is not None and saved.expires_ms is not None and saved.expires_ms <= now_ms:
            del self.saved[key]
            return None
        return saved

    def due_wills(self, now_ms: int) -> list[tuple[str, PendingWill]]:
        """Take the wills whose delay is over: (vhost, will) each."""
        due = [k for k, w in self.wills.items() if w.due_ms <= now_ms]
        return [(k[0], self.wills.pop(k)) for k in due]


_REGISTRIES: weakref.WeakKeyDictionary[Broker, Registry] = weakref.WeakKeyDictionary()


def registry_if_any(broker: Broker) -> Registry | None:
    """The registry of `broker` if an MQTT connection ever made it."""
    return _REGISTRIES.get(broker)


def registry_of(broker: Broker) -> Registry:
    """The registry of `broker` (made on first use)."""
    reg = _REGISTRIES.get(broker)
    if reg is None:
        reg = _REGISTRIES[broker] = Registry()
    return reg


# ---------------------------------------------------------------------- retained messages
def retained_queue(broker: Broker, vhost: str, now_ms: int) -> QueueEntity:
    """The vhost's retained store, created on first use (durable, last value per topic)."""
    q = broker.vhosts[vhost].queues.get(RETAINED_QUEUE)
    if q is None:
        q = broker.topology.create_queue(
            vhost,
            RETAINED_QUEUE,
            durable=True,
            arguments={"x-last-value-key": RETAIN_HEADER},
            now_ms=now_ms,
        )
    return q


def retained_matching(
    broker: Broker, vhost: str, topic_filter: str, now_ms: int
) -> list[tuple[str, Message]]:
    """The retained messages whose topic `topic_filter` matches: (topic, message) each.

    An empty retained message is a deletion (§3.3.1.3): never returned.
    """
    vh = broker.vhosts.get(vhost)
    q = vh.queues.get(RETAINED_QUEUE) if vh is not None else None
    if q is None:
        return []
    out: list[tuple[str, Message]] = []
    for d in q.queue.browse_ready(None, RETAINED_MAX, now_ms):
        msg = d.message
        topic = retained_topic(msg)
        if topic is not None and msg.body and matches(topic_filter, topic):
            out.append((topic, msg))
    return out
