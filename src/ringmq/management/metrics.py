"""Prometheus text exposition (format 0.0.4) of the broker's counters, built at scrape time.

Names follow RabbitMQ's prometheus plugin where it has one (`rabbitmq_queue_messages_ready`,
`rabbitmq_queue_messages_unacked`, `rabbitmq_connections`, ...); what RabbitMQ lacks is named
`ringmq_*` (ring evictions, LVQ replacements, overflow rejections, expiries, dead-lettering by
reason, scheduled and paged depth, ring size). As rabbitmq_prometheus, `/metrics` is aggregated
(one unlabelled sum per family), `/metrics/per-object` labels every queue and
`/metrics/detailed` serves only the families asked for as `rabbitmq_detailed_*`. Node-wide
families (memory, disk, fds, alarms, churn, global message counters) come from `NodeMetrics`,
read from `nodes.NodeProbe` and the core's `Broker.stats`. Nothing is counted per message:
the collector reads the queues' snapshots once per scrape and writes every family in a single
pass over them, so a scrape of thousands of queues costs one list and one `join`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Final

from ringmq.management.port import ConnectionInfo
from ringmq.management.records import ConsumerInfo, QueueInfo

CONTENT_TYPE: Final = "text/plain; version=0.0.4; charset=utf-8"
RABBITMQ_COMPAT_VERSION: Final = "3.13.0"
"""The RabbitMQ version ringmq's API answers like (`/api/overview` says the same)."""

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


_AGGREGATE_SKIP: Final = frozenset({"ringmq_queue_ring_size"})
"""Per-queue gauges a sum would make meaningless: shown only per object."""

_CHURN: Final = (
    ("rabbitmq_connections_opened_total", "connections_opened", "Total connections opened"),
    ("rabbitmq_connections_closed_total", "connections_closed", "Total connections closed"),
    ("rabbitmq_channels_opened_total", "channels_opened", "Total channels opened"),
    ("rabbitmq_channels_closed_total", "channels_closed", "Total channels closed"),
    ("rabbitmq_queues_declared_total", "queues_declared", "Total queues declared"),
    ("rabbitmq_queues_created_total", "queues_created", "Total queues created"),
    ("rabbitmq_queues_deleted_total", "queues_deleted", "Total queues deleted"),
)

DETAILED_FAMILIES: Final[dict[str, tuple[str, ...]]] = {
    "queue_coarse_metrics": (
        "rabbitmq_queue_messages_ready",
        "rabbitmq_queue_messages_unacked",
        "rabbitmq_queue_messages",
    ),
    "queue_consumer_count": ("rabbitmq_queue_consumers",),
    "queue_metrics": (
        "rabbitmq_queue_messages_ready_bytes",
        "rabbitmq_queue_messages_unacked_bytes",
        "rabbitmq_queue_messages_bytes",
        "rabbitmq_queue_messages_persistent",
        "rabbitmq_queue_messages_paged_out",
    ),
    "queue_delivery_metrics": (
        "rabbitmq_queue_messages_published_total",
        "rabbitmq_queue_messages_delivered_total",
        "rabbitmq_queue_messages_redelivered_total",
        "rabbitmq_queue_messages_acked_total",
    ),
    "connection_churn_metrics": tuple(name for name, _, _ in _CHURN),
}
"""`/metrics/detailed?family=...`: RabbitMQ's family names -> the metrics each selects
(served as `rabbitmq_detailed_*`)."""


@dataclass(frozen=True, slots=True)
class NodeMetrics:
    """The node-wide readings a scrape shows (from `nodes.NodeProbe` and `Broker.stats`)."""

    mem_used: int = 0
    mem_limit: int = 0
    disk_free: int = 0
    disk_free_limit: int = 0
    fd_used: int = 0
    fd_total: int = 0
    mem_alarm: bool = False
    disk_alarm: bool = False
    uptime_ms: int = 0
    started_at_ms: int = 0
    stats: dict[str, int] = field(default_factory=dict)
    """The core's broker-wide counters (`Broker.stats`)."""
    by_protocol: dict[str, dict[str, int]] = field(default_factory=dict)
    """The sessions' message counters by protocol label (`Broker.counts_by_protocol`)."""
    cluster_leader: bool = True
    """This node leads its shard (a single node always does)."""
    cluster_epoch: int = 0
    cluster_isr_size: int = 1
    cluster_nodes_running: int = 1


