"""A leader ringmq and a follower ringmq on loopback: the follower's directory is a warm copy.

The leader runs with `--cluster-port`, the follower with `--follow` (it serves no clients and
applies the leader's log into its own data directory). Messages published with confirms are
replicated; after a kill -9 of the leader, `ringmq serve` on the follower's directory (a
promotion) has every one of them. A follower started late catches up by bulk sync while the
leader keeps taking publishes.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pika
import pytest

from ringmq.storage.shardlog import FileEntry, file_index
from tests.serve import Serve

pytestmark = pytest.mark.integration

SECRET = "integration-secret"
_REPL = re.compile(rb"replication listening on ([0-9.]+):(\d+)")
_FOLLOWING = re.compile(rb"replication: following ([0-9.]+):(\d+)")


def _leader(tmp_path: Path, *options: str) -> tuple[Serve, int]:
    leader = Serve(
        tmp_path / "leader",
        tmp_path / "leader.log",
        extra=("--cluster-port", "0", "--cluster-secret", SECRET, *options),
    )
    found = _REPL.search(leader.log_path.read_bytes())
    assert found is not None
    return leader, int(found.group(2))


def _follower(tmp_path: Path, port: int, *options: str) -> Serve:
    return Serve(
        tmp_path / "follower",
        tmp_path / "follower.log",
        extra=("--follow", f"127.0.0.1:{port}", "--cluster-secret", SECRET, *options),
        wait=_FOLLOWING,
    )


def _wait_log(serve: Serve, line: bytes, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while line not in serve.log_path.read_bytes():
        assert time.monotonic() < deadline, serve.log_path.read_text()
        time.sleep(0.05)


def _publish(url: str, queue: str, bodies: list[bytes]) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(url))
    try:
        ch = conn.channel()
        ch.confirm_delivery()
        ch.queue_declare(queue, durable=True)
        for body in bodies:
            ch.basic_publish("", queue, body, pika.BasicProperties(delivery_mode=2))
    finally:
        conn.close()


def _files(root: Path) -> list[FileEntry]:
    return [e for e in file_index(root) if e.size]


def _wait_replicated(tmp_path: Path, timeout_s: float = 60.0) -> None:
    # the leader is idle: its copy must reach exactly its files (a bound against hanging)
    leader, follower = tmp_path / "leader" / "store", tmp_path / "follower" / "store"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if _files(leader) == _files(follower):
            return
        time.sleep(0.1)
    raise AssertionError(f"not replicated:\n{_files(leader)}\n{_files(follower)}")


def _drain(url: str, queue: str) -> list[bytes]:
    conn = pika.BlockingConnection(pika.URLParameters(url))
    try:
        ch = conn.channel()
        got: list[bytes] = []
        while True:
            method, _, body = ch.basic_get(queue, auto_ack=True)
            if method is None:
                return got
            got.append(body)
    finally:
        conn.close()


def _bodies(prefix: str, n: int) -> list[bytes]:
    # small (embedded in the journal) and large (shared message store) bodies
    return [f"{prefix}-{i}".encode() + b"x" * (6000 if i % 7 == 0 else 50) for i in range(n)]


def test_promoted_follower_has_every_confirmed_message(tmp_path: Path) -> None:
    leader, port = _leader(tmp_path)
    follower = _follower(tmp_path, port)
    try:
        sent = _bodies("a", 400)
        _publish(leader.amqp_url, "q", sent)
        _wait_replicated(tmp_path)
    finally:
        leader.kill()
        follower.stop()
    promoted = Serve(tmp_path / "follower", tmp_path / "promoted.log")
    try:
        assert _drain(promoted.amqp_url, "q") == sent
    finally:
        promoted.stop()


def test_late_follower_catches_up_by_bulk_sync_while_the_leader_serves(tmp_path: Path) -> None:
    leader, port = _leader(tmp_path)
    follower: Serve | None = None
    try:
        before = _bodies("before", 300)
        _publish(leader.amqp_url, "q", before)
        during = _bodies("during", 600)
        publisher = threading.Thread(target=_publish, args=(leader.amqp_url, "q", during))
        publisher.start()
        follower = _follower(tmp_path, port)
        publisher.join(timeout=120)
        assert not publisher.is_alive()
        # the copy's files can equal the leader's just before the follower handles `Synced`
        _wait_log(follower, b"bulk sync done")
        _wait_replicated(tmp_path)
    finally:
        leader.kill()
        if follower is not None:
            follower.stop()
    promoted = Serve(tmp_path / "follower", tmp_path / "promoted.log")
    try:
        assert _drain(promoted.amqp_url, "q") == before + during
    finally:
        promoted.stop()


def test_confirm_replicated_waits_for_the_follower(tmp_path: Path) -> None:
    # --confirm-replicated: a confirm means the follower has the message. The follower is
    # frozen (SIGSTOP) while a publisher runs, then both brokers are killed: every message
    # confirmed must be on the promoted copy. (Without the option the publisher gets its
    # confirms from the leader alone and the frozen follower has none of them.)
    leader, port = _leader(tmp_path, "--confirm-replicated")
    follower = _follower(tmp_path, port)
    confirmed: list[bytes] = []

    def publish(bodies: list[bytes]) -> None:
        conn = pika.BlockingConnection(pika.URLParameters(leader.amqp_url))
        try:
            ch = conn.channel()
            ch.confirm_delivery()
            ch.queue_declare("q", durable=True)
            for body in bodies:
                ch.basic_publish("", "q", body, pika.BasicProperties(delivery_mode=2))
                confirmed.append(body)
        finally:
            # the broker may be gone: closing still releases pika's sockets
            with contextlib.suppress(Exception):
                conn.close()

    try:
        # the leader counts the follower from its first acknowledgement after the copy
        _wait_log(leader, b"in step at position")
        publish(_bodies("running", 50))
        os.kill(follower.proc.pid, signal.SIGSTOP)
        frozen = threading.Thread(target=_quietly, args=(publish, _bodies("frozen", 200)))
        frozen.start()
        frozen.join(timeout=3)  # long enough for the publishes to be confirmed without it
    finally:
        leader.kill()
        follower.kill()
    frozen.join(timeout=30)
    assert len(confirmed) >= 50
    promoted = Serve(tmp_path / "follower", tmp_path / "promoted.log")
    try:
        got = _drain(promoted.amqp_url, "q")
    finally:
        promoted.stop()
    assert got[: len(confirmed)] == confirmed


def _quietly(fn: Callable[[list[bytes]], None], arg: list[bytes]) -> None:
    with contextlib.suppress(Exception):  # the broker is killed under it
        fn(arg)


def test_a_wrong_secret_is_refused(tmp_path: Path) -> None:
    leader, port = _leader(tmp_path)
    intruder = Serve(
        tmp_path / "intruder",
        tmp_path / "intruder.log",
        extra=("--follow", f"127.0.0.1:{port}", "--cluster-secret", "wrong"),
        wait=_FOLLOWING,
    )
    try:
        _wait_log(intruder, b"authentication failed")
        assert not any((tmp_path / "intruder" / "store" / "journal").iterdir())
    finally:
        intruder.stop()
        leader.stop()
