"""The API knows every exchange type the broker knows (x-delayed-message included)."""

from __future__ import annotations

import httpx
import pytest

from ringmq.core.routing import EXCHANGE_TYPE_NAMES

DELAYED = {"type": "x-delayed-message", "arguments": {"x-delayed-type": "topic"}}


async def test_overview_lists_every_exchange_type_of_the_broker(client: httpx.AsyncClient) -> None:
    types = [t["name"] for t in (await client.get("/api/overview")).json()["exchange_types"]]
    assert types == list(EXCHANGE_TYPE_NAMES)
    assert "x-delayed-message" in types


async def test_delayed_exchange_declared_over_http(client: httpx.AsyncClient) -> None:
    res = await client.put("/api/exchanges/%2F/later", json=DELAYED)
    assert res.status_code == 201, res.text
    got = (await client.get("/api/exchanges/%2F/later")).json()
    assert got["type"] == "x-delayed-message"
    assert got["arguments"] == {"x-delayed-type": "topic"}


@pytest.mark.parametrize(
    "arguments", [{}, {"x-delayed-type": "nope"}, {"x-delayed-type": "x-delayed-message"}]
)
async def test_delayed_exchange_without_a_routing_type_is_400(
    client: httpx.AsyncClient, arguments: dict[str, str]
) -> None:
    body = {"type": "x-delayed-message", "arguments": arguments}
    res = await client.put("/api/exchanges/%2F/later", json=body)
    assert res.status_code == 400
    assert "x-delayed-type" in res.json()["reason"]
    assert (await client.get("/api/exchanges/%2F/later")).status_code == 404


async def test_export_holding_a_delayed_exchange_imports_back(client: httpx.AsyncClient) -> None:
    assert (await client.put("/api/exchanges/%2F/later", json=DELAYED)).status_code == 201
    assert (await client.put("/api/queues/%2F/q", json={})).status_code == 201
    bind = {"routing_key": "a.#"}
    assert (await client.post("/api/bindings/%2F/e/later/q/q", json=bind)).status_code == 201
    exported = (await client.get("/api/definitions")).json()
    assert (await client.delete("/api/exchanges/%2F/later")).status_code == 204
    res = await client.post("/api/definitions", json=exported)
    assert res.status_code in (200, 201, 204), res.text
    assert (await client.get("/api/exchanges/%2F/later")).json()["type"] == "x-delayed-message"
    keys = [b["routing_key"] for b in (await client.get("/api/queues/%2F/q/bindings")).json()]
    assert "a.#" in keys


async def test_import_with_a_bad_delayed_exchange_changes_nothing(
    client: httpx.AsyncClient,
) -> None:
    doc = {"exchanges": [{"name": "bad", "vhost": "/", "type": "x-delayed-message"}]}
    doc["queues"] = [{"name": "side", "vhost": "/"}]
    res = await client.post("/api/definitions", json=doc)
    assert res.status_code == 400
    assert "x-delayed-type" in res.json()["reason"]
    assert (await client.get("/api/queues/%2F/side")).status_code == 404
