"""STOMP 1P1C: ringmq side by side with RabbitMQ's rabbitmq_stomp, on one load generator.

Theory of operation: each run forks two processes, a consumer and a producer, each with one
plain-socket STOMP 1.2 connection (frames written with `ringmq.stomp.encode`, read by the small
reader below), so the generator shares no interpreter with the other side. The consumer
subscribes first (`ack:client`, `prefetch-count`, a non-durable auto-delete queue so nothing is
left behind in someone's RabbitMQ; the producer sends to it as `/amq/queue/`) and acknowledges
cumulatively every `ack_every` messages; the producer sends `messages` SENDs of `size` bytes,
asking a RECEIPT every `window` messages and keeping at most two windows unanswered (its flow
control). The rate is messages over the time from the producer's first SEND to the consumer's
last MESSAGE (`time.monotonic`, one clock for every process on Linux). Every wait has a
deadline; every loop is bounded by the count.

Targets: ringmq, started here (`python -m ringmq serve --stomp-port 0` on loopback with a
temporary data dir, its port read from the log, stopped with SIGTERM at the end), and
RabbitMQ's STOMP plugin at `--rabbitmq` (default 127.0.0.1:61613) when something answers a
CONNECT there (never started or stopped here). Loopback only.

    .venv/bin/python benchmarks/stomp_load.py [--messages 50000] [--size 64] [--rounds 3]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import queue as queue_mod
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, Final

if __package__ in (None, ""):  # run as a script: make `ringmq` importable from the checkout
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from ringmq.stomp import encode

_CTX: Final = mp.get_context("fork")
_LISTEN: Final = re.compile(r"STOMP listening on (\d+\.\d+\.\d+\.\d+):(\d+)")
Result = dict[str, Any]


class ServerFrames:
    """Server frames (MESSAGE, RECEIPT, ERROR, CONNECTED) read from a socket."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self.sock = sock
        self.buf = bytearray()
        self.deadline = deadline

    def next(self) -> tuple[str, dict[str, str], bytes]:
        buf = self.buf
        while True:
            while buf and buf[0] in (0x0A, 0x0D):
                del buf[:1]
            head_end = buf.find(b"\n\n")
            if head_end >= 0:
                lines = bytes(buf[:head_end]).decode().split("\n")
                headers: dict[str, str] = {}
                for line in lines[1:]:
                    k, _, v = line.partition(":")
                    headers.setdefault(k, v)
                start = head_end + 2
                length = headers.get("content-length")
                end = start + int(length) if length is not None else buf.find(b"\x00", start)
                if end >= 0 and len(buf) > end:
                    body = bytes(buf[start:end])
                    del buf[: end + 1]
                    return lines[0], headers, body
            if time.monotonic() > self.deadline:
                raise TimeoutError("no frame before the deadline")
            self.sock.settimeout(max(0.01, self.deadline - time.monotonic()))
            chunk = self.sock.recv(1 << 18)
            if not chunk:
                raise ConnectionError("the broker closed the connection")
            buf += chunk


def connect(host: str, port: int, deadline: float) -> tuple[socket.socket, ServerFrames]:
    sock = socket.create_connection((host, port), timeout=5)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    headers = {"accept-version": "1.2", "host": "/", "login": "guest", "passcode": "guest"}
    sock.sendall(encode("CONNECT", headers, b"", "1.2"))
    frames = ServerFrames(sock, deadline)
    command, headers, body = frames.next()
    if command != "CONNECTED":
        raise ConnectionError(f"{command} {headers} {body[:200]!r}")
    return sock, frames


def _queue_headers(dest: str) -> dict[str, str]:
    return {"destination": dest, "durable": "false", "auto-delete": "true"}


def consumer(
    host: str, port: int, dest: str, n: int, ack_every: int, ready: Any, out: Any, timeout: float
) -> None:
    try:
        sock, frames = connect(host, port, time.monotonic() + timeout)
        sub = _queue_headers(dest) | {
            "id": "1",
            "ack": "client",
            "prefetch-count": str(ack_every * 4),
            "receipt": "sub",
        }
        sock.sendall(encode("SUBSCRIBE", sub, b"", "1.2"))
        command, headers, _ = frames.next()
        assert command == "RECEIPT", (command, headers)
        ready.set()
        got = 0
        last = 0.0
        while got < n:
            command, headers, _ = frames.next()
            if command != "MESSAGE":
                raise ConnectionError(f"{command} {headers}")
            got += 1
            last = time.monotonic()
            if got % ack_every == 0 or got == n:
                sock.sendall(encode("ACK", {"id": headers["ack"]}, b"", "1.2"))
        sock.sendall(encode("DISCONNECT", {"receipt": "bye"}, b"", "1.2"))
        out.put({"role": "consumer", "got": got, "last": last})
    except Exception as exc:  # noqa: BLE001 - reported to the driver
        out.put({"role": "consumer", "error": repr(exc)})


