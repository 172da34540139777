"""Management request bodies over the wire: the size limit (413), JSON nesting and malformed
JSON (400), and a log without tracebacks for refused requests (`management.bodies`)."""

from __future__ import annotations

import base64
import http.client
import json
import logging
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ringmq.connector.records import encode_publish
from ringmq.management.bodies import DEFAULT_MAX_BODY_SIZE
from ringmq.node import BrokerThread
from ringmq.server.configspec import FileConfig, ManagementSpec
from ringmq.server.runtime import ServerOptions

pytestmark = pytest.mark.integration

LIMIT = 64 * 1024
"""The body limit of the `small` broker."""
AUTH = "Basic " + base64.b64encode(b"guest:guest").decode()
JSON = "application/json"


def _broker(data_dir: Path, max_body_size: int | None = None) -> BrokerThread:
    config = FileConfig(management=ManagementSpec(max_body_size=max_body_size))
    return BrokerThread(
        ServerOptions(host="127.0.0.1", amqp_port=0, http_port=0, data_dir=data_dir, config=config)
    )


@pytest.fixture
def default(tmp_path: Path) -> Iterator[BrokerThread]:
    b = _broker(tmp_path)
    b.start()
    yield b
    b.stop()


@pytest.fixture
def small(tmp_path: Path) -> Iterator[BrokerThread]:
    b = _broker(tmp_path, max_body_size=LIMIT)
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


def _declare_body(size: int) -> bytes:
    """A queue declare body of exactly `size` bytes (a padded argument)."""
    head = b'{"durable": false, "arguments": {"x-pad": "'
    tail = b'"}}'
    return head + b"a" * (size - len(head) - len(tail)) + tail


def _rss_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def test_a_declared_length_over_the_default_limit_is_answered_before_the_body(
    default: BrokerThread,
) -> None:
    # Headers only: the broker must answer from Content-Length, not wait for 20 MiB to arrive
    # (the original code waited for the body, and this read timed out).
    c = _conn(default)
    try:
        c.putrequest("PUT", "/api/queues/%2F/big")
        c.putheader("Authorization", AUTH)
        c.putheader("Content-Type", JSON)
        c.putheader("Content-Length", str(DEFAULT_MAX_BODY_SIZE + 1))
        c.endheaders()
        r = c.getresponse()
        answer = json.loads(r.read())
    finally:
        c.close()
    assert r.status == 413
    assert answer["error"] == "payload_too_large"
    assert str(DEFAULT_MAX_BODY_SIZE) in answer["reason"]
    assert not _queue_exists(default, "big")


def test_a_100_mb_declare_is_refused_without_growing_the_broker(default: BrokerThread) -> None:
    # The request: a valid 100 MB queue declare. The original code buffered it, parsed
    # it and created the queue (RSS 61 -> 261 MB); now it is answered 413 and the rest of the
    # body is dropped as it arrives. The body is streamed from one reused chunk, so the client
    # (this process, which also runs the broker) holds no copy of it either.
    size = 100_000_000
    head = b'{"durable": false, "arguments": {"x-big": "'
    tail = b'"}}'
    chunk = b"a" * (1 << 20)
    middle = size - len(head) - len(tail)

    def body() -> Iterator[bytes]:
        yield head
        left = middle
        while left:
            part = chunk[: min(left, len(chunk))]
            left -= len(part)
            yield part
        yield tail

    before = _rss_bytes()
    status, answer = _request(default, "PUT", "/api/queues/%2F/big", body(), length=size)
    grown = _rss_bytes() - before
    assert status == 413, answer
    assert answer["error"] == "payload_too_large"
    assert not _queue_exists(default, "big")
    assert grown < 40 * 1024 * 1024, f"RSS grew by {grown} bytes"


