"""The shard link's owner side on a running broker: an `OriginSession` over a real socket
against `ringmq serve --shard-link-port`, with pika on the same broker.

The test plays the origin shard: it forwards messages the way an origin would (already routed:
the owner's vhost and queue names with each message) and consumes through the link with
credit; pika checks what the broker stored and delivers to its own clients.
"""

from __future__ import annotations

import re
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pika
import pytest

from ringmq.adapters.amqp091.message import decoded
from ringmq.amqp.properties import BasicProperties, encode_properties
from ringmq.core.message import Message
from ringmq.shardlink.codec import Outcome
from ringmq.shardlink.origin import (
    ConsumerGone,
    ConsumerReady,
    ConsumerRefused,
    Delivered,
    Event,
    Opened,
    OriginSession,
    Refused,
    Resolved,
)
from tests.serve import Serve

pytestmark = [pytest.mark.integration, pytest.mark.filterwarnings("ignore::ResourceWarning")]

SECRET = b"link-secret"
TENANT = "link-tenant"
_LINK = re.compile(rb"SHARD-LINK listening on ([0-9.]+):(\d+)")
_CONFIG = f"""
[[vhosts]]
name = "{TENANT}"

[[permissions]]
user = "guest"
vhost = "{TENANT}"
configure = ".*"
write = ".*"
read = ".*"

[[permissions]]
user = "guest"
vhost = "/"
configure = ".*"
write = ".*"
read = ".*"
"""


def _serve(data_dir: Path, log: Path, *extra: str) -> tuple[Serve, int]:
    config = log.with_suffix(".toml")
    config.write_text(_CONFIG)
    serve = Serve(
        data_dir,
        log,
        extra=("--shard-link-port", "0", "--shard-link-secret", SECRET.decode(), *extra),
        config=config,
    )
    return serve, serve.wait_port(_LINK, 30)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Serve, int]]:
    d = tmp_path_factory.mktemp("shardlink")
    serve, port = _serve(d / "data", d / "broker.log", "--shard-index", "3")
    yield serve, port
    serve.stop()


class Link:
    """The origin side of one link over a blocking socket."""

    def __init__(self, port: int, secret: bytes = SECRET) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.origin = OriginSession(7, secret)
        self.events: list[Event] = []
        self.eof = False
        self.flush()

    def flush(self) -> None:
        data = self.origin.data_to_send()
        if data:
            self.sock.sendall(data)

    def until(self, done: Callable[[], bool], timeout_s: float = 15.0) -> None:
        """Read until `done()` (the events so far), or fail."""
        deadline = time.monotonic() + timeout_s
        while not done():
            assert not self.eof, f"the link closed; events: {self.events}"
            assert time.monotonic() < deadline, f"timed out; events: {self.events}"
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            data = self.sock.recv(65536)
            if not data:
                self.eof = True
                continue
            self.events += self.origin.receive_data(data)

    def opened(self) -> Link:
        self.until(lambda: any(isinstance(e, Opened) for e in self.events))
        return self

    def resolved(self) -> dict[int, int]:
        """Every sequence resolved so far -> its code (0: accepted)."""
        out: dict[int, int] = {}
        for e in self.events:
            if isinstance(e, Resolved):
                for seq in range(e.first, e.upto + 1):
                    out[seq] = e.rejected.get(seq, 0)
        return out

    def forward_all(
        self, queues: tuple[str, ...], messages: list[Message], vhost: str = "/"
    ) -> dict[int, int]:
        """Forward `messages` to `queues` of `vhost`; their outcomes by sequence once all are
        resolved."""
        seqs = [self.origin.forward(vhost, queues, m) for m in messages]
        self.flush()
        self.until(lambda: self.origin.resolved >= seqs[-1])
        got = self.resolved()
        return {s: got[s] for s in seqs}

    def delivered(self, cid: int) -> list[tuple[int, bool, Message]]:
        """(tag, redelivered, message) of every delivery to `cid` so far."""
        return [
            (e.first_tag + i, d.redelivered, d.message)
            for e in self.events
            if isinstance(e, Delivered) and e.cid == cid
            for i, d in enumerate(e.entries)
        ]

    def counts(self, cid: int) -> list[int]:
        """The delivery count of every delivery to `cid` so far."""
        return [
            d.delivery_count
            for e in self.events
            if isinstance(e, Delivered) and e.cid == cid
            for d in e.entries
        ]

    def refused(self, cid: int) -> ConsumerRefused:
        self.until(lambda: any(isinstance(e, ConsumerRefused) for e in self.events))
        [refused] = [e for e in self.events if isinstance(e, ConsumerRefused) and e.cid == cid]
        return refused

    def close(self) -> None:
        self.sock.close()


