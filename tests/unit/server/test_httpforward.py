"""A follower's management app: its own paths here, the rest forwarded to the leader or 307."""

from __future__ import annotations

from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse
from starlette.routing import Route

from ringmq.server.httpforward import ForwardedFor, LeaderForwarding
from ringmq.server.proxy import LeaderAddresses, StaticLeader
from ringmq.server.proxyheader import TrustedPeers

LEADER = LeaderAddresses("n1", "10.0.0.1", amqp_port=5672, http_port=15672)


async def _own(request: Request) -> PlainTextResponse:
    return PlainTextResponse("follower's own")


async def _echo(request: Request) -> JSONResponse:
    return JSONResponse(
        {
            "method": request.method,
            "host": request.headers.get("host"),
            "raw_path": request.scope["raw_path"].decode(),
            "query": request.scope["query_string"].decode(),
            "body": (await request.body()).decode(),
            "forwarded_for": request.headers.get("x-forwarded-for"),
            "authorization": request.headers.get("authorization"),
        },
        status_code=201,
        headers={"x-leader": "n1"},
    )


def _forwarding(leader: LeaderAddresses | None, *, redirect: bool = False) -> LeaderForwarding:
    fwd = LeaderForwarding(StaticLeader(leader), redirect=redirect)
    fwd.app = Starlette(routes=[Route("/api/cluster", _own), Route("/metrics", _own)])
    leader_app = Starlette(routes=[Route("/api/{rest:path}", _echo, methods=["GET", "PUT"])])
    fwd._client = httpx.AsyncClient(transport=httpx.ASGITransport(app=leader_app))
    return fwd


async def _ask(fwd: LeaderForwarding, method: str, path: str, **kw: Any) -> httpx.Response:
    transport = httpx.ASGITransport(app=fwd, client=("192.0.2.7", 40000))
    async with httpx.AsyncClient(transport=transport, base_url="http://follower") as c:
        return await c.request(method, path, **kw)


async def test_the_follower_answers_its_own_paths() -> None:
    fwd = _forwarding(LEADER)
    for path in ("/api/cluster", "/metrics"):
        got = await _ask(fwd, "GET", path)
        assert got.text == "follower's own"
    await fwd.stop()


async def test_other_requests_go_to_the_leader_with_the_client_address() -> None:
    fwd = _forwarding(LEADER)
    got = await _ask(
        fwd, "PUT", "/api/queues/%2F/q?x=1", content=b'{"durable":true}', auth=("guest", "guest")
    )
    assert got.status_code == 201
    assert got.headers["x-leader"] == "n1"
    body = got.json()
    assert body["method"] == "PUT"
    assert body["host"] == "10.0.0.1:15672"
    assert (body["raw_path"], body["query"]) == ("/api/queues/%2F/q", "x=1")  # "/" kept encoded
    assert body["body"] == '{"durable":true}'
    assert body["forwarded_for"] == "192.0.2.7"
    assert body["authorization"].startswith("Basic ")
    await fwd.stop()


async def test_with_proxy_off_other_requests_are_redirected_to_the_leader() -> None:
    fwd = _forwarding(LEADER, redirect=True)
    got = await _ask(fwd, "GET", "/api/overview?columns=node")
    assert got.status_code == 307
    assert got.headers["location"] == "http://10.0.0.1:15672/api/overview?columns=node"
    assert (await _ask(fwd, "GET", "/api/cluster")).text == "follower's own"


async def test_without_a_leader_other_requests_are_unavailable() -> None:
    fwd = _forwarding(None)
    assert (await _ask(fwd, "GET", "/api/overview")).status_code == 503
    assert (await _ask(fwd, "GET", "/api/cluster")).status_code == 200


async def _client_of(request: Request) -> PlainTextResponse:
    return PlainTextResponse(request.client.host if request.client else "")


async def _seen_by_leader(peer: str, forwarded: str | None) -> str:
    app = ForwardedFor(
        Starlette(routes=[Route("/api/whoami", _client_of)]), TrustedPeers(["10.0.0.0/24"])
    )
    headers = {} if forwarded is None else {"x-forwarded-for": forwarded}
    transport = httpx.ASGITransport(app=app, client=(peer, 5000))
    async with httpx.AsyncClient(transport=transport, base_url="http://leader") as c:
        return (await c.get("/api/whoami", headers=headers)).text


async def test_the_leader_takes_the_client_address_from_a_trusted_follower_only() -> None:
    assert await _seen_by_leader("10.0.0.2", "192.0.2.7") == "192.0.2.7"
    assert await _seen_by_leader("10.0.0.2", "6.6.6.6, 192.0.2.7") == "192.0.2.7"
    assert await _seen_by_leader("10.0.0.2", None) == "10.0.0.2"
    assert await _seen_by_leader("192.0.2.50", "10.9.9.9") == "192.0.2.50"  # not forged
