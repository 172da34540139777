"""The HTTP API against a real core Broker: every endpoint, auth failures, bad input."""

from __future__ import annotations

import base64
from typing import Any

import httpx
import pytest

from ringmq.core.broker import Broker
from ringmq.core.effects import Deliver
from ringmq.management.port import ConnectionInfo

from .conftest import T0_MS, Clock, FakeRuntime, open_consumer


async def publish(c: httpx.AsyncClient, rk: str, payload: str, **props: Any) -> bool:
    r = await c.post(
        "/api/exchanges/%2F/amq.default/publish",
        json={
            "routing_key": rk,
            "payload": payload,
            "payload_encoding": "string",
            "properties": props,
        },
    )
    assert r.status_code == 200, r.text
    return bool(r.json()["routed"])


async def declare(c: httpx.AsyncClient, name: str, **args: Any) -> httpx.Response:
    return await c.put(f"/api/queues/%2F/{name}", json={"durable": True, "arguments": args})


async def queue(c: httpx.AsyncClient, name: str) -> dict[str, Any]:
    r = await c.get(f"/api/queues/%2F/{name}")
    assert r.status_code == 200, r.text
    data: dict[str, Any] = r.json()
    return data


# -- auth -------------------------------------------------------------------------------------


async def test_missing_credentials_get_401_without_a_browser_prompt(
    client: httpx.AsyncClient,
) -> None:
    # No Basic challenge: a browser never prompts, so never remembers credentials that it
    # would attach to a cross-site request (CSRF, docs/management.md).
    for headers in ({}, {"Authorization": "Basic " + base64.b64encode(b"guest:bad").decode()}):
        r = await client.get("/api/overview", auth=None, headers=headers)
        assert r.status_code == 401
        assert r.json()["error"] == "not_authorized"
        assert "www-authenticate" not in r.headers


@pytest.mark.parametrize(
    "header",
    ["Basic " + base64.b64encode(b"guest:wrong").decode(), "Basic !!!notbase64", "Bearer x"],
)
async def test_bad_credentials_get_401(client: httpx.AsyncClient, header: str) -> None:
    r = await client.get("/api/queues", auth=None, headers={"Authorization": header})
    assert r.status_code == 401


async def test_user_without_management_tag_is_refused(
    client: httpx.AsyncClient, broker: Broker
) -> None:
    broker.auth.add_user("app", password="secret", tags=())
    broker.auth.set_permissions("app", "/")
    r = await client.get("/api/overview", auth=("app", "secret"))
    assert r.status_code == 401
    assert r.json()["reason"] == "Not management user"
    broker.auth.add_user("mon", password="secret", tags=("monitoring",))
    assert (await client.get("/api/whoami", auth=("mon", "secret"))).json() == {
        "name": "mon",
        "tags": ["monitoring"],
    }


async def test_metrics_and_console_need_no_auth(client: httpx.AsyncClient) -> None:
    assert (await client.get("/metrics", auth=None)).status_code == 200
    page = await client.get("/", auth=None)
    assert page.status_code == 200
    assert '<script src="/app.js">' in page.text
    assert (await client.get("/app.js", auth=None)).status_code == 200
    assert (await client.get("/chart.js", auth=None)).status_code == 200


# -- overview, vhosts, users --------------------------------------------------------------------


async def test_overview_shape(client: httpx.AsyncClient) -> None:
    await declare(client, "q1")
    await publish(client, "q1", "hello")
    o = (await client.get("/api/overview")).json()
    assert o["product_name"] == "RingMQ"
    assert o["node"] == "ringmq@test"
    assert o["object_totals"]["queues"] == 1
    assert o["object_totals"]["exchanges"] == 6  # RabbitMQ's standard set
    assert o["object_totals"]["connections"] == 0
    assert o["queue_totals"]["messages"] == 1
    assert o["queue_totals"]["messages_ready"] == 1
    assert o["message_stats"]["publish"] == 1
    assert {ln["protocol"] for ln in o["listeners"]} == {"amqp", "http"}
    assert {t["name"] for t in o["exchange_types"]} == {
        "direct",
        "fanout",
        "topic",
        "headers",
        "x-delayed-message",
    }


async def test_vhosts_users_permissions(client: httpx.AsyncClient) -> None:
    vhosts = (await client.get("/api/vhosts")).json()
    assert [v["name"] for v in vhosts] == ["/"]
    assert (await client.get("/api/vhosts/%2F")).json()["name"] == "/"
    assert (await client.get("/api/vhosts/nope")).status_code == 404
    users = (await client.get("/api/users")).json()
    assert users[0]["name"] == "guest"
    assert users[0]["tags"] == ["administrator"]
    assert (await client.get("/api/users/guest")).json()["name"] == "guest"
    assert (await client.get("/api/users/nobody")).status_code == 404
    perms = (await client.get("/api/permissions")).json()
    assert perms == [
        {"user": "guest", "vhost": "/", "configure": ".*", "write": ".*", "read": ".*"}
    ]


# -- queues -------------------------------------------------------------------------------------


async def test_declare_queue_created_then_no_content(client: httpx.AsyncClient) -> None:
    assert (await declare(client, "orders", **{"x-max-length": 10})).status_code == 201
    assert (await declare(client, "orders", **{"x-max-length": 10})).status_code == 204
    q = await queue(client, "orders")
    assert q["arguments"] == {"x-max-length": 10}
    assert q["durable"] is True
    assert q["effective_settings"]["max_length"] == 10
    assert q["ring_size"] == -1