_GLOBAL: Final[tuple[tuple[str, str, Callable[[dict[str, int]], int]], ...]] = (
    ("received", "Messages received from publishers", lambda p: p["received"]),
    (
        "routed",
        "Messages routed to at least one queue",
        lambda p: p["received"] - p["unroutable"],
    ),
    (
        "unroutable_dropped",
        "Unroutable messages dropped",
        lambda p: p["unroutable"] - p["returned"],
    ),
    (
        "unroutable_returned",
        "Unroutable messages returned to publishers",
        lambda p: p["returned"],
    ),
    ("confirmed", "Messages confirmed to publishers", lambda p: p["confirmed"]),
    (
        "delivered",
        "Messages delivered to consumers or fetched",
        lambda p: p["delivered_manual"] + p["delivered_auto"] + p["get_manual"] + p["get_auto"],
    ),
    (
        "delivered_consume_manual_ack",
        "Messages delivered to consumers in manual acknowledgement mode",
        lambda p: p["delivered_manual"],
    ),
    (
        "delivered_consume_auto_ack",
        "Messages delivered to consumers in automatic acknowledgement mode",
        lambda p: p["delivered_auto"],
    ),
    (
        "delivered_get_manual_ack",
        "Messages fetched with basic.get in manual acknowledgement mode",
        lambda p: p["get_manual"],
    ),
    (
        "delivered_get_auto_ack",
        "Messages fetched with basic.get in automatic acknowledgement mode",
        lambda p: p["get_auto"],
    ),
    ("get_empty", "basic.get on an empty queue", lambda p: p["get_empty"]),
    ("redelivered", "Messages redelivered", lambda p: p["redelivered"]),
    ("acknowledged", "Messages acknowledged by consumers", lambda p: p["acknowledged"]),
)
"""rabbitmq_global_messages_*_total: name, help, value from one protocol's counters."""


def _protocol_lines(lines: list[str], by_protocol: dict[str, dict[str, int]]) -> None:
    # One series per protocol label, as rabbitmq_prometheus splits its global counters
    # (amqp091 always, then every protocol that ever had a connection: amqp10, stomp,
    # mqtt310/mqtt311/mqtt50, http for the streams API's publishes).
    protocols = {"amqp091": {}, **by_protocol}
    for name, help_text, value in _GLOBAL:
        full = f"rabbitmq_global_messages_{name}_total"
        _header(lines, full, "counter", help_text)
        for proto, counts in sorted(protocols.items()):
            v = value(counts) if counts else 0
            lines.append(f'{full}{{protocol="{_escape(proto)}"}} {v}')


