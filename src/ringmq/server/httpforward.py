"""A follower's management port: node-local answers here, the rest of the HTTP API from the leader.

Theory of operation: on a follower of a cluster on etcd, the management port answers what only
this node can say (`LOCAL_PATHS`: `/api/cluster` and its step-down, `/api/nodes` as etcd shows
them, health checks and `/metrics`) with its own app, and forwards every other request to the
leader's management port, per request, so one keep-alive connection may ask both. The forwarded
request keeps its method, path, query, headers (but `Host`) and body, and gains `X-Forwarded-
For`, `X-Forwarded-Proto` and `Via`; the leader's status, headers (but hop-by-hop ones) and body
come back as they are. Bodies are read whole (the API's are small; the server's request limits
apply before this). With `[cluster] proxy = false` the follower answers 307 to the same path on
the leader instead; while no leader is known, 503. A WebSocket request is not forwarded (the
management port serves none of the API over one): it is closed.

On the leader, `ForwardedFor` takes the client's address from the last `X-Forwarded-For` entry
of a request that comes from a trusted peer (a cluster node, as for PROXY headers), so that the
management API's per-address login throttle and its logs see the client, not the follower that
forwarded it. From any other peer the header is ignored.

The relay of the other protocols is byte for byte (`server/proxy.py`); HTTP is forwarded per
request because the follower must keep answering its own `/api/cluster` on the same port.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, MutableMapping
from typing import TYPE_CHECKING, Any, Final

from ringmq.server.proxy import LeaderProvider
from ringmq.server.proxyheader import TrustedPeers

if TYPE_CHECKING:
    # imported where used: httpx costs ~6 MiB of RSS, paid only by cluster followers
    # (tests/unit/server/test_lazy_imports.py)
    import httpx

log = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

LOCAL_PATHS: Final = ("/api/cluster", "/api/nodes", "/api/health", "/metrics")
"""Path prefixes a follower answers itself: its view of the cluster, its health (a load
balancer asks each node) and its Prometheus figures (`ringmq_cluster_*` are per node)."""
FORWARD_TIMEOUT_S: Final = 30.0
_HOP_BY_HOP: Final = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
        b"host",
        b"content-length",
        b"content-encoding",  # httpx hands the body decoded
    }
)


def _local(path: str) -> bool:
    return any(path == p or path.startswith(p + "/") for p in LOCAL_PATHS)


class LeaderForwarding:
    """The follower's management app (see the module docstring).

    A `Service` of the follower's server (its `stop` closes the connections to the leader).

    Args:
        provider: who leads.
        redirect: answer 307 to the leader instead of forwarding (`[cluster] proxy = false`).

    Attributes:
        app: the node's own management app (for `LOCAL_PATHS`), set once the server builds it.
    """

    def __init__(self, provider: LeaderProvider, *, redirect: bool = False) -> None:
        self.app: App | None = None
        self.provider = provider
        self.redirect = redirect
        self._client: httpx.AsyncClient | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "lifespan" or (kind == "http" and _local(scope["path"])):
            if self.app is not None:
                await self.app(scope, receive, send)
            return
        if kind != "http":
            await send({"type": "websocket.close", "code": 1013})
            return
        leader = self.provider.leader()
        port = None if leader is None else leader.port_of("http")
        if leader is None or port is None:
            await _answer(send, 503, b"no leader is known yet: try again\n")
            return
        host = f"[{leader.host}]" if ":" in leader.host else leader.host
        raw_path: bytes = scope.get("raw_path") or scope["path"].encode()
        target = f"http://{host}:{port}{raw_path.decode('latin-1')}"
        query: bytes = scope.get("query_string", b"")
        if query:
            target += "?" + query.decode("latin-1")
        if self.redirect:
            body = f"not the leader: the leader serves {target}\n".encode()
            await _answer(send, 307, body, [(b"location", target.encode("latin-1"))])
            return
        await self._forward(scope, receive, send, target)

    async def _forward(self, scope: Scope, receive: Receive, send: Send, target: str) -> None:
        body = bytearray()
        while True:
            msg = await receive()
            if msg["type"] == "http.disconnect":
                return
            body += msg.get("body", b"")
            if not msg.get("more_body", False):
                break
        client = scope.get("client") or ("", 0)
        headers = [(k, v) for k, v in scope["headers"] if k.lower() not in _HOP_BY_HOP]
        prior = [v for k, v in headers if k.lower() == b"x-forwarded-for"]
        headers = [(k, v) for k, v in headers if k.lower() != b"x-forwarded-for"]
        forwarded = b", ".join([*prior, str(client[0]).encode()])
        headers += [
            (b"x-forwarded-for", forwarded),
            (b"x-forwarded-proto", scope.get("scheme", "http").encode()),
            (b"via", b"1.1 ringmq-follower"),
        ]
        import httpx

        if self._client is None:
            self._client = httpx.AsyncClient(timeout=FORWARD_TIMEOUT_S, follow_redirects=False)
        try:
            res = await self._client.request(
                scope["method"], target, headers=headers, content=bytes(body)
            )
        except httpx.HTTPError as exc:
            log.info("cannot reach the leader's management port at %s: %s", target, exc)
            await _answer(send, 502, b"the leader did not answer: try again\n")
            return
        out = [(k.lower(), v) for k, v in res.headers.raw if k.lower() not in _HOP_BY_HOP]
        out.append((b"content-length", str(len(res.content)).encode()))
        await send({"type": "http.response.start", "status": res.status_code, "headers": out})
        await send({"type": "http.response.body", "body": res.content})

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        """Close the connections to the leader's management port."""
        if self._client is not None:
            await self._client.aclose()
            self._client = None


async def _answer(
    send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]] | None = None
) -> None:
    head = [
        (b"content-type", b"text/plain; charset=utf-8"),
        (b"content-length", str(len(body)).encode()),
        *(headers or []),
    ]
    await send({"type": "http.response.start", "status": status, "headers": head})
    await send({"type": "http.response.body", "body": body})


class ForwardedFor:
    """The leader's management app, with the client address a trusted follower forwarded."""

    def __init__(self, app: App, trusted: TrustedPeers) -> None:
        self.app = app
        self.trusted = trusted

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        client = scope.get("client")
        if scope["type"] in ("http", "websocket") and client and self.trusted.trusts(client[0]):
            values = [v for k, v in scope["headers"] if k.lower() == b"x-forwarded-for"]
            if values:
                # the last entry is the one the trusted follower added
                last = values[-1].decode("latin-1").split(",")[-1].strip()
                if last:
                    scope = dict(scope, client=(last, 0))
        await self.app(scope, receive, send)