async def test_redeclare_with_other_arguments_is_400_and_changes_nothing(
    client: httpx.AsyncClient,
) -> None:
    await declare(client, "orders", **{"x-max-length": 10})
    r = await declare(client, "orders", **{"x-max-length": 11})
    assert r.status_code == 400
    assert r.json()["error"] == "bad_request"
    assert "PRECONDITION_FAILED" in r.json()["reason"]
    assert (await queue(client, "orders"))["arguments"] == {"x-max-length": 10}
    # the management channel recovered: later requests still work
    assert (await declare(client, "other")).status_code == 201


@pytest.mark.parametrize(
    "body",
    [
        {"arguments": {"x-ring-size": "three"}},
        {"arguments": {"x-max-length": -1}},
        {"arguments": "not-an-object"},
        {"durable": "maybe"},
    ],
)
async def test_bad_queue_declarations_are_400_and_create_nothing(
    client: httpx.AsyncClient, body: dict[str, Any]
) -> None:
    r = await client.put("/api/queues/%2F/bad", json=body)
    assert r.status_code == 400, r.text
    assert (await client.get("/api/queues/%2F/bad")).status_code == 404


async def test_invalid_json_body_is_400(client: httpx.AsyncClient) -> None:
    r = await client.put(
        "/api/queues/%2F/q", content=b"{nope", headers={"content-type": "application/json"}
    )
    assert r.status_code == 400
    assert "JSON" in r.json()["reason"]
    r = await client.put("/api/queues/%2F/q", json=[1, 2])
    assert r.status_code == 400


async def test_missing_objects_are_404(client: httpx.AsyncClient) -> None:
    for method, path in [
        ("GET", "/api/queues/%2F/nope"),
        ("DELETE", "/api/queues/%2F/nope"),
        ("DELETE", "/api/queues/%2F/nope/contents"),
        ("POST", "/api/queues/%2F/nope/get"),
        ("PUT", "/api/queues/%2F/nope/settings"),
        ("GET", "/api/queues/%2F/nope/scheduled"),
        ("GET", "/api/queues/nohost"),
        ("GET", "/api/exchanges/%2F/nope"),
        ("GET", "/api/policies/%2F/nope"),
        ("GET", "/api/connections/nope"),
        ("GET", "/api/no-such-endpoint"),
    ]:
        body = {"count": 1} if method in ("POST", "PUT") else None
        r = await client.request(method, path, json=body)
        assert r.status_code == 404, (method, path, r.status_code, r.text)


async def test_queue_names_with_slashes_and_percent_round_trip(client: httpx.AsyncClient) -> None:
    assert (await client.put("/api/queues/%2F/a%2Fb%25c", json={})).status_code == 201
    names = [q["name"] for q in (await client.get("/api/queues")).json()]
    assert names == ["a/b%c"]
    assert (await client.get("/api/queues/%2F/a%2Fb%25c")).json()["name"] == "a/b%c"


async def test_delete_queue_with_conditions(client: httpx.AsyncClient) -> None:
    await declare(client, "q")
    await publish(client, "q", "x")
    r = await client.delete("/api/queues/%2F/q", params={"if-empty": "true"})
    assert r.status_code == 400
    assert (await queue(client, "q"))["messages"] == 1
    assert (await client.delete("/api/queues/%2F/q")).status_code == 204
    assert (await client.get("/api/queues/%2F/q")).status_code == 404


async def test_seed_ring_counts_unacked_deliveries(
    client: httpx.AsyncClient, broker: Broker, runtime: FakeRuntime
) -> None:
    """Ring of 3, a consumer takes four unacked deliveries: messageCount 4, deliveringCount 4."""
    await declare(client, "ring", **{"x-ring-size": 3})
    open_consumer(broker, "ring")
    for i in range(4):
        assert await publish(client, "ring", f"m{i}")
    q = await queue(client, "ring")
    assert q["messages"] == 4
    assert q["messages_unacknowledged"] == 4
    assert q["messages_ready"] == 0
    assert q["ring_size"] == 3
    assert q["consumers"] == 1
    assert q["counters"]["ring_evicted"] == 0
    delivered = [e for e in runtime.applied if isinstance(e, Deliver) and e.conn_id == 1]
    assert [e.message.body for e in delivered] == [b"m0", b"m1", b"m2", b"m3"]
    consumers = (await client.get("/api/consumers")).json()
    assert consumers[0]["queue"] == {"name": "ring", "vhost": "/"}
    assert consumers[0]["consumer_tag"] == "c1"
    channels = (await client.get("/api/channels")).json()
    assert channels[0]["messages_unacknowledged"] == 4
    assert channels[0]["consumer_count"] == 1


async def test_seed_ring_evicts_head_when_full(client: httpx.AsyncClient) -> None:
    await declare(client, "ring", **{"x-ring-size": 3})
    for p in "ABCD":
        await publish(client, "ring", p)
    q = await queue(client, "ring")
    assert q["messages"] == 3
    assert q["counters"]["ring_evicted"] == 1
    got = (await client.post("/api/queues/%2F/ring/get", json={"count": 5})).json()
    assert [m["payload"] for m in got] == ["B", "C", "D"]