def _node_lines(lines: list[str], n: NodeMetrics, queues: list[QueueInfo], version: str) -> None:
    _header(lines, "rabbitmq_build_info", "untyped", "RabbitMQ-compatible build info")
    lines.append(
        f'rabbitmq_build_info{{rabbitmq_version="{RABBITMQ_COMPAT_VERSION}",'
        f'product_name="RingMQ",product_version="{_escape(version)}",'
        f'ringmq_version="{_escape(version)}"}} 1'
    )
    for name, kind, help_text, value in (
        ("rabbitmq_erlang_uptime_seconds", "gauge", "Node uptime", n.uptime_ms / 1000),
        (
            "rabbitmq_process_start_time_seconds",
            "gauge",
            "Start time of the process since unix epoch in seconds",
            n.started_at_ms // 1000,
        ),
        ("rabbitmq_process_resident_memory_bytes", "gauge", "Memory used", n.mem_used),
        (
            "rabbitmq_resident_memory_limit_bytes",
            "gauge",
            "Memory high watermark in bytes",
            n.mem_limit,
        ),
        ("rabbitmq_disk_space_available_bytes", "gauge", "Disk space available", n.disk_free),
        (
            "rabbitmq_disk_space_available_limit_bytes",
            "gauge",
            "Free disk space low watermark in bytes",
            n.disk_free_limit,
        ),
        ("rabbitmq_process_open_fds", "gauge", "Open file descriptors", n.fd_used),
        ("rabbitmq_process_max_fds", "gauge", "Open file descriptors limit", n.fd_total),
        (
            "rabbitmq_alarms_memory_used_watermark",
            "gauge",
            "1 while the memory alarm is in effect",
            int(n.mem_alarm),
        ),
        (
            "rabbitmq_alarms_free_disk_space_watermark",
            "gauge",
            "1 while the free disk space alarm is in effect",
            int(n.disk_alarm),
        ),
        (
            "rabbitmq_alarms_file_descriptor_limit",
            "gauge",
            "1 while the file descriptor limit alarm is in effect",
            int(n.fd_total > 0 and n.fd_used >= n.fd_total),
        ),
        (
            "ringmq_cluster_role",
            "gauge",
            "1 while this node leads its shard, 0 while it follows (a single node leads)",
            int(n.cluster_leader),
        ),
        (
            "ringmq_cluster_epoch",
            "gauge",
            "The shard's epoch (activation sequence)",
            n.cluster_epoch,
        ),
        ("ringmq_cluster_isr_size", "gauge", "Nodes in the shard's ISR", n.cluster_isr_size),
        (
            "ringmq_cluster_nodes_running",
            "gauge",
            "Nodes registered in etcd",
            n.cluster_nodes_running,
        ),
    ):
        _header(lines, name, kind, help_text)
        lines.append(f"{name} {value}")
    st = n.stats
    for name, key, help_text in _CHURN:
        _header(lines, name, "counter", help_text)
        lines.append(f"{name} {st.get(key, 0)}")
    c = [q.counters for q in queues]
    dead: dict[str, int] = {}
    for qc in c:
        for reason, count in qc.dead_lettered.items():
            dead[reason] = dead.get(reason, 0) + count
    _protocol_lines(lines, n.by_protocol)
    for reason in ("expired", "rejected", "maxlen", "delivery_limit"):
        full = f"rabbitmq_global_messages_dead_lettered_{reason}_total"
        _header(lines, full, "counter", f"Messages dead-lettered because {reason}")
        lines.append(
            f'{full}{{queue_type="rabbit_classic_queue",dead_letter_strategy="at_most_once"}} '
            f"{dead.get(reason, 0)}"
        )


