"""Prometheus exposition: format, names, labels, escaping, and one pass over many queues."""

from __future__ import annotations

import re

import httpx

from ringmq.core.broker import Broker
from ringmq.core.session import ProtocolCounts
from ringmq.management import metrics
from ringmq.management.port import ConnectionInfo
from ringmq.management.records import QueueCounters, QueueInfo

_SAMPLE = re.compile(r'^[a-zA-Z_:][a-zA-Z0-9_:]*(\{([a-z_]+="([^"\\]|\\.)*",?)*\})? -?\d+(\.\d+)?$')


def _check_format(text: str) -> dict[str, str]:
    """Every line is a HELP/TYPE comment or a valid sample; each family declared once first."""
    assert text.endswith("\n")
    declared: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("# HELP "):
            continue
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            assert name not in declared, f"family {name} declared twice"
            declared[name] = kind
            continue
        assert _SAMPLE.match(line), line
        name = re.split(r"[{ ]", line, maxsplit=1)[0]
        assert name in declared, f"sample before its TYPE: {line}"
    return declared


def test_render_names_types_and_values() -> None:
    q = QueueInfo(
        vhost="/",
        name="ring",
        messages_ready=3,
        messages_unacknowledged=4,
        messages_scheduled=2,
        messages_paged=1,
        consumers=1,
        ring_size=3,
        counters=QueueCounters(
            publish=10,
            ring_evicted=5,
            lvq_replaced=1,
            overflow_rejected=2,
            expired=3,
            dead_lettered={"maxlen": 4, "expired": 1},
        ),
    )
    conn = ConnectionInfo(
        1,
        "c",
        "guest",
        "/",
        "127.0.0.1",
        1,
        "127.0.0.1",
        5672,
        0,
        state="blocked",
        blocked_reason="memory",
    )
    text = metrics.render([q], connections=[conn], channels=2, exchanges=7, node="n")
    declared = _check_format(text)
    labels = '{vhost="/",queue="ring"}'
    for sample in (
        f"rabbitmq_queue_messages_ready{labels} 3",
        f"rabbitmq_queue_messages_unacked{labels} 4",
        f"rabbitmq_queue_messages{labels} 9",  # ready (paged included) + unacked + scheduled
        f"rabbitmq_queue_consumers{labels} 1",
        f"rabbitmq_queue_messages_published_total{labels} 10",
        f"ringmq_queue_messages_scheduled{labels} 2",
        f"ringmq_queue_messages_paged{labels} 1",
        f"ringmq_queue_ring_size{labels} 3",
        f"ringmq_queue_ring_evicted_total{labels} 5",
        f"ringmq_queue_lvq_replaced_total{labels} 1",
        f"ringmq_queue_overflow_rejected_total{labels} 2",
        f"ringmq_queue_expired_total{labels} 3",
        'ringmq_queue_dead_lettered_total{vhost="/",queue="ring",reason="expired"} 1',
        'ringmq_queue_dead_lettered_total{vhost="/",queue="ring",reason="maxlen"} 4',
        "rabbitmq_connections 1",
        "rabbitmq_channels 2",
        "rabbitmq_queues 1",
        "ringmq_exchanges 7",
        "ringmq_connections_blocked 1",
        'ringmq_connections_by_protocol{protocol="AMQP 0-9-1"} 1',
    ):
        assert sample in text.splitlines(), sample
    assert declared["ringmq_queue_ring_evicted_total"] == "counter"
    assert declared["rabbitmq_queue_messages_ready"] == "gauge"
    assert all(k.endswith("_total") for k, v in declared.items() if v == "counter")


