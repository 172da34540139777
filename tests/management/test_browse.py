"""The console's peek browses in place: nothing taken, nothing redelivered, LVQs stay fresh."""

from __future__ import annotations

import httpx

from ringmq.core.broker import Broker


async def _publish(client: httpx.AsyncClient, rk: str, payload: str, **props: object) -> None:
    body = {"routing_key": rk, "payload": payload, "properties": props}
    assert (await client.post("/api/exchanges/%2F/amq.default/publish", json=body)).json() == {
        "routed": True
    }


async def test_browse_leaves_messages_in_place_with_their_properties(
    client: httpx.AsyncClient,
) -> None:
    await client.put("/api/queues/%2F/q", json={})
    for i in range(3):
        await _publish(client, "q", f"m{i}", headers={"n": i}, content_type="text/plain")
    got = (await client.post("/api/queues/%2F/q/browse", json={"count": 2})).json()
    assert [m["payload"] for m in got] == ["m0", "m1"]
    assert got[0]["properties"]["headers"] == {"n": 0}
    assert got[0]["properties"]["content_type"] == "text/plain"
    assert not any(m["redelivered"] for m in got)
    q = (await client.get("/api/queues/%2F/q")).json()
    assert (q["messages_ready"], q["messages_unacknowledged"]) == (3, 0)
    # a later get sees the first message as never delivered
    (first,) = (
        await client.post(
            "/api/queues/%2F/q/get", json={"count": 1, "ackmode": "ack_requeue_false"}
        )
    ).json()
    assert (first["payload"], first["redelivered"]) == ("m0", False)
    assert (await client.post("/api/queues/%2F/nope/browse", json={})).status_code == 404
    assert (await client.post("/api/queues/%2F/q/browse", json={"count": "x"})).status_code == 400


async def test_a_browsed_last_value_queue_keeps_the_newest_value(
    client: httpx.AsyncClient, broker: Broker
) -> None:
    await client.put("/api/queues/%2F/lvq", json={"arguments": {"x-last-value-key": "sym"}})
    await _publish(client, "lvq", "old", headers={"sym": "A"})
    got = (await client.post("/api/queues/%2F/lvq/browse", json={"count": 5})).json()
    assert [m["payload"] for m in got] == ["old"]
    await _publish(client, "lvq", "new", headers={"sym": "A"})
    got = (await client.post("/api/queues/%2F/lvq/browse", json={"count": 5})).json()
    assert [m["payload"] for m in got] == ["new"]