def _message(body: bytes, n: int, *, persistent: bool = True) -> Message:
    props = BasicProperties(
        content_type="text/plain",
        delivery_mode=2 if persistent else 1,
        headers={"n": n, "origin": "shard-7"},
        message_id=f"m-{n}",
        correlation_id="c",
    )
    return decoded("", "ignored", encode_properties(props), body, int(time.time() * 1000))


def _channel(serve: Serve, vhost: str = "/") -> pika.adapters.blocking_connection.BlockingChannel:
    params = pika.ConnectionParameters(
        "127.0.0.1", serve.port, vhost, pika.PlainCredentials("guest", "guest")
    )
    return pika.BlockingConnection(params).channel()


def _get_all(ch: pika.adapters.blocking_connection.BlockingChannel, queue: str) -> list:
    out: list = []
    while True:
        method, props, body = ch.basic_get(queue, auto_ack=True)
        if method is None:
            return out
        out.append((method, props, body))


def _wait(pred: Callable[[], bool], timeout_s: float = 15.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not pred():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_forwards_are_stored_and_consumed_in_order(broker: tuple[Serve, int]) -> None:
    serve, port = broker
    ch = _channel(serve)
    ch.queue_declare("link-durable", durable=True)
    link = Link(port).opened()
    n = 40
    outcomes = link.forward_all(
        ("link-durable",), [_message(f"body-{i}".encode(), i) for i in range(n)]
    )
    assert set(outcomes.values()) == {0}
    got = _get_all(ch, "link-durable")
    assert [body for _m, _p, body in got] == [f"body-{i}".encode() for i in range(n)]
    for i, (_method, props, _body) in enumerate(got):
        assert props.headers == {"n": i, "origin": "shard-7"}
        assert props.delivery_mode == 2
        assert props.content_type == "text/plain"
        assert props.message_id == f"m-{i}"
        assert props.correlation_id == "c"
    link.close()
    ch.connection.close()


def test_forwards_to_two_queues_a_missing_one_and_a_full_one(broker: tuple[Serve, int]) -> None:
    serve, port = broker
    ch = _channel(serve)
    ch.queue_declare("link-a")
    ch.queue_declare("link-b")
    ch.queue_declare("link-full", arguments={"x-max-length": 1, "x-overflow": "reject-publish"})
    link = Link(port).opened()
    both = link.forward_all(("link-a", "link-b"), [_message(b"to-both", 1, persistent=False)])
    assert set(both.values()) == {0}
    assert [b for _m, _p, b in _get_all(ch, "link-a")] == [b"to-both"]
    assert [b for _m, _p, b in _get_all(ch, "link-b")] == [b"to-both"]
    missing = link.forward_all(("link-a", "no-such-queue"), [_message(b"x", 2)])
    assert list(missing.values()) == [404]
    assert _get_all(ch, "link-a") == []  # refused whole: nothing enqueued anywhere
    full = link.forward_all(("link-full",), [_message(b"first", 3), _message(b"second", 4)])
    assert list(full.values()) == [0, 406]
    assert [b for _m, _p, b in _get_all(ch, "link-full")] == [b"first"]
    link.close()
    ch.connection.close()


def test_a_link_consumer_takes_credit_and_settles(broker: tuple[Serve, int]) -> None:
    serve, port = broker
    ch = _channel(serve)
    ch.queue_declare("link-dlq")
    ch.queue_declare(
        "link-c",
        arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "link-dlq"},
    )
    for i in range(5):
        ch.basic_publish("", "link-c", f"m{i}".encode())
    link = Link(port).opened()
    cid = link.origin.subscribe("/", "link-c", 2)
    link.flush()
    link.until(lambda: len(link.delivered(cid)) == 2)
    assert any(isinstance(e, ConsumerReady) and e.cid == cid for e in link.events)
    # exactly the credit: the other three wait in the queue
    assert ch.queue_declare("link-c", passive=True).method.message_count == 3
    link.origin.grant(cid, 1)
    link.flush()
    link.until(lambda: len(link.delivered(cid)) == 3)
    assert [m.body for _t, _r, m in link.delivered(cid)] == [b"m0", b"m1", b"m2"]
    assert ch.queue_declare("link-c", passive=True).method.message_count == 2
    link.origin.settle(cid, Outcome.ACK, [1])
    link.origin.settle(cid, Outcome.REQUEUE, [2])
    link.origin.settle(cid, Outcome.REJECT, [3])
    link.origin.grant(cid, 1)
    link.flush()
    link.until(lambda: len(link.delivered(cid)) == 4)
    tag, redelivered, m = link.delivered(cid)[3]
    assert (m.body, redelivered) == (b"m1", True)  # back at its place, flagged
    assert link.counts(cid) == [1, 1, 1, 2]  # the queue's count: m1's second delivery
    _wait(lambda: ch.queue_declare("link-dlq", passive=True).method.message_count == 1)
    [(_m, props, body)] = _get_all(ch, "link-dlq")
    assert body == b"m2"
    assert props.headers["x-death"][0]["reason"] == "rejected"
    # a cancel keeps the unsettled delivery settleable; the rest stays in the queue
    link.origin.cancel(cid)
    link.flush()
    link.until(lambda: any(isinstance(e, ConsumerGone) for e in link.events))
    link.origin.settle(cid, Outcome.ACK, [tag])
    link.flush()
    _wait(lambda: ch.queue_declare("link-c", passive=True).method.message_count == 2)
    assert [b for _m, _p, b in _get_all(ch, "link-c")] == [b"m3", b"m4"]
    link.close()
    ch.connection.close()