def test_connections_are_counted_per_protocol() -> None:
    def conn(conn_id: int, protocol: str) -> ConnectionInfo:
        info = ConnectionInfo(conn_id, f"c{conn_id}", "u", "/", "127.0.0.1", 1, "127.0.0.1", 2, 0)
        info.protocol = protocol
        return info

    conns = [conn(1, "AMQP 0-9-1"), conn(2, "STOMP 1.2"), conn(3, "STOMP 1.2")]
    lines = metrics.render([], connections=conns).splitlines()
    assert 'ringmq_connections_by_protocol{protocol="AMQP 0-9-1"} 1' in lines
    assert 'ringmq_connections_by_protocol{protocol="STOMP 1.2"} 2' in lines
    assert "rabbitmq_connections 3" in lines


def test_global_message_counters_carry_each_protocols_own_numbers() -> None:
    zero = dict.fromkeys(ProtocolCounts.__slots__, 0)
    mqtt = {**zero, "received": 7, "unroutable": 2, "returned": 0, "delivered_auto": 4}
    mqtt |= {"delivered_manual": 1, "get_manual": 0, "acknowledged": 1, "redelivered": 1}
    node = metrics.NodeMetrics(by_protocol={"mqtt311": mqtt})
    text = metrics.render([], node_metrics=node)
    _check_format(text)
    lines = text.splitlines()
    assert 'rabbitmq_global_messages_received_total{protocol="mqtt311"} 7' in lines
    assert 'rabbitmq_global_messages_routed_total{protocol="mqtt311"} 5' in lines
    assert 'rabbitmq_global_messages_unroutable_dropped_total{protocol="mqtt311"} 2' in lines
    assert 'rabbitmq_global_messages_delivered_total{protocol="mqtt311"} 5' in lines
    assert (
        'rabbitmq_global_messages_delivered_consume_auto_ack_total{protocol="mqtt311"} 4' in lines
    )
    assert 'rabbitmq_global_messages_redelivered_total{protocol="mqtt311"} 1' in lines
    # amqp091 is always there, as in rabbitmq_prometheus, at zero when nothing was counted
    assert 'rabbitmq_global_messages_received_total{protocol="amqp091"} 0' in lines


def test_label_values_are_escaped() -> None:
    q = QueueInfo(vhost="v\\h", name='we"ird\nname')
    text = metrics.render([q])
    _check_format(text)
    assert 'rabbitmq_queue_messages{vhost="v\\\\h",queue="we\\"ird\\nname"} 0' in text


def test_thousands_of_queues_render_in_one_text() -> None:
    queues = [QueueInfo(vhost="/", name=f"q{i}", messages_ready=i) for i in range(3000)]
    text = metrics.render(queues)
    declared = _check_format(text)
    per_queue = [k for k in declared if k.startswith(("rabbitmq_queue_", "ringmq_queue_"))]
    samples = [ln for ln in text.splitlines() if not ln.startswith("#")]
    # one sample per queue per family (dead-lettering has none without dead letters) + globals
    assert len(samples) == 3000 * (len(per_queue) - 1) + 7
    assert 'rabbitmq_queue_messages_ready{vhost="/",queue="q2999"} 2999' in text


async def test_metrics_endpoint_reads_the_broker(client: httpx.AsyncClient) -> None:
    await client.put("/api/queues/%2F/ring", json={"arguments": {"x-ring-size": 2}})
    for p in "abc":
        await client.post(
            "/api/exchanges/%2F/amq.default/publish",
            json={"routing_key": "ring", "payload": p, "properties": {}},
        )
    r = await client.get("/metrics/per-object")
    assert r.headers["content-type"].startswith("text/plain; version=0.0.4")
    _check_format(r.text)
    assert 'rabbitmq_queue_messages_ready{vhost="/",queue="ring"} 2' in r.text
    assert 'ringmq_queue_ring_evicted_total{vhost="/",queue="ring"} 1' in r.text
    assert 'ringmq_queue_ring_size{vhost="/",queue="ring"} 2' in r.text