async def test_get_peeks_or_takes(client: httpx.AsyncClient) -> None:
    await declare(client, "q")
    for p in ("one", "two", "three"):
        await publish(client, "q", p, headers={"k": "v"}, content_type="text/plain")
    peek = await client.post(
        "/api/queues/%2F/q/get", json={"count": 2, "ackmode": "ack_requeue_true"}
    )
    msgs = peek.json()
    assert [m["payload"] for m in msgs] == ["one", "two"]
    assert msgs[0]["properties"]["headers"] == {"k": "v"}
    assert msgs[0]["properties"]["content_type"] == "text/plain"
    assert msgs[0]["payload_encoding"] == "string"
    assert msgs[1]["message_count"] == 1
    assert (await queue(client, "q"))["messages_ready"] == 3
    again = (await client.post("/api/queues/%2F/q/get", json={"count": 1})).json()
    assert again[0]["payload"] == "one"
    assert again[0]["redelivered"] is True
    taken = await client.post(
        "/api/queues/%2F/q/get", json={"count": 2, "ackmode": "ack_requeue_false"}
    )
    assert [m["payload"] for m in taken.json()] == ["one", "two"]
    assert (await queue(client, "q"))["messages"] == 1
    b64 = await client.post("/api/queues/%2F/q/get", json={"count": 1, "encoding": "base64"})
    assert base64.b64decode(b64.json()[0]["payload"]) == b"three"


@pytest.mark.parametrize(
    "body",
    [
        {"count": 0},
        {"count": "many"},
        {"count": 1, "ackmode": "ack_maybe"},
        {"count": 1, "encoding": "utf-16"},
    ],
)
async def test_get_bad_input_is_400_and_touches_nothing(
    client: httpx.AsyncClient, body: dict[str, Any]
) -> None:
    await declare(client, "q")
    await publish(client, "q", "x")
    r = await client.post("/api/queues/%2F/q/get", json=body)
    assert r.status_code == 400
    q = await queue(client, "q")
    assert q["messages_ready"] == 1
    assert "redeliver" not in q["message_stats"]


async def test_purge(client: httpx.AsyncClient) -> None:
    await declare(client, "q")
    for i in range(5):
        await publish(client, "q", str(i))
    assert (await client.delete("/api/queues/%2F/q/contents")).status_code == 204
    assert (await queue(client, "q"))["messages"] == 0


async def test_update_ring_size_at_runtime_does_not_purge(client: httpx.AsyncClient) -> None:
    await declare(client, "ring", **{"x-ring-size": 3})
    for p in "ABC":
        await publish(client, "ring", p)
    r = await client.put("/api/queues/%2F/ring/settings", json={"ring-size": 2})
    assert r.status_code == 200, r.text
    assert r.json()["ring_size"] == 2
    assert r.json()["effective_settings"]["sources"]["ring_size"] == "argument"
    q = await queue(client, "ring")
    assert q["messages"] == 3  # lowering the ring size does not delete messages
    assert q["arguments"] == {"x-ring-size": 2}  # the queue's own configuration changed
    await publish(client, "ring", "D")
    q = await queue(client, "ring")
    assert q["messages"] <= 3  # new messages evict from the head: the queue does not grow
    assert q["counters"]["ring_evicted"] >= 1
    r = await client.put("/api/queues/%2F/ring/settings", json={"ring-size": 10})
    assert r.json()["ring_size"] == 10


@pytest.mark.parametrize("body", [{"ring-size": "big"}, {"colour": "blue"}, {}, {"ring-size": -5}])
async def test_bad_settings_are_400_and_change_nothing(
    client: httpx.AsyncClient, body: dict[str, Any]
) -> None:
    await declare(client, "ring", **{"x-ring-size": 3})
    r = await client.put("/api/queues/%2F/ring/settings", json=body)
    assert r.status_code == 400, r.text
    assert (await queue(client, "ring"))["ring_size"] == 3


async def test_scheduled_list_deliver_now_and_purge(
    client: httpx.AsyncClient, clock: Clock
) -> None:
    await declare(client, "q")
    due = clock.now_ms + 3_600_000
    for i in range(3):
        await publish(client, "q", f"later{i}", headers={"_AMQ_SCHED_DELIVERY": due})
    await publish(client, "q", "now")
    q = await queue(client, "q")
    assert q["messages_scheduled"] == 3
    assert q["messages_ready"] == 1
    assert q["messages"] == 4  # ready + unacked + scheduled + paged
    listed = (await client.get("/api/queues/%2F/q/scheduled")).json()
    assert [s["payload"] for s in listed] == ["later0", "later1", "later2"]
    assert all(s["due_ms"] == due for s in listed)
    r = await client.post("/api/queues/%2F/q/scheduled/deliver", json={"seqs": [listed[0]["seq"]]})
    assert r.json() == {"delivered": 1}
    q = await queue(client, "q")
    assert (q["messages_scheduled"], q["messages_ready"]) == (2, 2)
    assert (
        await client.post("/api/queues/%2F/q/scheduled/deliver", json={"seqs": "x"})
    ).status_code == 400
    assert (await client.delete("/api/queues/%2F/q/scheduled")).json() == {"purged": 2}
    q = await queue(client, "q")
    assert (q["messages_scheduled"], q["messages"]) == (0, 2)


