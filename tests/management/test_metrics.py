"""Prometheus exposition: format, names, labels, escaping, and one pass over many queues."""

from __future__ import annotations

import re

import httpx

from ringmq.management import metrics
from ringmq.management.port import ConnectionInfo, QueueCounters, QueueInfo

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
    ):
        assert sample in text.splitlines(), sample
    assert declared["ringmq_queue_ring_evicted_total"] == "counter"
    assert declared["rabbitmq_queue_messages_ready"] == "gauge"
    assert all(k.endswith("_total") for k, v in declared.items() if v == "counter")


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
    r = await client.get("/metrics")
    assert r.headers["content-type"].startswith("text/plain; version=0.0.4")
    _check_format(r.text)
    assert 'rabbitmq_queue_messages_ready{vhost="/",queue="ring"} 2' in r.text
    assert 'ringmq_queue_ring_evicted_total{vhost="/",queue="ring"} 1' in r.text
    assert 'ringmq_queue_ring_size{vhost="/",queue="ring"} 2' in r.text