async def test_metrics_are_aggregated_by_default_as_rabbitmq_prometheus(
    client: httpx.AsyncClient,
) -> None:
    for name in ("a", "b"):
        await client.put(f"/api/queues/%2F/{name}", json={"arguments": {"x-ring-size": 5}})
        for p in "xyz":
            await client.post(
                "/api/exchanges/%2F/amq.default/publish",
                json={"routing_key": name, "payload": p, "properties": {}},
            )
    text = (await client.get("/metrics")).text
    _check_format(text)
    lines = text.splitlines()
    assert "rabbitmq_queue_messages_ready 6" in lines
    assert "rabbitmq_queue_messages_published_total 6" in lines
    assert not any(ln.startswith("rabbitmq_queue_") and "{" in ln for ln in lines)
    assert not any(ln.startswith("ringmq_queue_ring_size") for ln in lines)
    assert 'rabbitmq_global_messages_received_total{protocol="amqp091"} 6' in lines
    assert 'rabbitmq_global_messages_routed_total{protocol="amqp091"} 6' in lines
    assert "rabbitmq_queues_created_total 2" in lines
    assert "rabbitmq_queues_deleted_total 0" in lines
    for family in (
        "rabbitmq_build_info",
        "rabbitmq_process_resident_memory_bytes",
        "rabbitmq_resident_memory_limit_bytes",
        "rabbitmq_disk_space_available_bytes",
        "rabbitmq_disk_space_available_limit_bytes",
        "rabbitmq_process_open_fds",
        "rabbitmq_process_max_fds",
        "rabbitmq_alarms_memory_used_watermark",
        "rabbitmq_alarms_free_disk_space_watermark",
        "rabbitmq_connections_opened_total",
        "rabbitmq_channels_closed_total",
        "rabbitmq_queues_declared_total",
        "rabbitmq_erlang_uptime_seconds",
        "rabbitmq_global_messages_delivered_total",
        "rabbitmq_global_messages_acknowledged_total",
        "rabbitmq_global_messages_confirmed_total",
    ):
        assert f"# TYPE {family} " in text, family
    per_object = (await client.get("/metrics/per-object")).text
    assert 'rabbitmq_queue_messages_ready{vhost="/",queue="a"} 3' in per_object
    assert 'ringmq_queue_ring_size{vhost="/",queue="b"} 5' in per_object


async def test_metrics_detailed_serves_the_families_asked_for(client: httpx.AsyncClient) -> None:
    await client.put("/api/vhosts/other")
    # an administrator acts in a vhost only with permissions there, as in RabbitMQ
    all_perms = {"configure": ".*", "write": ".*", "read": ".*"}
    assert (await client.put("/api/permissions/other/guest", json=all_perms)).status_code == 201
    await client.put("/api/queues/%2F/a", json={})
    await client.put("/api/queues/other/b", json={})
    text = (await client.get("/metrics/detailed")).text
    assert "rabbitmq_detailed_" not in text
    text = (
        await client.get(
            "/metrics/detailed",
            params=[("family", "queue_coarse_metrics"), ("family", "queue_consumer_count")],
        )
    ).text
    _check_format(text)
    assert 'rabbitmq_detailed_queue_messages_ready{vhost="/",queue="a"} 0' in text
    assert 'rabbitmq_detailed_queue_consumers{vhost="other",queue="b"} 0' in text
    assert "rabbitmq_detailed_queue_messages_bytes" not in text
    only = (
        await client.get(
            "/metrics/detailed", params={"family": "queue_coarse_metrics", "vhost": "other"}
        )
    ).text
    assert 'queue="a"' not in only
    assert 'queue="b"' in only
    bad = await client.get("/metrics/detailed", params={"family": "nope"})
    assert bad.status_code == 400


async def test_alarm_gauges_follow_the_core(client: httpx.AsyncClient, broker: Broker) -> None:
    assert "rabbitmq_alarms_memory_used_watermark 0" in (await client.get("/metrics")).text
    broker.set_alarm("memory", "memory alarm: test")
    assert "rabbitmq_alarms_memory_used_watermark 1" in (await client.get("/metrics")).text
