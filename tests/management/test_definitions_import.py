"""Definitions import of a whole RabbitMQ export (issue 28, item 6, in part): every refusal
reported at once and nothing applied, queue arguments checked before anything is applied,
vhost limits in `parameters` and user limits in `users[].limits` taken and exported back,
topic permissions and unknown parameters refused loudly."""

from __future__ import annotations

from typing import Any

import httpx

from ringmq.core.auth import hash_password


def _user(name: str, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "password_hash": hash_password("pw"),
        "hashing_algorithm": "rabbit_password_hashing_sha256",
        "tags": [],
        **extra,
    }


async def test_every_refusal_is_reported_and_nothing_is_applied(client: httpx.AsyncClient) -> None:
    before = (await client.get("/api/definitions")).json()
    doc = {
        "vhosts": [{"name": "prod"}],
        "users": [_user("app")],
        "topic_permissions": [
            {"user": "app", "vhost": "prod", "exchange": "amq.topic", "write": ".*", "read": "("}
        ],
        "parameters": [
            {"vhost": "prod", "component": "federation-upstream", "name": "up", "value": {}}
        ],
        "global_parameters": [{"name": "cluster_name", "value": "rabbit@host"}],
        "queues": [
            {"name": "ok", "vhost": "prod", "durable": True, "arguments": {}},
            {
                "name": "qq",
                "vhost": "prod",
                "durable": True,
                "arguments": {"x-queue-type": "mixed"},  # a type ringmq does not implement
            },
            {"name": "bad", "vhost": "prod", "durable": True, "arguments": {"x-max-length": -1}},
        ],
        "bindings": [
            {"source": "nowhere", "vhost": "prod", "destination": "ok", "destination_type": "queue"}
        ],
    }
    r = await client.post("/api/definitions", json=doc)
    assert r.status_code == 400
    reason = r.json()["reason"]
    assert reason.startswith("definitions: 5 refused, nothing applied: ")
    for part in (
        "topic permission of 'app' in 'prod': invalid read pattern '('",
        "component 'federation-upstream' is not supported",
        "queue 'qq'",
        "'mixed' is not implemented",
        "queue 'bad'",
        "no source exchange",
    ):
        assert part in reason
    assert (await client.get("/api/definitions")).json() == before


async def test_limits_travel_in_parameters_and_users(client: httpx.AsyncClient) -> None:
    doc = {
        "vhosts": [{"name": "prod"}],
        "users": [_user("app", limits={"max-connections": 3, "max-channels": 8})],
        "parameters": [
            {
                "vhost": "prod",
                "component": "vhost-limits",
                "name": "limits",
                "value": {"max-queues": 5},
            }
        ],
        "global_parameters": [
            {"name": "cluster_name", "value": "rabbit@host"},
            {"name": "internal_cluster_id", "value": "rabbitmq-cluster-id-x"},
        ],
    }
    assert (await client.post("/api/definitions", json=doc)).status_code == 204
    assert (await client.get("/api/vhost-limits/prod")).json() == [
        {"vhost": "prod", "value": {"max-queues": 5}}
    ]
    assert (await client.get("/api/user-limits/app")).json() == [
        {"user": "app", "value": {"max-connections": 3, "max-channels": 8}}
    ]
    export = (await client.get("/api/definitions")).json()
    assert {"vhost": "prod", "component": "vhost-limits", "name": "limits",
            "value": {"max-queues": 5}} in export["parameters"]  # fmt: skip
    (app,) = [u for u in export["users"] if u["name"] == "app"]
    assert app["limits"] == {"max-connections": 3, "max-channels": 8}
    # the export imports again unchanged
    assert (await client.post("/api/definitions", json=export)).status_code == 204
    assert (await client.get("/api/definitions")).json() == export