async def test_lvq_and_overflow_counters(client: httpx.AsyncClient) -> None:
    await declare(client, "lvq", **{"x-last-value-key": "k"})
    for v in ("1", "2", "3"):
        await publish(client, "lvq", v, headers={"k": "same"})
    lvq = await queue(client, "lvq")
    assert lvq["messages"] == 1
    assert lvq["counters"]["lvq_replaced"] == 2
    await declare(client, "capped", **{"x-max-length": 1, "x-overflow": "reject-publish"})
    await publish(client, "capped", "a")
    await publish(client, "capped", "b")
    capped = await queue(client, "capped")
    assert capped["messages"] == 1
    assert capped["counters"]["overflow_rejected"] == 1


async def test_dead_lettered_by_reason(client: httpx.AsyncClient) -> None:
    await declare(client, "dlq")
    await client.put("/api/exchanges/%2F/dlx", json={"type": "fanout"})
    await client.post("/api/bindings/%2F/e/dlx/q/dlq", json={})
    await declare(client, "src", **{"x-max-length": 1, "x-dead-letter-exchange": "dlx"})
    for p in "abc":
        await publish(client, "src", p)
    src = await queue(client, "src")
    assert src["counters"]["dead_lettered"] == {"maxlen": 2}
    assert src["counters"]["dead_lettered_total"] == 2
    assert (await queue(client, "dlq"))["messages"] == 2


# -- exchanges, publish, bindings -----------------------------------------------------------------


async def test_exchange_lifecycle_and_bindings(client: httpx.AsyncClient) -> None:
    r = await client.put("/api/exchanges/%2F/logs", json={"type": "topic", "durable": True})
    assert r.status_code == 201
    assert (await client.put("/api/exchanges/%2F/logs", json={"type": "topic"})).status_code == 204
    x = (await client.get("/api/exchanges/%2F/logs")).json()
    assert (x["type"], x["durable"], x["internal"]) == ("topic", True, False)
    default = (await client.get("/api/exchanges/%2F/amq.default")).json()
    assert default["name"] == ""
    await declare(client, "errors")
    r = await client.post(
        "/api/bindings/%2F/e/logs/q/errors", json={"routing_key": "*.error", "arguments": {}}
    )
    assert r.status_code == 201
    assert r.headers["location"] == "*.error"
    pair = (await client.get("/api/bindings/%2F/e/logs/q/errors")).json()
    assert [b["routing_key"] for b in pair] == ["*.error"]
    assert (await client.get("/api/bindings/%2F/e/logs/q/errors/*.error")).status_code == 200
    src = (await client.get("/api/exchanges/%2F/logs/bindings/source")).json()
    assert [(b["destination"], b["destination_type"]) for b in src] == [("errors", "queue")]
    qb = (await client.get("/api/queues/%2F/errors/bindings")).json()
    assert {b["source"] for b in qb} == {"", "logs"}
    all_b = (await client.get("/api/bindings/%2F")).json()
    assert any(b["source"] == "logs" for b in all_b)
    r = await client.post(
        "/api/exchanges/%2F/logs/publish",
        json={"routing_key": "app.error", "payload": "boom", "properties": {}},
    )
    assert r.json() == {"routed": True}
    r = await client.post(
        "/api/exchanges/%2F/logs/publish",
        json={"routing_key": "app.info", "payload": "fine", "properties": {}},
    )
    assert r.json() == {"routed": False}
    assert (await queue(client, "errors"))["messages"] == 1
    assert (await client.delete("/api/bindings/%2F/e/logs/q/errors/*.error")).status_code == 204
    assert (await client.get("/api/bindings/%2F/e/logs/q/errors")).json() == []
    assert (await client.delete("/api/bindings/%2F/e/logs/q/errors/*.error")).status_code == 404
    assert (await client.delete("/api/exchanges/%2F/logs")).status_code == 204
    assert (await client.get("/api/exchanges/%2F/logs")).status_code == 404


async def test_exchange_to_exchange_binding(client: httpx.AsyncClient) -> None:
    await client.put("/api/exchanges/%2F/a", json={"type": "fanout"})
    await client.put("/api/exchanges/%2F/b", json={"type": "fanout"})
    await declare(client, "q")
    await client.post("/api/bindings/%2F/e/b/q/q", json={})
    r = await client.post("/api/bindings/%2F/e/a/e/b", json={"routing_key": ""})
    assert r.status_code == 201
    assert r.headers["location"] == "~"
    r = await client.post("/api/exchanges/%2F/a/publish", json={"routing_key": "", "payload": "x"})
    assert r.json() == {"routed": True}
    dest = (await client.get("/api/exchanges/%2F/b/bindings/destination")).json()
    assert [b["source"] for b in dest] == ["a"]


@pytest.mark.parametrize(
    ("path", "body", "status"),
    [
        ("/api/exchanges/%2F/x", {"type": "fancy"}, 400),
        ("/api/exchanges/%2F/x", {}, 400),
        ("/api/exchanges/%2F/amq.default", {"type": "direct"}, 400),
        ("/api/exchanges/%2F/amq.custom", {"type": "direct"}, 400),
    ],
)
async def test_bad_exchange_declarations(
    client: httpx.AsyncClient, path: str, body: dict[str, Any], status: int
) -> None:
    assert (await client.put(path, json=body)).status_code == status
    names = {x["name"] for x in (await client.get("/api/exchanges")).json()}
    assert "x" not in names
    assert "amq.custom" not in names


