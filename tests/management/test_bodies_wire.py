"""Management request bodies over the wire: JSON nesting and malformed JSON (400)."""

from __future__ import annotations

import base64
import http.client
import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ringmq.node import BrokerThread
from ringmq.server.runtime import ServerOptions

pytestmark = pytest.mark.integration

AUTH = "Basic " + base64.b64encode(b"guest:guest").decode()
JSON = "application/json"


@pytest.fixture
def default(tmp_path: Path) -> Iterator[BrokerThread]:
    b = BrokerThread(ServerOptions(host="127.0.0.1", amqp_port=0, http_port=0, data_dir=tmp_path))
    b.start()
    yield b
    b.stop()


def _conn(b: BrokerThread) -> http.client.HTTPConnection:
    # the timeout only bounds a hang (a broker that waits for a body it should have refused)
    return http.client.HTTPConnection("127.0.0.1", b.server.http_port, timeout=20)


def _request(
    b: BrokerThread,
    method: str,
    path: str,
    body: bytes | Iterable[bytes] | None = None,
    *,
    content_type: str = JSON,
    length: int | None = None,
    chunked: bool = False,
    auth: str = AUTH,
) -> tuple[int, Any]:
    """(status, JSON answer or None) of one request on a fresh connection."""
    c = _conn(b)
    try:
        headers = {"Authorization": auth, "Content-Type": content_type}
        if length is not None:
            headers["Content-Length"] = str(length)
        c.request(method, path, body=body, headers=headers, encode_chunked=chunked)
        r = c.getresponse()
        data = r.read()
        return r.status, json.loads(data) if data else None
    finally:
        c.close()


def _queue_exists(b: BrokerThread, name: str) -> bool:
    status, _ = _request(b, "GET", f"/api/queues/%2F/{name}")
    assert status in (200, 404)
    return status == 200


def test_deep_nesting_is_a_400(default: BrokerThread) -> None:
    depth = 500_000
    body = b'{"arguments": {"x-deep": ' + b"[" * depth + b"]" * depth + b"}}"
    status, answer = _request(default, "PUT", "/api/queues/%2F/deep", body)
    assert status == 400
    assert answer == {"error": "bad_request", "reason": "request body nests deeper than 100 levels"}
    assert not _queue_exists(default, "deep")
    # the same on a body whose exchange names are read before the handler (authz), and on a
    # streams body
    status, _ = _request(default, "PUT", "/api/queues/%2F/deep/settings", b"[" * depth)
    assert status == 400
    status, _ = _request(default, "POST", "/api/streams/%2F/deep/reserve", b"{" * depth)
    assert status == 400


@pytest.mark.parametrize(
    "body",
    [b"{nope", b'{"durable": }', b"\xff\xfe{}", b'["not", "an", "object"]', b'{"a": "\\'],
)
def test_a_malformed_body_is_a_400(default: BrokerThread, body: bytes) -> None:
    status, answer = _request(default, "PUT", "/api/queues/%2F/bad", body)
    assert status == 400
    assert answer["error"] == "bad_request"
    assert not _queue_exists(default, "bad")