def test_the_limit_is_the_setting_and_a_body_at_it_is_taken(small: BrokerThread) -> None:
    status, _ = _request(small, "PUT", "/api/queues/%2F/at", _declare_body(LIMIT))
    assert status == 201
    status, answer = _request(small, "PUT", "/api/queues/%2F/over", _declare_body(LIMIT + 1))
    assert status == 413
    assert answer == {
        "error": "payload_too_large",
        "reason": f"request body of {LIMIT + 1} bytes exceeds the limit of {LIMIT} bytes"
        " (management.http.max_body_size)",
    }
    assert _queue_exists(small, "at")
    assert not _queue_exists(small, "over")


def test_a_chunked_body_is_counted_as_it_arrives(small: BrokerThread) -> None:
    # No Content-Length: the bytes are counted as the chunks come in.
    body = _declare_body(2 * LIMIT)
    parts = [body[i : i + 4096] for i in range(0, len(body), 4096)]
    status, answer = _request(small, "PUT", "/api/queues/%2F/chunky", parts, chunked=True)
    assert status == 413
    assert answer["error"] == "payload_too_large"
    assert not _queue_exists(small, "chunky")
    # a chunked body under the limit is taken
    body = _declare_body(LIMIT // 2)
    parts = [body[i : i + 4096] for i in range(0, len(body), 4096)]
    status, _ = _request(small, "PUT", "/api/queues/%2F/chunky", parts, chunked=True)
    assert status == 201


def test_a_bulk_publish_is_not_held_to_the_limit(small: BrokerThread) -> None:
    # The streams publish body is a batch of messages (the Spark writer sends tens of MiB):
    # the management body limit is for documents.
    assert _request(small, "PUT", "/api/queues/%2F/bulk", b"{}")[0] == 201
    no_properties = b"\x00\x00"  # AMQP basic properties: flags only
    messages = [("bulk", no_properties, bytes(1024)) for _ in range(4 * LIMIT // 1024)]
    body = encode_publish(messages)
    assert len(body) > 4 * LIMIT
    status, answer = _request(
        small,
        "POST",
        "/api/streams/%2F/amq.default/publish",
        body,
        content_type="application/x-ringmq-publish",
    )
    assert status == 200, answer
    status, queue = _request(small, "GET", "/api/queues/%2F/bulk")
    assert queue["messages"] == len(messages)


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


def test_refused_requests_log_one_line_and_no_traceback(
    small: BrokerThread, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="ringmq.management")
    wrong = "Basic " + base64.b64encode(b"guest:wrong").decode()
    refusals = [
        (404, "GET", "/api/queues/%2F/missing", None, JSON, AUTH),
        (400, "PUT", "/api/queues/%2F/bad", b"{nope", JSON, AUTH),
        (400, "PUT", "/api/queues/%2F/deep", b"[" * 30_000 + b"]" * 30_000, JSON, AUTH),
        (413, "PUT", "/api/queues/%2F/big", _declare_body(LIMIT + 1), JSON, AUTH),
        (415, "PUT", "/api/queues/%2F/text", b"hello", "text/plain", AUTH),
        (401, "GET", "/api/overview", None, JSON, wrong),
        (404, "POST", "/api/streams/%2F/missing/reserve", b'{"consumer": "c1"}', JSON, AUTH),
        (400, "POST", "/api/streams/%2F/missing/reserve", b"{nope", JSON, AUTH),
    ]
    for status, method, path, body, media, auth in refusals:
        answer = _request(small, method, path, body, content_type=media, auth=auth)
        assert answer[0] == status, (path, answer)
    records = [r for r in caplog.records if r.name.startswith("ringmq.management")]
    loud = [(r.levelname, r.getMessage()) for r in records if r.levelno >= logging.WARNING]
    assert loud == []
    assert [r.getMessage() for r in records if r.exc_info] == []
    lines = [r.getMessage() for r in records if r.levelno == logging.INFO]
    assert any("PUT /api/queues/%2F/big refused: 413" in m for m in lines), lines
    assert any("PUT /api/queues/%2F/deep refused: 400" in m for m in lines), lines