def test_unknown_queue_and_deleted_queue(broker: tuple[Serve, int]) -> None:
    serve, port = broker
    ch = _channel(serve)
    link = Link(port).opened()
    cid = link.origin.subscribe("/", "link-nothing", 5)
    link.flush()
    link.until(lambda: any(isinstance(e, ConsumerRefused) for e in link.events))
    [refused] = [e for e in link.events if isinstance(e, ConsumerRefused)]
    assert (refused.cid, refused.code) == (cid, 404)
    assert refused.text == "NOT_FOUND - no queue 'link-nothing' in vhost '/'"
    ch.queue_declare("link-goes")
    ch.basic_publish("", "link-goes", b"held")
    cid = link.origin.subscribe("/", "link-goes", 5)
    link.flush()
    link.until(lambda: len(link.delivered(cid)) == 1)
    ch.queue_delete("link-goes")
    link.until(lambda: any(isinstance(e, ConsumerGone) for e in link.events))
    [gone] = [e for e in link.events if isinstance(e, ConsumerGone)]
    assert gone.dropped == (1,)
    assert "link-goes" in gone.reason
    link.close()
    ch.connection.close()


def test_a_dropped_link_requeues_its_deliveries(broker: tuple[Serve, int]) -> None:
    serve, port = broker
    ch = _channel(serve)
    ch.queue_declare("link-drop")
    for i in range(3):
        ch.basic_publish("", "link-drop", f"d{i}".encode())
    link = Link(port).opened()
    cid = link.origin.subscribe("/", "link-drop", 10)
    link.flush()
    link.until(lambda: len(link.delivered(cid)) == 3)
    link.close()
    _wait(lambda: ch.queue_declare("link-drop", passive=True).method.message_count == 3)
    got = _get_all(ch, "link-drop")
    assert [(b, m.redelivered) for m, _p, b in got] == [(b"d0", True), (b"d1", True), (b"d2", True)]
    ch.connection.close()