@pytest.mark.parametrize(
    "body",
    [
        {"routing_key": "q", "payload": "x", "payload_encoding": "rot13"},
        {"routing_key": "q", "payload": "***", "payload_encoding": "base64"},
        {"routing_key": "q"},
        {"payload": "x"},
        {"routing_key": "q", "payload": "x", "properties": {"colour": "red"}},
        {"routing_key": "q", "payload": "x", "properties": {"delivery_mode": "two"}},
    ],
)
async def test_bad_publish_is_400_and_enqueues_nothing(
    client: httpx.AsyncClient, body: dict[str, Any]
) -> None:
    await declare(client, "q")
    r = await client.post("/api/exchanges/%2F/amq.default/publish", json=body)
    assert r.status_code == 400, r.text
    assert (await queue(client, "q"))["messages"] == 0


async def test_publish_base64_and_to_missing_exchange(client: httpx.AsyncClient) -> None:
    await declare(client, "q")
    r = await client.post(
        "/api/exchanges/%2F/amq.default/publish",
        json={
            "routing_key": "q",
            "payload": base64.b64encode(b"\x00\xff").decode(),
            "payload_encoding": "base64",
        },
    )
    assert r.json() == {"routed": True}
    got = (await client.post("/api/queues/%2F/q/get", json={"count": 1})).json()
    assert got[0]["payload_encoding"] == "base64"
    assert base64.b64decode(got[0]["payload"]) == b"\x00\xff"
    r = await client.post(
        "/api/exchanges/%2F/nope/publish", json={"routing_key": "q", "payload": "x"}
    )
    assert r.status_code == 404


async def test_binding_to_missing_queue_is_404(client: httpx.AsyncClient) -> None:
    r = await client.post("/api/bindings/%2F/e/amq.direct/q/ghost", json={"routing_key": "k"})
    assert r.status_code == 404
    r = await client.post("/api/bindings/%2F/e/amq.direct/z/ghost", json={})
    assert r.status_code == 404


# -- policies -------------------------------------------------------------------------------------


async def test_policy_applies_and_clears(client: httpx.AsyncClient) -> None:
    await declare(client, "ring.a")
    await declare(client, "other")
    body = {"pattern": "^ring\\.", "definition": {"ring-size": 2}, "apply-to": "queues"}
    assert (await client.put("/api/policies/%2F/rings", json=body)).status_code == 201
    assert (await client.put("/api/policies/%2F/rings", json=body)).status_code == 204
    a = await queue(client, "ring.a")
    assert (a["ring_size"], a["policy"]) == (2, "rings")
    assert a["effective_policy_definition"] == {
        k: v for k, v in a["effective_settings"].items() if not k.startswith("x-")
    }
    assert (await queue(client, "other"))["ring_size"] == -1
    listed = (await client.get("/api/policies")).json()
    assert listed == [
        {
            "vhost": "/",
            "name": "rings",
            "pattern": "^ring\\.",
            "apply-to": "queues",
            "definition": {"ring-size": 2},
            "priority": 0,
        }
    ]
    assert (await client.get("/api/policies/%2F/rings")).json()["name"] == "rings"
    assert (await client.delete("/api/policies/%2F/rings")).status_code == 204
    assert (await queue(client, "ring.a"))["ring_size"] == -1
    assert (await client.delete("/api/policies/%2F/rings")).status_code == 404


@pytest.mark.parametrize(
    "body",
    [
        {"pattern": "(", "definition": {"ring-size": 2}},
        {"pattern": ".*", "definition": {}},
        {"pattern": ".*", "definition": {"ring-size": "two"}},
        {"pattern": ".*", "definition": {"ring-size": 2}, "apply-to": "everything"},
        {"definition": {"ring-size": 2}},
    ],
)
async def test_bad_policies_are_400_and_not_stored(
    client: httpx.AsyncClient, body: dict[str, Any]
) -> None:
    await declare(client, "q")
    assert (await client.put("/api/policies/%2F/p", json=body)).status_code == 400
    assert (await client.get("/api/policies")).json() == []
    assert (await queue(client, "q"))["ring_size"] == -1


# -- definitions -------------------------------------------------------------------------------


async def test_definitions_export_and_import(client: httpx.AsyncClient) -> None:
    await declare(client, "keep", **{"x-ring-size": 5})
    await client.put("/api/exchanges/%2F/ev", json={"type": "fanout"})
    await client.post("/api/bindings/%2F/e/ev/q/keep", json={})
    await client.put(
        "/api/policies/%2F/p", json={"pattern": "^zz", "definition": {"message-ttl": 1000}}
    )
    doc = (await client.get("/api/definitions")).json()
    assert [q["name"] for q in doc["queues"]] == ["keep"]
    assert [x["name"] for x in doc["exchanges"]] == ["ev"]  # built-ins are not exported
    assert [(b["source"], b["destination"]) for b in doc["bindings"]] == [("ev", "keep")]
    assert [p["name"] for p in doc["policies"]] == ["p"]
    assert doc["users"][0]["name"] == "guest"
    assert doc["vhosts"] == [{"name": "/", "description": "", "tags": []}]
    new = {
        "queues": [{"name": "imported", "vhost": "/", "durable": True, "arguments": {}}],
        "exchanges": [{"name": "ix", "vhost": "/", "type": "direct"}],
        "bindings": [
            {
                "source": "ix",
                "vhost": "/",
                "destination": "imported",
                "destination_type": "queue",
                "routing_key": "k",
                "arguments": {},
            }
        ],
    }
    assert (await client.post("/api/definitions", json=new)).status_code == 204
    assert (await queue(client, "imported"))["name"] == "imported"
    r = await client.post(
        "/api/exchanges/%2F/ix/publish", json={"routing_key": "k", "payload": "x"}
    )
    assert r.json() == {"routed": True}
    # importing the export again is a no-op
    assert (await client.post("/api/definitions", json=doc)).status_code == 204
    per_vhost = (await client.get("/api/definitions/%2F")).json()
    assert "users" not in per_vhost
    assert "vhost" not in per_vhost["queues"][0]


