"""Definitions import of a whole RabbitMQ export (issue 28, item 6, in part): every refusal
reported at once and nothing applied, queue arguments checked before anything is applied,
vhost limits in `parameters` and user limits in `users[].limits` taken and exported back,
topic permissions checked with the rest, and the parameters of components ringmq does not implement
and global parameters kept, shown and exported, reported as not acted on."""

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
    assert reason.startswith("definitions: 4 refused, nothing applied: ")
    for part in (
        "topic permission of 'app' in 'prod': invalid read pattern '('",
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


FEDERATION = {"uri": "amqp://upstream", "expires": 3600000}
SHOVEL = {"src-uri": "amqp://", "src-queue": "in", "dest-uri": "amqp://", "dest-queue": "out"}


async def test_parameters_and_global_parameters_are_kept_shown_and_exported(
    client: httpx.AsyncClient,
) -> None:
    doc = {
        "vhosts": [{"name": "prod"}],
        "parameters": [
            {
                "vhost": "prod",
                "component": "federation-upstream",
                "name": "up",
                "value": FEDERATION,
            },
            {"vhost": "/", "component": "shovel", "name": "move", "value": SHOVEL},
            {
                "vhost": "prod",
                "component": "vhost-limits",
                "name": "limits",
                "value": {"max-queues": 7},
            },
        ],
        "global_parameters": [
            {"name": "cluster_name", "value": "rabbit@host"},
            {"name": "internal_cluster_id", "value": "rabbitmq-cluster-id-x"},
        ],
    }
    r = await client.post("/api/definitions", json=doc)
    assert r.status_code == 204, r.text
    listed = (await client.get("/api/parameters")).json()
    assert [(p["vhost"], p["component"], p["name"], p["acted_on"]) for p in listed] == [
        ("/", "shovel", "move", False),
        ("prod", "federation-upstream", "up", False),
        ("prod", "vhost-limits", "limits", True),
    ]
    assert listed[0]["value"] == SHOVEL
    assert listed[1]["not_acted_on"] == "ringmq has no federation plugin"
    one = (await client.get("/api/parameters/federation-upstream/prod/up")).json()
    assert one["value"] == FEDERATION
    by_component = (await client.get("/api/parameters/shovel")).json()
    assert [p["name"] for p in by_component] == ["move"]
    globals_ = (await client.get("/api/global-parameters")).json()
    assert [(g["name"], g["value"], g["acted_on"]) for g in globals_] == [
        ("cluster_name", "rabbit@host", False),
        ("internal_cluster_id", "rabbitmq-cluster-id-x", False),
    ]
    export = (await client.get("/api/definitions")).json()
    assert {"vhost": "prod", "component": "federation-upstream", "name": "up",
            "value": FEDERATION} in export["parameters"]  # fmt: skip
    assert {"name": "cluster_name", "value": "rabbit@host"} in export["global_parameters"]
    per_vhost = (await client.get("/api/definitions/prod")).json()
    assert {"component": "federation-upstream", "name": "up", "value": FEDERATION} in per_vhost[
        "parameters"
    ]
    # the export imports again unchanged
    assert (await client.post("/api/definitions", json=export)).status_code == 204
    assert (await client.get("/api/definitions")).json() == export


async def test_parameters_api_put_and_delete(client: httpx.AsyncClient) -> None:
    r = await client.put("/api/parameters/federation-upstream/%2F/up", json={"value": FEDERATION})
    assert r.status_code == 204
    assert (await client.get("/api/parameters/federation-upstream/%2F/up")).json()["value"] == (
        FEDERATION
    )
    r = await client.put(
        "/api/parameters/vhost-limits/%2F/limits", json={"value": {"max-queues": 2}}
    )
    assert r.status_code == 204
    assert (await client.get("/api/vhost-limits/%2F")).json() == [
        {"vhost": "/", "value": {"max-queues": 2}}
    ]
    assert (await client.delete("/api/parameters/federation-upstream/%2F/up")).status_code == 204
    assert (await client.get("/api/parameters/federation-upstream/%2F/up")).status_code == 404
    assert (
        await client.put("/api/global-parameters/cluster_name", json={"value": "c"})
    ).status_code == 204
    assert (await client.get("/api/global-parameters/cluster_name")).json()["value"] == "c"
    assert (await client.delete("/api/global-parameters/cluster_name")).status_code == 204
    assert (await client.get("/api/global-parameters/cluster_name")).status_code == 404


def _v4_export() -> dict[str, Any]:
    # A RabbitMQ 4.x export written by hand after the documented format (rabbitmq.com
    # "Definitions"): vhost metadata and default queue type, user limits, quorum and stream
    # queues, parameters and the global parameters every export carries.
    meta = {"description": "production", "tags": ["eu"], "default_queue_type": "classic"}
    return {
        "rabbit_version": "4.0.5",
        "rabbitmq_version": "4.0.5",
        "product_name": "RabbitMQ",
        "product_version": "4.0.5",
        "users": [
            _user("app", limits={"max-connections": 20}) | {"tags": ["management"]},
        ],
        "vhosts": [{"name": "prod", **meta, "metadata": meta}],
        "permissions": [
            {"user": "app", "vhost": "prod", "configure": "", "write": ".*", "read": ".*"}
        ],
        "topic_permissions": [],
        "parameters": [
            {
                "vhost": "prod",
                "component": "federation-upstream",
                "name": "dc2",
                "value": FEDERATION,
            },
            {
                "vhost": "prod",
                "component": "vhost-limits",
                "name": "limits",
                "value": {"max-connections": 100},
            },
        ],
        "global_parameters": [
            {"name": "cluster_name", "value": "rabbit@node-a"},
            {"name": "internal_cluster_id", "value": "rabbitmq-cluster-id-abc"},
        ],
        "policies": [
            {
                "vhost": "prod",
                "name": "ttl",
                "pattern": "^events$",
                "apply-to": "classic_queues",
                "definition": {"message-ttl": 60000},
                "priority": 0,
            }
        ],
        "queues": [
            {
                "name": "events",
                "vhost": "prod",
                "durable": True,
                "auto_delete": False,
                "arguments": {},
            },
            {
                "name": "jobs",
                "vhost": "prod",
                "durable": True,
                "auto_delete": False,
                "arguments": {"x-queue-type": "quorum", "x-delivery-limit": 20},
            },
            {
                "name": "audit",
                "vhost": "prod",
                "durable": True,
                "auto_delete": False,
                "arguments": {"x-queue-type": "stream", "x-max-age": "7D"},
            },
        ],
        "exchanges": [
            {
                "name": "in",
                "vhost": "prod",
                "type": "topic",
                "durable": True,
                "auto_delete": False,
                "internal": False,
                "arguments": {},
            }
        ],
        "bindings": [
            {
                "source": "in",
                "vhost": "prod",
                "destination": "jobs",
                "destination_type": "queue",
                "routing_key": "job.#",
                "arguments": {},
            }
        ],
    }


async def test_a_hand_written_4x_export_imports_whole(client: httpx.AsyncClient) -> None:
    r = await client.post("/api/definitions", json=_v4_export())
    assert r.status_code == 204, r.text
    queues = {q["name"]: q for q in (await client.get("/api/queues/prod")).json()}
    assert queues["jobs"]["type"] == "quorum"
    assert queues["audit"]["type"] == "stream"
    assert queues["events"]["policy"] == "ttl"
    assert (await client.get("/api/vhost-limits/prod")).json() == [
        {"vhost": "prod", "value": {"max-connections": 100}}
    ]
    kept = (await client.get("/api/parameters/federation-upstream/prod/dc2")).json()
    assert (kept["value"], kept["acted_on"]) == (FEDERATION, False)
    names = [g["name"] for g in (await client.get("/api/global-parameters")).json()]
    assert names == ["cluster_name", "internal_cluster_id"]


async def test_a_vhost_default_queue_type_other_than_classic_is_refused(
    client: httpx.AsyncClient,
) -> None:
    doc = _v4_export()
    doc["vhosts"][0]["metadata"]["default_queue_type"] = "quorum"
    doc["vhosts"][0].pop("default_queue_type")
    r = await client.post("/api/definitions", json=doc)
    assert r.status_code == 400
    assert "default_queue_type 'quorum' is not supported" in r.json()["reason"]
    assert "prod" not in [v["name"] for v in (await client.get("/api/vhosts")).json()]