def test_a_wrong_secret_and_garbage_are_refused(broker: tuple[Serve, int]) -> None:
    serve, port = broker
    bad = Link(port, secret=b"not-the-secret")
    bad.until(lambda: bad.eof or any(isinstance(e, Refused) for e in bad.events))
    assert [e.reason for e in bad.events if isinstance(e, Refused)] == [
        "shard link refused: bad secret"
    ]
    bad.close()
    garbage = Link(port).opened()
    garbage.sock.sendall(b"\x00\x00\x00\x05\xee" + b"junk")  # an unknown frame type
    garbage.until(lambda: garbage.eof)
    garbage.close()
    ch = _channel(serve)  # the broker serves on
    ch.queue_declare("link-after")
    ch.basic_publish("", "link-after", b"still here")
    assert [b for _m, _p, b in _get_all(ch, "link-after")] == [b"still here"]
    ch.connection.close()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_accepted_forwards_survive_kill_9(tmp_path: Path) -> None:
    serve, port = _serve(tmp_path / "data", tmp_path / "one.log")
    try:
        ch = _channel(serve)
        ch.queue_declare("link-kill", durable=True)
        ch.connection.close()
        link = Link(port).opened()
        n = 200
        outcomes = link.forward_all(
            ("link-kill",), [_message(f"k{i}".encode(), i) for i in range(n)]
        )
        assert set(outcomes.values()) == {0}
    finally:
        serve.kill()
    link.close()
    again, _port = _serve(tmp_path / "data", tmp_path / "two.log")
    try:
        ch = _channel(again)
        got = _get_all(ch, "link-kill")
        assert [b for _m, _p, b in got] == [f"k{i}".encode() for i in range(n)]
        ch.connection.close()
    finally:
        again.stop()


def test_forwards_into_another_vhost_and_an_unknown_one(broker: tuple[Serve, int]) -> None:
    serve, port = broker
    tenant = _channel(serve, TENANT)
    tenant.queue_declare("link-v", durable=True)
    default = _channel(serve)
    default.queue_declare("link-v")  # the same name in "/" stays apart
    link = Link(port).opened()
    assert [e.shard for e in link.events if isinstance(e, Opened)] == [3]  # --shard-index
    first = link.forward_all(("link-v",), [_message(b"t1", 1)], TENANT)
    lost = link.forward_all(("link-v",), [_message(b"lost", 2)], "no-such-vhost")
    after = link.forward_all(("link-v",), [_message(b"t2", 3)], TENANT)
    assert (list(first.values()), list(lost.values()), list(after.values())) == ([0], [404], [0])
    assert not link.eof  # the unknown vhost refused that forward only
    assert [b for _m, _p, b in _get_all(tenant, "link-v")] == [b"t1", b"t2"]
    assert _get_all(default, "link-v") == []
    cid = link.origin.subscribe("no-such-vhost", "link-v", 1)
    link.flush()
    assert (link.refused(cid).code, link.refused(cid).text) == (
        404,
        "NOT_FOUND - no vhost 'no-such-vhost'",
    )
    tenant.basic_publish("", "link-v", b"t3")
    cid = link.origin.subscribe(TENANT, "link-v", 1)
    link.flush()
    link.until(lambda: len(link.delivered(cid)) == 1)
    assert link.delivered(cid)[0][2].body == b"t3"
    link.close()
    tenant.connection.close()
    default.connection.close()


def test_a_link_consumer_with_x_priority_goes_first(broker: tuple[Serve, int]) -> None:
    serve, port = broker
    ch = _channel(serve, TENANT)
    ch.queue_declare("link-prio")
    got_locally: list[bytes] = []
    ch.basic_consume("link-prio", lambda _c, _m, _p, body: got_locally.append(body), auto_ack=True)
    link = Link(port).opened()
    bad = link.origin.subscribe(TENANT, "link-prio", 10, arguments={"x-priority": "high"})
    link.flush()
    refused = link.refused(bad)
    assert refused.code == 406
    assert refused.text.startswith("PRECONDITION_FAILED - invalid x-priority")
    cid = link.origin.subscribe(TENANT, "link-prio", 10, arguments={"x-priority": 5})
    link.flush()
    link.until(lambda: any(isinstance(e, ConsumerReady) and e.cid == cid for e in link.events))
    for i in range(4):
        ch.basic_publish("", "link-prio", f"p{i}".encode())
    link.until(lambda: len(link.delivered(cid)) == 4)
    ch.connection.process_data_events(time_limit=0.2)
    assert got_locally == []  # the local consumer, priority 0, waits while the link has credit
    assert [m.body for _t, _r, m in link.delivered(cid)] == [b"p0", b"p1", b"p2", b"p3"]
    link.close()
    ch.connection.close()