@pytest.mark.parametrize(
    "doc",
    [
        {
            "queues": [{"name": "n1", "vhost": "/"}],
            "bindings": [
                {"source": "ghost", "vhost": "/", "destination": "n1", "destination_type": "queue"}
            ],
        },
        {
            "queues": [
                {"name": "n1", "vhost": "/"},
                {"name": "keep", "vhost": "/", "arguments": {"x-ring-size": 9}},
            ]
        },
        {"queues": [{"name": "n1", "vhost": "elsewhere"}]},
        {"queues": [{"name": "n1", "vhost": "/", "durable": "yes"}]},
        {"queues": "n1"},
        {"queues": [{"name": "n1", "vhost": "/"}], "users": [{"name": "mallory"}]},
        {
            "queues": [{"name": "n1", "vhost": "/"}],
            "exchanges": [{"name": "n1x", "vhost": "/", "type": "weird"}],
        },
    ],
)
async def test_bad_definitions_change_nothing(
    client: httpx.AsyncClient, doc: dict[str, Any]
) -> None:
    await declare(client, "keep", **{"x-ring-size": 5})
    before = (await client.get("/api/definitions")).json()
    assert (await client.post("/api/definitions", json=doc)).status_code == 400
    assert (await client.get("/api/definitions")).json() == before


# -- paging -------------------------------------------------------------------------------------


async def test_paging_sorting_filtering(client: httpx.AsyncClient) -> None:
    for i in range(7):
        await declare(client, f"q{i}")
        for _ in range(i):
            await publish(client, f"q{i}", "x")
    await declare(client, "other")
    page = (await client.get("/api/queues", params={"page": 2, "page_size": 3})).json()
    assert page["total_count"] == 8
    assert page["filtered_count"] == 8
    assert page["page_count"] == 3
    assert page["item_count"] == 3
    assert [q["name"] for q in page["items"]] == ["q2", "q3", "q4"]  # after "other", q0, q1
    by_depth = (
        await client.get("/api/queues", params={"sort": "messages", "sort_reverse": "true"})
    ).json()
    assert [q["name"] for q in by_depth[:3]] == ["q6", "q5", "q4"]
    filtered = (
        await client.get("/api/queues", params={"name": "Q", "page": 1, "page_size": 100})
    ).json()
    assert filtered["filtered_count"] == 7
    assert filtered["total_count"] == 8
    regex = (
        await client.get("/api/queues", params={"name": "^q[12]$", "use_regex": "true"})
    ).json()
    assert [q["name"] for q in regex] == ["q1", "q2"]
    cols = (
        await client.get(
            "/api/queues", params={"columns": "name,message_stats.publish", "name": "q6"}
        )
    ).json()
    assert cols == [{"name": "q6", "message_stats": {"publish": 6}}]
    dotted = (await client.get("/api/queues", params={"sort": "message_stats.publish"})).json()
    assert dotted[0]["name"] in ("other", "q0")  # no publishes sort first
    assert dotted[-1]["name"] == "q6"


@pytest.mark.parametrize(
    "params",
    [
        {"page": "0"},
        {"page": "x"},
        {"page": "1", "page_size": "501"},
        {"page": "9", "page_size": "10"},
        {"name": "(", "use_regex": "true"},
    ],
)
async def test_bad_paging_is_400(client: httpx.AsyncClient, params: dict[str, str]) -> None:
    await declare(client, "q")
    r = await client.get("/api/queues", params=params)
    assert r.status_code == 400
    assert r.json()["error"] == "bad_request"


# -- connections --------------------------------------------------------------------------------


def _conn(name: str, conn_id: int, **kw: Any) -> ConnectionInfo:
    return ConnectionInfo(
        conn_id=conn_id,
        name=name,
        user="guest",
        vhost="/",
        peer_host="127.0.0.1",
        peer_port=50000 + conn_id,
        host="127.0.0.1",
        port=5672,
        connected_at_ms=T0_MS,
        **kw,
    )


async def test_connections_show_who_is_blocked_and_close(
    client: httpx.AsyncClient, runtime: FakeRuntime
) -> None:
    runtime.conns = [
        _conn(
            "127.0.0.1:50001 -> 127.0.0.1:5672",
            1,
            channels=2,
            client_properties={"product": b"pika", "capabilities": {"basic.nack": True}},
        ),
        _conn(
            "127.0.0.1:50002 -> 127.0.0.1:5672",
            2,
            state="blocked",
            blocked_reason="memory alarm: 95% of the high watermark",
        ),
    ]
    conns = (await client.get("/api/connections")).json()
    assert [c["state"] for c in conns] == ["running", "blocked"]
    assert conns[1]["blocked_reason"].startswith("memory alarm")
    assert conns[0]["client_properties"]["product"] == "pika"
    assert conns[0]["protocol"] == "AMQP 0-9-1"
    o = (await client.get("/api/overview")).json()
    assert o["blocked_connections"] == 1
    assert o["object_totals"]["connections"] == 2
    name = "127.0.0.1%3A50002%20-%3E%20127.0.0.1%3A5672"
    one = (await client.get(f"/api/connections/{name}")).json()
    assert one["peer_port"] == 50002
    r = await client.delete(f"/api/connections/{name}", headers={"X-Reason": "maintenance"})
    assert r.status_code == 204
    assert runtime.closed == [("127.0.0.1:50002 -> 127.0.0.1:5672", "maintenance")]


