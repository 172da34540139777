"""`ringmq serve --shards 2`: two shard processes on one AMQP port, clients that need not
know (docs/dev/shards.md).

A real `ringmq serve --shards 2` (the parent and its two shard processes); pika clients on the
one AMQP port, which the kernel spreads over the shards (SO_REUSEPORT); the management API of
shard 0 says where each queue lives. Asserted: connections land on both shards (a queue a
connection declares lives on that connection's shard); a queue declared on one shard takes
confirmed publishes from connections on both and gives every message once to a consumer on
either; a shard killed with SIGKILL is started again by the parent, and its queue still has
every message it confirmed.
"""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pika
import pytest

from tests.serve import Serve

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(180),
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
]

_AMQP_UP = re.compile(rb"AMQP listening on")
_FOLLOWS = re.compile(rb"shard link from shard 1 follows the definitions")
_BOUND_S = 30.0


@pytest.fixture
def sharded(tmp_path: Path) -> Iterator[Serve]:
    serve = Serve(tmp_path / "data", tmp_path / "serve.log", http=True, extra=("--shards", "2"))
    _wait_log(serve, lambda log: len(_AMQP_UP.findall(log)) >= 2 and bool(_FOLLOWS.search(log)))
    yield serve
    serve.stop()


def _wait_log(serve: Serve, ready: object) -> None:
    deadline = time.monotonic() + _BOUND_S
    while not ready(serve.log_path.read_bytes()):  # type: ignore[operator]
        assert time.monotonic() < deadline, serve.log_path.read_text(errors="replace")
        time.sleep(0.05)


def _shard_of(serve: Serve, queue: str) -> int:
    r = httpx.get(f"{serve.http_url}/api/queues/%2F/{queue}", timeout=10)
    r.raise_for_status()
    return int(r.json()["shard"])


def _connection_on(serve: Serve, shard: int) -> pika.BlockingConnection:
    """A pika connection that landed on `shard` (a queue it declares lives there)."""
    for i in range(60):
        conn = pika.BlockingConnection(pika.URLParameters(serve.amqp_url))
        name = f"probe-{shard}-{i}-{time.monotonic_ns()}"
        ch = conn.channel()
        ch.queue_declare(name, durable=True)
        if _shard_of(serve, name) == shard:
            ch.queue_delete(name)
            return conn
        ch.queue_delete(name)
        conn.close()
    raise AssertionError(f"no connection landed on shard {shard} in 60")


def _publish(conn: pika.BlockingConnection, queue: str, bodies: list[bytes]) -> None:
    ch = conn.channel()
    ch.confirm_delivery()
    for b in bodies:  # each confirmed, or pika raises
        ch.basic_publish("", queue, b, pika.BasicProperties(delivery_mode=2))


def _drain(conn: pika.BlockingConnection, queue: str, n: int) -> list[bytes]:
    ch = conn.channel()
    ch.basic_qos(prefetch_count=50)
    got: list[bytes] = []
    deadline = time.monotonic() + _BOUND_S
    for _method, _props, body in ch.consume(queue, inactivity_timeout=1.0):
        if body is not None:
            got.append(body)
            ch.basic_ack(_method.delivery_tag)
        if len(got) >= n or time.monotonic() > deadline:
            break
    ch.cancel()
    return got


def test_two_shards_share_one_port_and_a_queue_takes_publishes_from_both(
    sharded: Serve,
) -> None:
    zero, one = _connection_on(sharded, 0), _connection_on(sharded, 1)
    try:
        zero.channel().queue_declare("work", durable=True)
        assert _shard_of(sharded, "work") == 0
        from_zero = [f"z{i}".encode() for i in range(100)]
        from_one = [f"o{i}".encode() for i in range(100)]
        _publish(zero, "work", from_zero)
        _publish(one, "work", from_one)  # forwarded to shard 0, confirmed by it
        got = _drain(one, "work", 200)  # consumed on shard 1 through the link
        assert sorted(got) == sorted(from_zero + from_one)
        assert [b for b in got if b.startswith(b"z")] == from_zero  # each publisher's order
        assert [b for b in got if b.startswith(b"o")] == from_one
    finally:
        zero.close()
        one.close()


def _shard_pid(serve: Serve, index: int) -> int:
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmd = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        # the last --shard-index of its command line is the one it runs with
        last = len(cmd) - 1 - cmd[::-1].index(b"--shard-index") if b"--shard-index" in cmd else -1
        if ppid == serve.proc.pid and last >= 0 and cmd[last + 1] == str(index).encode():
            return int(entry.name)
    raise AssertionError(f"no shard {index} under {serve.proc.pid}")


def test_a_killed_shard_is_started_again_with_every_confirmed_message(sharded: Serve) -> None:
    one = _connection_on(sharded, 1)
    try:
        one.channel().queue_declare("kept", durable=True)
        assert _shard_of(sharded, "kept") == 1
        bodies = [f"k{i}".encode() for i in range(300)]
        _publish(one, "kept", bodies)
    finally:
        one.close()
    victim = _shard_pid(sharded, 1)
    os.kill(victim, signal.SIGKILL)
    deadline = time.monotonic() + _BOUND_S
    while _shard_pid_or_none(sharded, 1) in (None, victim):
        assert time.monotonic() < deadline, "shard 1 was not started again"
        time.sleep(0.1)
    _wait_log(sharded, lambda log: len(_AMQP_UP.findall(log)) >= 3)
    # from a connection on either shard: shard 1's queue came back from its log
    conn = pika.BlockingConnection(pika.URLParameters(sharded.amqp_url))
    try:
        got = _drain(conn, "kept", len(bodies))
    finally:
        conn.close()
    assert got == bodies


def _shard_pid_or_none(serve: Serve, index: int) -> int | None:
    try:
        return _shard_pid(serve, index)
    except AssertionError:
        return None
