"""The seeds' counter walkthroughs, checked through the HTTP API (messageCount = `messages`,
deliveringCount = `messages_unacknowledged`, scheduledCount = `messages_scheduled`)."""

from __future__ import annotations

from typing import Any

import httpx

from ringmq.core.broker import Broker

from .conftest import T0_MS, Clock, open_consumer


async def _publish(c: httpx.AsyncClient, rk: str, payload: str, **props: Any) -> None:
    r = await c.post(
        "/api/exchanges/%2F/amq.default/publish",
        json={"routing_key": rk, "payload": payload, "properties": props},
    )
    assert r.json() == {"routed": True}


async def _counts(c: httpx.AsyncClient, name: str) -> tuple[int, int, int]:
    q = (await c.get(f"/api/queues/%2F/{name}")).json()
    return q["messages"], q["messages_unacknowledged"], q["messages_scheduled"]


async def _peek(c: httpx.AsyncClient, name: str) -> list[str]:
    got = (await c.post(f"/api/queues/%2F/{name}/get", json={"count": 10})).json()
    return [m["payload"] for m in got]


async def test_ring_in_delivery_then_rollback(client: httpx.AsyncClient, broker: Broker) -> None:
    await client.put("/api/queues/%2F/foo", json={"arguments": {"x-ring-size": 3}})
    open_consumer(broker, "foo")
    for n, p in enumerate("ABCD", start=1):
        await _publish(client, "foo", p)
        assert await _counts(client, "foo") == (n, n, 0)  # messageCount = deliveringCount = n
    # the consumer goes away without acking: A..D return to the head; the ring keeps B, C, D
    broker.channel_closed(1, 1, T0_MS)
    assert await _counts(client, "foo") == (3, 0, 0)
    q = (await client.get("/api/queues/%2F/foo")).json()
    assert q["counters"]["ring_evicted"] == 1
    assert await _peek(client, "foo") == ["B", "C", "D"]


async def test_ring_with_a_scheduled_message(client: httpx.AsyncClient, clock: Clock) -> None:
    await client.put("/api/queues/%2F/foo", json={"arguments": {"x-ring-size": 3}})
    await _publish(client, "foo", "A", headers={"_AMQ_SCHED_DELIVERY": clock.now_ms + 300_000})
    assert await _counts(client, "foo") == (1, 0, 1)
    for n, p in enumerate("BCD", start=2):
        await _publish(client, "foo", p)
        assert await _counts(client, "foo") == (n, 0, 1)  # messageCount 4 > ring-size 3
    # when A becomes due it goes to the head of a full ring and is itself removed
    assert (await client.post("/api/queues/%2F/foo/scheduled/deliver", json={})).json() == {
        "delivered": 1
    }
    assert await _counts(client, "foo") == (3, 0, 0)
    assert await _peek(client, "foo") == ["B", "C", "D"]


async def test_lower_ring_size_does_not_purge_and_does_not_grow(
    client: httpx.AsyncClient,
) -> None:
    await client.put("/api/queues/%2F/foo", json={"arguments": {"x-ring-size": 3}})
    for p in "ABC":
        await _publish(client, "foo", p)
    r = await client.put("/api/queues/%2F/foo/settings", json={"ring-size": 1})
    assert r.json()["ring_size"] == 1
    assert await _counts(client, "foo") == (3, 0, 0)
    await _publish(client, "foo", "D")
    total, _, _ = await _counts(client, "foo")
    assert total <= 3


async def test_qpid_ring_and_lvq_counters(client: httpx.AsyncClient) -> None:
    await client.put(
        "/api/queues/%2F/ticks",
        json={"arguments": {"qpid.policy_type": "ring", "qpid.max_count": 2}},
    )
    for p in ("RHT", "IBM", "JAVA"):
        await _publish(client, "ticks", p)
    q = (await client.get("/api/queues/%2F/ticks")).json()
    assert (q["messages"], q["counters"]["ring_evicted"]) == (2, 1)
    assert q["effective_settings"]["limit"]["family"] == "qpid"
    await client.put(
        "/api/queues/%2F/lvq", json={"arguments": {"qpid.last_value_queue_key": "sym"}}
    )
    for sym, px in (("RHT", "1"), ("IBM", "2"), ("RHT", "3")):
        await _publish(client, "lvq", px, headers={"sym": sym})
    q = (await client.get("/api/queues/%2F/lvq")).json()
    assert (q["messages"], q["counters"]["lvq_replaced"]) == (2, 1)
    assert sorted(await _peek(client, "lvq")) == ["2", "3"]