async def test_connection_byte_rates_and_samples(
    client: httpx.AsyncClient, runtime: FakeRuntime, clock: Clock
) -> None:
    """A connection's byte rates come from the server's samples, at once (issue 30)."""
    name = "127.0.0.1:50001 -> 127.0.0.1:5672"
    quoted = "127.0.0.1%3A50001%20-%3E%20127.0.0.1%3A5672"
    for i, (recv, send) in enumerate(((0, 0), (5_000, 1_000), (15_000, 1_500))):
        runtime.conns = [_conn(name, 1, recv_oct=recv, send_oct=send)]
        if i:
            clock.advance(5_000)
        await client.get("/api/overview")  # a stale sample is refreshed before answering
    one = (await client.get(f"/api/connections/{quoted}")).json()
    assert one["recv_oct_details"]["rate"] == 2_000.0
    assert one["send_oct_details"]["rate"] == 100.0
    assert "samples" not in one["recv_oct_details"]
    r = await client.get(
        f"/api/connections/{quoted}", params={"data_rates_age": 60, "data_rates_incr": 5}
    )
    samples = r.json()["recv_oct_details"]["samples"]
    assert [s["sample"] for s in samples] == [15_000, 5_000, 0]
    listed = (await client.get("/api/connections")).json()
    assert listed[0]["recv_oct_details"]["rate"] == 2_000.0


# -- rates ----------------------------------------------------------------------------------------


async def test_message_rates_from_timed_samples(client: httpx.AsyncClient, clock: Clock) -> None:
    await declare(client, "q")
    clock.advance(5_000)
    await queue(client, "q")  # a stale sample is refreshed before answering: q's first sample
    for i in range(10):
        await publish(client, "q", str(i))
    clock.advance(5_000)
    q = await queue(client, "q")  # the stale sample is refreshed before answering
    assert q["message_stats"]["publish"] == 10
    assert q["message_stats"]["publish_details"]["rate"] == 2.0
    assert q["messages_details"]["rate"] == 2.0
    o = (await client.get("/api/overview")).json()
    assert o["message_stats"]["publish_details"]["rate"] == 2.0
    history = (await client.get("/api/ringmq/rates")).json()
    assert history[-1]["publish"] == 2.0
    assert history[-1]["t"] == clock.now_ms
    clock.advance(5_000)
    q = await queue(client, "q")
    assert q["message_stats"]["publish_details"]["rate"] == 0.0


async def test_queue_history_as_rabbitmq_samples(client: httpx.AsyncClient, clock: Clock) -> None:
    """`lengths_age`/`msg_rates_age` answer the last minutes the server kept (issue 30)."""
    await declare(client, "q")
    clock.advance(5_000)
    await queue(client, "q")  # samples at 0 messages
    for burst in (10, 5):
        for i in range(burst):
            await publish(client, "q", str(i))
        clock.advance(5_000)
        await queue(client, "q")  # a sample per interval, as the timer takes them
    plain = await queue(client, "q")
    assert "samples" not in plain["messages_details"]
    r = await client.get(
        "/api/queues/%2F/q",
        params={"lengths_age": 60, "lengths_incr": 5, "msg_rates_age": 60, "msg_rates_incr": 5},
    )
    q = r.json()
    samples = q["messages_details"]["samples"]
    # newest first, at multiples of the increment, values from before this request
    assert [s["sample"] for s in samples][:3] == [15, 10, 0]
    times = [s["timestamp"] for s in samples]
    assert times == sorted(times, reverse=True)
    assert all(t % 5_000 == 0 for t in times)
    assert times[0] <= clock.now_ms
    assert [s["sample"] for s in q["message_stats"]["publish_details"]["samples"]][:2] == [15, 10]
    details = q["messages_details"]
    assert details["avg"] == sum(s["sample"] for s in samples) / len(samples)
    assert details["avg_rate"] > 0
    assert q["messages_ready_details"]["samples"][0]["sample"] == 15
    r = await client.get("/api/queues/%2F/q", params={"lengths_incr": 0})
    assert r.status_code == 400


async def test_loopback_only_user_is_refused_from_a_remote_address(
    broker: Broker, runtime: FakeRuntime, clock: Clock
) -> None:
    from ringmq.management.app import create_app

    broker.auth.add_user("ops", password="pw", tags=("administrator",))
    app = create_app(broker, runtime, background_rates=False, clock_ms=clock)
    remote = httpx.ASGITransport(app=app, client=("192.0.2.7", 40000))
    async with httpx.AsyncClient(transport=remote, base_url="http://testserver") as c:
        r = await c.get("/api/overview", auth=("guest", "guest"))
        assert r.status_code == 401
        assert r.json()["reason"] == "User can only log in via localhost"
        assert (await c.get("/api/overview", auth=("ops", "pw"))).status_code == 200


# -- users, vhosts, permissions (administrator only) ---------------------------------------------

_ALL = {"configure": ".*", "write": ".*", "read": ".*"}


