"""Prometheus text exposition (format 0.0.4) of the broker's counters, built at scrape time.

Names follow RabbitMQ's prometheus plugin where it has one (`rabbitmq_queue_messages_ready`,
`rabbitmq_queue_messages_unacked`, `rabbitmq_connections`, ...); what RabbitMQ lacks is named
`ringmq_*` (ring evictions, LVQ replacements, overflow rejections, expiries, dead-lettering by
reason, scheduled and paged depth, ring size). Nothing is counted per message: the collector
reads the queues' snapshots once per scrape and writes every family in a single pass over
them, so a scrape of thousands of queues costs one list and one `join`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Final

from ringmq.management.port import ConnectionInfo, ConsumerInfo, QueueInfo

CONTENT_TYPE: Final = "text/plain; version=0.0.4; charset=utf-8"

_QueueValue = Callable[[QueueInfo], int]

# (name, type, help, value): one family per row, labelled {vhost, queue}.
_QUEUE_FAMILIES: Final[tuple[tuple[str, str, str, _QueueValue], ...]] = (
    (
        "rabbitmq_queue_messages_ready",
        "gauge",
        "Messages ready to be delivered to consumers",
        lambda q: q.messages_ready,
    ),
    (
        "rabbitmq_queue_messages_unacked",
        "gauge",
        "Messages delivered to consumers but not yet acknowledged",
        lambda q: q.messages_unacknowledged,
    ),
    (
        "rabbitmq_queue_messages",
        "gauge",
        "Ready (paged included), unacknowledged and scheduled messages",
        lambda q: q.messages,
    ),
    (
        "rabbitmq_queue_messages_bytes",
        "gauge",
        "Size in bytes of all messages in the queue",
        lambda q: q.message_bytes,
    ),
    (
        "rabbitmq_queue_messages_ready_bytes",
        "gauge",
        "Size in bytes of ready messages",
        lambda q: q.message_bytes_ready,
    ),
    (
        "rabbitmq_queue_messages_unacked_bytes",
        "gauge",
        "Size in bytes of unacknowledged messages",
        lambda q: q.message_bytes_unacknowledged,
    ),
    (
        "rabbitmq_queue_messages_persistent",
        "gauge",
        "Persistent messages",
        lambda q: q.messages_persistent,
    ),
    (
        "rabbitmq_queue_messages_paged_out",
        "gauge",
        "Messages paged out to disk",
        lambda q: q.messages_paged,
    ),
    (
        "rabbitmq_queue_consumers",
        "gauge",
        "Consumers on a queue",
        lambda q: q.consumers,
    ),
    (
        "rabbitmq_queue_messages_published_total",
        "counter",
        "Total number of messages published to queues",
        lambda q: q.counters.publish,
    ),
    (
        "rabbitmq_queue_messages_delivered_total",
        "counter",
        "Total number of messages delivered to consumers or fetched with basic.get",
        lambda q: (
            q.counters.deliver + q.counters.deliver_no_ack + q.counters.get + q.counters.get_no_ack
        ),
    ),
    (
        "rabbitmq_queue_messages_redelivered_total",
        "counter",
        "Total number of messages redelivered",
        lambda q: q.counters.redeliver,
    ),
    (
        "rabbitmq_queue_messages_acked_total",
        "counter",
        "Total number of messages acknowledged by consumers",
        lambda q: q.counters.ack,
    ),
    (
        "ringmq_queue_messages_scheduled",
        "gauge",
        "Messages waiting for their scheduled delivery time",
        lambda q: q.messages_scheduled,
    ),
    (
        "ringmq_queue_messages_paged",
        "gauge",
        "Messages whose bodies are paged to disk",
        lambda q: q.messages_paged,
    ),
    (
        "ringmq_queue_ring_size",
        "gauge",
        "Ring size in force (-1: not a ring)",
        lambda q: q.ring_size,
    ),
    (
        "ringmq_queue_ring_evicted_total",
        "counter",
        "Messages removed from the head of a full ring",
        lambda q: q.counters.ring_evicted,
    ),
    (
        "ringmq_queue_lvq_replaced_total",
        "counter",
        "Messages replaced by a newer one with the same last-value key",
        lambda q: q.counters.lvq_replaced,
    ),
    (
        "ringmq_queue_overflow_rejected_total",
        "counter",
        "Publishes rejected by a reject-publish overflow policy",
        lambda q: q.counters.overflow_rejected,
    ),
    (
        "ringmq_queue_expired_total",
        "counter",
        "Messages that expired by TTL",
        lambda q: q.counters.expired,
    ),
)


def _escape(value: str) -> str:
    # Label values escape backslash, double quote and line feed (exposition format 0.0.4).
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _header(lines: list[str], name: str, kind: str, help_text: str) -> None:
    lines.append(f"# HELP {name} {help_text}")
    lines.append(f"# TYPE {name} {kind}")


def render(
    queues: Iterable[QueueInfo],
    *,
    connections: Iterable[ConnectionInfo] = (),
    consumers: Iterable[ConsumerInfo] = (),
    channels: int = 0,
    exchanges: int = 0,
    node: str = "ringmq",
    version: str = "",
) -> str:
    """Render every metric family in the Prometheus text format."""
    queue_list = list(queues)
    conn_list = list(connections)
    consumer_count = sum(1 for _ in consumers)
    blocked = sum(1 for c in conn_list if c.state in ("blocked", "blocking"))

    per_family: list[list[str]] = [[] for _ in _QUEUE_FAMILIES]
    dead_lettered: list[str] = []
    families = tuple(enumerate(_QUEUE_FAMILIES))
    for q in queue_list:
        labels = f'{{vhost="{_escape(q.vhost)}",queue="{_escape(q.name)}"}}'
        for i, (name, _kind, _help, value) in families:
            per_family[i].append(f"{name}{labels} {value(q)}")
        for reason, count in sorted(q.counters.dead_lettered.items()):
            dead_lettered.append(
                f'ringmq_queue_dead_lettered_total{{vhost="{_escape(q.vhost)}",'
                f'queue="{_escape(q.name)}",reason="{_escape(reason)}"}} {count}'
            )

    lines: list[str] = []
    _header(lines, "rabbitmq_identity_info", "untyped", "Node identity")
    lines.append(
        f'rabbitmq_identity_info{{rabbitmq_node="{_escape(node)}",'
        f'rabbitmq_cluster="{_escape(node)}",ringmq_version="{_escape(version)}"}} 1'
    )
    for name, kind, help_text, total in (
        ("rabbitmq_connections", "gauge", "Connections currently open", len(conn_list)),
        ("rabbitmq_channels", "gauge", "Channels currently open", channels),
        ("rabbitmq_consumers", "gauge", "Consumers currently connected", consumer_count),
        ("rabbitmq_queues", "gauge", "Queues available", len(queue_list)),
        ("ringmq_exchanges", "gauge", "Exchanges available", exchanges),
        ("ringmq_connections_blocked", "gauge", "Connections blocked by an alarm", blocked),
    ):
        _header(lines, name, kind, help_text)
        lines.append(f"{name} {total}")
    for (name, kind, help_text, _value), rows in zip(_QUEUE_FAMILIES, per_family, strict=True):
        _header(lines, name, kind, help_text)
        lines.extend(rows)
    _header(
        lines,
        "ringmq_queue_dead_lettered_total",
        "counter",
        "Messages dead-lettered, by reason (maxlen, expired, rejected, delivery_limit)",
    )
    lines.extend(dead_lettered)
    lines.append("")
    return "\n".join(lines)