def render(
    queues: Iterable[QueueInfo],
    *,
    connections: Iterable[ConnectionInfo] = (),
    consumers: Iterable[ConsumerInfo] = (),
    channels: int = 0,
    exchanges: int = 0,
    node: str = "ringmq",
    version: str = "",
    node_metrics: NodeMetrics | None = None,
    per_object: bool = True,
) -> str:
    """Render every metric family in the Prometheus text format.

    `per_object=False` is RabbitMQ's default `/metrics`: each per-queue family is one sample,
    summed over the queues, without labels; True is `/metrics/per-object` ({vhost, queue}).
    """
    queue_list = list(queues)
    conn_list = list(connections)
    consumer_count = sum(1 for _ in consumers)
    blocked = sum(1 for c in conn_list if c.state in ("blocked", "blocking"))

    per_family: list[list[str]] = [[] for _ in _QUEUE_FAMILIES]
    dead_lettered: list[str] = []
    families = tuple(enumerate(_QUEUE_FAMILIES))
    if per_object:
        for q in queue_list:
            labels = f'{{vhost="{_escape(q.vhost)}",queue="{_escape(q.name)}"}}'
            for i, (name, _kind, _help, value) in families:
                per_family[i].append(f"{name}{labels} {value(q)}")
            for reason, count in sorted(q.counters.dead_lettered.items()):
                dead_lettered.append(
                    f'ringmq_queue_dead_lettered_total{{vhost="{_escape(q.vhost)}",'
                    f'queue="{_escape(q.name)}",reason="{_escape(reason)}"}} {count}'
                )
    else:
        for i, (name, _kind, _help, value) in families:
            if name not in _AGGREGATE_SKIP:
                per_family[i].append(f"{name} {sum(value(q) for q in queue_list)}")
        by_reason: dict[str, int] = {}
        for q in queue_list:
            for reason, count in q.counters.dead_lettered.items():
                by_reason[reason] = by_reason.get(reason, 0) + count
        for reason, count in sorted(by_reason.items()):
            dead_lettered.append(
                f'ringmq_queue_dead_lettered_total{{reason="{_escape(reason)}"}} {count}'
            )

    lines: list[str] = []
    _header(lines, "rabbitmq_identity_info", "untyped", "Node identity")
    lines.append(
        f'rabbitmq_identity_info{{rabbitmq_node="{_escape(node)}",'
        f'rabbitmq_cluster="{_escape(node)}",ringmq_version="{_escape(version)}"}} 1'
    )
    if node_metrics is not None:
        _node_lines(lines, node_metrics, queue_list, version)
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
    by_protocol: dict[str, int] = {}
    for conn in conn_list:
        by_protocol[conn.protocol] = by_protocol.get(conn.protocol, 0) + 1
    _header(lines, "ringmq_connections_by_protocol", "gauge", "Connections open, by protocol")
    lines.extend(
        f'ringmq_connections_by_protocol{{protocol="{_escape(p)}"}} {n}'
        for p, n in sorted(by_protocol.items())
    )
    for (name, kind, help_text, _value), rows in zip(_QUEUE_FAMILIES, per_family, strict=True):
        if rows or per_object:
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


def render_detailed(
    queues: Iterable[QueueInfo],
    families: Iterable[str],
    *,
    vhosts: Iterable[str] = (),
    node: str = "ringmq",
    version: str = "",
    stats: dict[str, int] | None = None,
) -> str:
    """`/metrics/detailed`: only the requested families, per object, named
    `rabbitmq_detailed_*` (RabbitMQ's `rabbitmq_detailed_queue_messages_ready`...).

    Raises:
        ValueError: a family RabbitMQ has and ringmq does not serve, or an unknown one.
    """
    wanted: list[str] = []
    for family in families:
        if family not in DETAILED_FAMILIES:
            known = ", ".join(sorted(DETAILED_FAMILIES))
            raise ValueError(f"unknown metrics family {family!r} (served: {known})")
        wanted.extend(m for m in DETAILED_FAMILIES[family] if m not in wanted)
    only = set(vhosts)
    queue_list = [q for q in queues if not only or q.vhost in only]
    by_name = {f[0]: f for f in _QUEUE_FAMILIES}
    churn = {name: key for name, key, _ in _CHURN}
    lines: list[str] = []
    _header(lines, "rabbitmq_identity_info", "untyped", "Node identity")
    lines.append(
        f'rabbitmq_identity_info{{rabbitmq_node="{_escape(node)}",'
        f'rabbitmq_cluster="{_escape(node)}",ringmq_version="{_escape(version)}"}} 1'
    )
    for metric in wanted:
        detailed = metric.replace("rabbitmq_", "rabbitmq_detailed_", 1)
        if metric in churn:
            _header(lines, detailed, "counter", metric)
            lines.append(f"{detailed} {(stats or {}).get(churn[metric], 0)}")
            continue
        _name, kind, help_text, value = by_name[metric]
        _header(lines, detailed, kind, help_text)
        for q in queue_list:
            labels = f'{{vhost="{_escape(q.vhost)}",queue="{_escape(q.name)}"}}'
            lines.append(f"{detailed}{labels} {value(q)}")
    lines.append("")
    return "\n".join(lines)