def producer(
    host: str, port: int, dest: str, n: int, size: int, window: int, out: Any, timeout: float
) -> None:
    try:
        sock, frames = connect(host, port, time.monotonic() + timeout)
        body = b"x" * size
        # /amq/queue/: the consumer's queue, declared by its SUBSCRIBE (no declare per SEND)
        target = {"destination": "/amq/queue/" + dest.removeprefix("/queue/")}
        plain = encode("SEND", target | {"content-length": str(size)}, body, "1.2")
        pending: list[str] = []
        first = time.monotonic()
        batch: list[bytes] = []
        for i in range(1, n + 1):
            if i % window == 0 or i == n:
                rid = str(i)
                headers = target | {"content-length": str(size), "receipt": rid}
                batch.append(encode("SEND", headers, body, "1.2"))
                sock.sendall(b"".join(batch))
                batch.clear()
                pending.append(rid)
                while len(pending) > 1 or (i == n and pending):
                    command, headers, _ = frames.next()
                    if command != "RECEIPT":
                        raise ConnectionError(f"{command} {headers}")
                    pending.remove(headers["receipt-id"])
            else:
                batch.append(plain)
        sock.sendall(encode("DISCONNECT", {}, b"", "1.2"))
        out.put({"role": "producer", "first": first, "done": time.monotonic()})
    except Exception as exc:  # noqa: BLE001 - reported to the driver
        out.put({"role": "producer", "error": repr(exc)})


def run_once(host: str, port: int, args: argparse.Namespace) -> Result:
    dest = f"/queue/stomp-bench-{uuid.uuid4().hex[:12]}"
    out = _CTX.Queue()
    ready = _CTX.Event()
    c = _CTX.Process(
        target=consumer,
        args=(host, port, dest, args.messages, args.ack_every, ready, out, args.timeout),
    )
    c.start()
    if not ready.wait(args.timeout):
        c.kill()
        return {"error": "the consumer did not subscribe in time"}
    p = _CTX.Process(
        target=producer,
        args=(host, port, dest, args.messages, args.size, args.window, out, args.timeout),
    )
    p.start()
    results: dict[str, Result] = {}
    deadline = time.monotonic() + args.timeout + 5
    while len(results) < 2 and time.monotonic() < deadline:
        try:
            r = out.get(timeout=1)
        except queue_mod.Empty:
            continue
        results[r["role"]] = r
    for proc in (p, c):
        proc.join(timeout=5)
        if proc.is_alive():
            proc.kill()
    errors = [r["error"] for r in results.values() if "error" in r]
    if errors or len(results) < 2:
        return {"error": "; ".join(errors) or "a role did not report in time"}
    seconds = results["consumer"]["last"] - results["producer"]["first"]
    return {"msgs_per_s": args.messages / seconds, "seconds": seconds}


class Ringmq:
    """`ringmq serve` with STOMP on a free loopback port and a temporary data dir."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="ringmq-stomp-bench-"))
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 30.0) -> int:
        log_path = self.dir / "ringmq.log"
        cmd = [
            sys.executable, "-m", "ringmq", "serve", "--host", "127.0.0.1",
            "--amqp-port", "0", "--http-port", "-1", "--stomp-port", "0", "--mqtt-port", "off",
            "--data-dir", str(self.dir / "data"),
        ]  # fmt: skip
        with log_path.open("ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = _LISTEN.search(log_path.read_text(errors="replace"))
            if found:
                return int(found.group(2))
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        self.stop()
        raise RuntimeError("ringmq serve did not report its STOMP port")

    def stop(self) -> None:
        proc = self.proc
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        self.proc = None
        shutil.rmtree(self.dir, ignore_errors=True)


def reachable(host: str, port: int) -> bool:
    try:
        sock, _ = connect(host, port, time.monotonic() + 5)
    except (OSError, ConnectionError, TimeoutError):
        return False
    sock.close()
    return True


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else "")
    ap.add_argument("--messages", type=int, default=50_000)
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--window", type=int, default=1000, help="messages per producer receipt")
    ap.add_argument("--ack-every", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per run")
    ap.add_argument("--rabbitmq", default="127.0.0.1:61613", help="host:port, or 'off'")
    args = ap.parse_args(argv)
    targets: list[tuple[str, str, int]] = []
    ringmq = Ringmq()
    targets.append(("ringmq", "127.0.0.1", ringmq.start()))
    if args.rabbitmq != "off":
        host, _, port_text = args.rabbitmq.rpartition(":")
        if not host.startswith("127.") and host not in ("localhost", "::1"):
            raise SystemExit("loopback only")
        if reachable(host, int(port_text)):
            targets.append(("rabbitmq", host, int(port_text)))
        else:
            print(f"no STOMP broker answers on {args.rabbitmq}: RabbitMQ skipped")
    rates: dict[str, list[float]] = {name: [] for name, _, _ in targets}
    ok = True
    try:
        for rnd in range(args.rounds):
            for name, host, port in targets:  # interleaved: both see the same machine load
                r = run_once(host, port, args)
                if "error" in r:
                    ok = False
                    print(f"round {rnd + 1} {name}: FAILED {r['error']}")
                    continue
                rates[name].append(r["msgs_per_s"])
                print(
                    f"round {rnd + 1} {name}: {r['msgs_per_s']:,.0f} msg/s ({r['seconds']:.2f} s)"
                )
    finally:
        ringmq.stop()
    print(f"\nSTOMP 1P1C, {args.messages} x {args.size} B, median of {args.rounds} rounds")
    medians = {n: statistics.median(v) for n, v in rates.items() if v}
    for name, value in medians.items():
        print(f"  {name:9s} {value:12,.0f} msg/s")
    if "ringmq" in medians and "rabbitmq" in medians:
        print(f"  ringmq / rabbitmq = {medians['ringmq'] / medians['rabbitmq']:.2f}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