async def test_vhost_user_and_permission_lifecycle(client: httpx.AsyncClient) -> None:
    assert (await client.put("/api/vhosts/staging", json={})).status_code == 201
    assert (await client.put("/api/vhosts/staging", json={})).status_code == 204
    assert "staging" in [v["name"] for v in (await client.get("/api/vhosts")).json()]
    r = await client.put(
        "/api/users/ops", json={"password": "s3cret", "tags": "management,policymaker"}
    )
    assert r.status_code == 201
    assert (await client.get("/api/users/ops")).json()["tags"] == ["management", "policymaker"]
    body = {"configure": "^ops\\.", "write": ".*", "read": ".*"}
    assert (await client.put("/api/permissions/staging/ops", json=body)).status_code == 201
    perm = (await client.get("/api/permissions/staging/ops")).json()
    assert perm == {"user": "ops", "vhost": "staging", **body}
    whoami = await client.get("/api/whoami", auth=("ops", "s3cret"))
    assert whoami.json() == {"name": "ops", "tags": ["management", "policymaker"]}
    # a management user may read but not administer
    r = await client.put("/api/vhosts/other", json={}, auth=("ops", "s3cret"))
    assert r.status_code == 401
    assert r.json()["reason"] == "Not administrator user"
    assert (await client.get("/api/vhosts/other")).status_code == 404
    # an administrator acts in a vhost with its own permissions there, as RabbitMQ's does
    r = await client.put("/api/queues/staging/q", json={})
    assert (r.status_code, r.json()["error"]) == (401, "not_authorised")
    assert (await client.put("/api/permissions/staging/guest", json=_ALL)).status_code == 201
    assert (await client.put("/api/queues/staging/q", json={})).status_code == 201
    assert (await client.get("/api/queues/staging")).json()[0]["name"] == "q"
    assert (await client.delete("/api/permissions/staging/ops")).status_code == 204
    assert (await client.get("/api/permissions/staging/ops")).status_code == 404
    assert (await client.delete("/api/users/ops")).status_code == 204
    assert (await client.get("/api/whoami", auth=("ops", "s3cret"))).status_code == 401
    assert (await client.delete("/api/vhosts/staging")).status_code == 204
    assert (await client.get("/api/queues/staging")).status_code == 404


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/api/users/u", {"tags": "administrator"}),
        ("/api/users/u", {"password": "a", "password_hash": "b"}),
        ("/api/users/u", {"password_hash": "not base64!"}),
        ("/api/users/u", {"password_hash": "AAAA", "hashing_algorithm": "md5"}),
        ("/api/users/u", {"password": "x", "tags": 7}),
        ("/api/permissions/%2F/guest", {"configure": "(", "write": ".*", "read": ".*"}),
        ("/api/permissions/%2F/guest", {"configure": ".*"}),
    ],
)
async def test_bad_user_and_permission_bodies_are_400(
    client: httpx.AsyncClient, path: str, body: dict[str, Any]
) -> None:
    before = (await client.get("/api/definitions")).json()
    assert (await client.put(path, json=body)).status_code == 400
    assert (await client.get("/api/definitions")).json() == before


async def test_definitions_import_creates_vhosts_users_permissions(
    client: httpx.AsyncClient, broker: Broker, runtime: FakeRuntime, clock: Clock
) -> None:
    from ringmq.core.auth import hash_password

    doc = {
        "vhosts": [{"name": "prod"}],
        "users": [
            {
                "name": "app",
                "password_hash": hash_password("pw"),
                "tags": "management",
                "hashing_algorithm": "rabbit_password_hashing_sha256",
            }
        ],
        "permissions": [
            {"user": "app", "vhost": "prod", "configure": ".*", "write": ".*", "read": ".*"}
        ],
        "queues": [{"name": "orders", "vhost": "prod", "durable": True, "arguments": {}}],
    }
    assert (await client.post("/api/definitions", json=doc)).status_code == 204
    assert (await client.get("/api/whoami", auth=("app", "pw"))).json()["name"] == "app"
    assert (await client.get("/api/queues/prod/orders")).status_code == 200
    assert {"user": "app", "vhost": "prod", "configure": ".*", "write": ".*", "read": ".*"} in (
        await client.get("/api/permissions")
    ).json()
    # re-importing the full export changes nothing, and guest stays loopback-only
    export = (await client.get("/api/definitions")).json()
    assert (await client.post("/api/definitions", json=export)).status_code == 204
    assert (await client.get("/api/definitions")).json() == export
    from ringmq.management.app import create_app

    app = create_app(broker, runtime, background_rates=False, clock_ms=clock)
    remote = httpx.ASGITransport(app=app, client=("192.0.2.7", 40000))
    async with httpx.AsyncClient(transport=remote, base_url="http://testserver") as c:
        assert (await c.get("/api/overview", auth=("guest", "guest"))).status_code == 401


async def test_definitions_with_a_bad_user_change_nothing(client: httpx.AsyncClient) -> None:
    before = (await client.get("/api/definitions")).json()
    doc = {
        "vhosts": [{"name": "prod"}],
        "users": [{"name": "app", "password": "plain"}],
        "queues": [{"name": "orders", "vhost": "prod"}],
    }
    r = await client.post("/api/definitions", json=doc)
    assert r.status_code == 400
    assert "password_hash" in r.json()["reason"]
    assert (await client.get("/api/definitions")).json() == before
