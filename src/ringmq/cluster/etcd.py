"""A small asyncio client of etcd's v3 JSON gateway (`/v3/kv/*`, `/v3/lease/*`) over httpx.

Why the gateway and not a gRPC client: etcd 3.4 (Debian's `etcd-server`) serves the same v3
API as JSON on its client port, and ringmq already depends on httpx; the gRPC clients
(`aetcd`) would add grpcio and protobuf for the five calls the election makes. Keys and values
travel base64-encoded, 64-bit numbers as decimal strings, and fields equal to their default
(`succeeded: false`, `TTL: 0`) are left out of answers, as protobuf's JSON mapping does.

`watch` streams change notifications (`/v3/watch`, one JSON object per line) so that nodes
see a deleted leader key at once instead of at their next poll.

Several endpoints: a request that cannot reach one (connection refused, timeout, 5xx) is tried
on the next, and the one that answered is used first next time. Every request is bounded by
`timeout_s`, so that a member without quorum (which holds requests) never stalls the election
past its fence deadline (the election's timer runs regardless; see `agent.py`).
"""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["Etcd", "EtcdUnavailableError", "Kv", "TxnResult", "b64"]


class EtcdUnavailableError(Exception):
    """No endpoint answered (or each answered an error)."""


def b64(data: bytes | str) -> str:
    raw = data.encode() if isinstance(data, str) else data
    return base64.b64encode(raw).decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.b64decode(text)


@dataclass(frozen=True, slots=True)
class Kv:
    key: str
    value: bytes
    lease: int
    create_revision: int
    mod_revision: int


@dataclass(frozen=True, slots=True)
class TxnResult:
    succeeded: bool
    revision: int
    ranges: list[list[Kv]]
    """The `kvs` of each range operation of the branch that ran, in order."""


def _kvs(raw: dict[str, Any]) -> list[Kv]:
    return [
        Kv(
            key=_unb64(kv["key"]).decode(),
            value=_unb64(kv.get("value", "")),
            lease=int(kv.get("lease", 0)),
            create_revision=int(kv.get("create_revision", 0)),
            mod_revision=int(kv.get("mod_revision", 0)),
        )
        for kv in raw.get("kvs", [])
    ]


def prefix_end(prefix: str) -> str:
    """The `range_end` that makes a range cover every key starting with `prefix`."""
    raw = bytearray(prefix.encode())
    raw[-1] += 1  # prefixes here end in "/", never in 0xff
    return b64(bytes(raw))


# -- transaction parts (dicts in the gateway's JSON shape) --------------------------------------


def absent(key: str) -> dict[str, Any]:
    """Compare: `key` does not exist."""
    return {"key": b64(key), "target": "CREATE", "result": "EQUAL", "create_revision": "0"}


def value_is(key: str, value: bytes) -> dict[str, Any]:
    return {"key": b64(key), "target": "VALUE", "result": "EQUAL", "value": b64(value)}


def put(key: str, value: bytes, lease: int = 0) -> dict[str, Any]:
    body: dict[str, Any] = {"key": b64(key), "value": b64(value)}
    if lease:
        body["lease"] = str(lease)
    return {"request_put": body}


def get(key: str) -> dict[str, Any]:
    return {"request_range": {"key": b64(key)}}


def delete(key: str) -> dict[str, Any]:
    return {"request_delete_range": {"key": b64(key)}}


class Etcd:
    """The gateway client (see the module docstring). Use on one event loop; `aclose()` ends it."""

    def __init__(self, endpoints: Sequence[str], *, timeout_s: float = 1.5) -> None:
        if not endpoints:
            raise ValueError("no etcd endpoint")
        self.endpoints = [e.rstrip("/") for e in endpoints]
        self._first = 0
        self._timeout_s = timeout_s
        import httpx  # imported here: only cluster nodes pay its MiBs of RSS

        self._http = httpx.AsyncClient(timeout=timeout_s)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def call(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST `body` to `/v3/<path>` on the first endpoint that answers 200."""
        import httpx

        errors: list[str] = []
        n = len(self.endpoints)
        for i in range(n):
            idx = (self._first + i) % n
            url = f"{self.endpoints[idx]}/v3/{path}"
            try:
                resp = await self._http.post(url, json=body)
            except httpx.HTTPError as exc:
                errors.append(f"{self.endpoints[idx]}: {type(exc).__name__}")
                continue
            if resp.status_code != 200:
                errors.append(f"{self.endpoints[idx]}: HTTP {resp.status_code} {resp.text[:200]}")
                continue
            self._first = idx
            answer: dict[str, Any] = resp.json()
            return answer
        raise EtcdUnavailableError("; ".join(errors))

    async def grant(self, ttl_s: int) -> tuple[int, int]:
        """A new lease: (id, TTL in seconds as granted; etcd may raise a small one)."""
        r = await self.call("lease/grant", {"TTL": str(ttl_s)})
        if r.get("error"):
            raise EtcdUnavailableError(str(r["error"]))
        return int(r["ID"]), int(r.get("TTL", 0))

    async def keepalive(self, lease_id: int) -> int:
        """Renew `lease_id`: its TTL in seconds, 0 when etcd no longer has it."""
        r = await self.call("lease/keepalive", {"ID": str(lease_id)})
        if "error" in r:
            raise EtcdUnavailableError(str(r["error"]))
        return int(r.get("result", {}).get("TTL", 0))

    async def revoke(self, lease_id: int) -> None:
        await self.call("lease/revoke", {"ID": str(lease_id)})

    async def range_prefix(self, prefix: str) -> tuple[int, list[Kv]]:
        """(revision, every key under `prefix`)."""
        r = await self.call("kv/range", {"key": b64(prefix), "range_end": prefix_end(prefix)})
        return int(r["header"]["revision"]), _kvs(r)

    async def watch(self, prefix: str) -> AsyncIterator[int]:
        """Yield the revision of each batch of changes under `prefix` (after the watch is
        created, which yields 0) until the stream ends; raises EtcdUnavailableError when no
        endpoint takes the watch. One endpoint serves the whole stream."""
        import httpx

        body = {"create_request": {"key": b64(prefix), "range_end": prefix_end(prefix)}}
        errors: list[str] = []
        n = len(self.endpoints)
        for i in range(n):
            idx = (self._first + i) % n
            url = f"{self.endpoints[idx]}/v3/watch"
            try:
                async with self._http.stream(
                    "POST", url, json=body, timeout=httpx.Timeout(self._timeout_s, read=None)
                ) as resp:
                    if resp.status_code != 200:
                        errors.append(f"{self.endpoints[idx]}: HTTP {resp.status_code}")
                        continue
                    async for line in resp.aiter_lines():
                        if not line.strip():
                            continue
                        result = json.loads(line).get("result", {})
                        if result.get("created"):
                            yield 0
                        elif result.get("events"):
                            yield int(result["header"]["revision"])
                    return
            except httpx.HTTPError as exc:
                errors.append(f"{self.endpoints[idx]}: {type(exc).__name__}")
        raise EtcdUnavailableError("; ".join(errors))

    async def put(self, key: str, value: bytes, lease: int = 0) -> None:
        await self.call("kv/put", put(key, value, lease)["request_put"])

    async def txn(
        self,
        compare: list[dict[str, Any]],
        success: list[dict[str, Any]],
        failure: list[dict[str, Any]] | None = None,
    ) -> TxnResult:
        r = await self.call(
            "kv/txn", {"compare": compare, "success": success, "failure": failure or []}
        )
        ranges = [
            _kvs(x["response_range"]) for x in r.get("responses", []) if "response_range" in x
        ]
        return TxnResult(
            succeeded=bool(r.get("succeeded", False)),
            revision=int(r["header"]["revision"]),
            ranges=ranges,
        )
