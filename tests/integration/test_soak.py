"""Soak: minutes of confirmed durable publishing in every protocol against one `ringmq serve`,
its descriptors, RSS and threads sampled every second (defects issue, item 3).

Concurrently, each loop bounded in count and time, at modest rates:

* AMQP 0-9-1: pika publishes persistent messages with confirms (paced, pipelined; every 100th
  body is 8 KiB, so the shared body store's files take part) into a durable queue; a consumer
  acks each message.
* AMQP 1.0: a proton sender sends durable messages, each settled by the broker's disposition
  (accepted once on disk); a receiver accepts each message.
* STOMP: persistent SENDs, each with a receipt (answered once on disk); a subscriber with
  `ack:client-individual`.
* MQTT: QoS 1 publishes (PUBACK once on disk); a QoS 1 subscriber with a persistent session.
* management: GET /api/queues, /api/overview and /metrics every second, and a new AMQP
  connection every five seconds: new connections must keep being served.

Checked: every publish the broker confirmed (ack, disposition, receipt, PUBACK) was received
(duplicates are reported, and fail only past a handful); the broker's descriptors never exceed
the idle start by more than `FD_BOUND` and end near it once the clients are gone; its threads
stay bounded; its RSS after warm-up does not grow by more than `RSS_GROWTH_MIB` (median of the
last 20% of the load's samples against the 20%-40% window), so a per-message leak fails.
`RINGMQ_SOAK_S` sets the load's length (default 150 s, clamped to 10..600).
"""

from __future__ import annotations

import base64
import contextlib
import os
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
import pika
import pytest
import stomp
from proton import Message, Timeout
from proton.utils import BlockingConnection, SendException

from tests.integration.mqtt.clients import Paho
from tests.integration.soakkit import (
    Ledger,
    PikaConsumer,
    PikaPublisher,
    Sample,
    Sampler,
    body_of,
    fd_targets,
    id_of,
    median_of,
    sample,
)
from tests.serve import Serve

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SOAK_S = min(max(float(os.environ.get("RINGMQ_SOAK_S", "150")), 10.0), 600.0)
RATES = {"amqp": 200.0, "amqp10": 80.0, "stomp": 100.0, "mqtt": 100.0}  # msg/s
FD_BOUND = 64  # above the idle broker's count, at any sample
FD_END_BOUND = 10  # above it once the clients are gone
THREAD_BOUND = 16  # the broker's threads, at any sample
RSS_GROWTH_MIB = 40.0
DUPLICATES_BOUND = 10  # per protocol
DRAIN_S = 30.0  # after the load: how long the consumers may take to catch up (a bound only)


class Load:
    """The soak's client threads, their errors, and the consumers' stop switch."""

    def __init__(self) -> None:
        self.stop = threading.Event()  # consumers: stop once idle
        self.errors: dict[str, BaseException] = {}
        self.threads: list[threading.Thread] = []

    def spawn(self, name: str, fn: Callable[[], None]) -> threading.Thread:
        def run() -> None:
            try:
                fn()
            except Exception as exc:  # noqa: BLE001 - reported by the test
                self.errors[name] = exc

        t = threading.Thread(target=run, name=name, daemon=True)
        t.start()
        self.threads.append(t)
        return t


class Pacer:
    """Paces one protocol's publishes at its rate until its count is sent, `SOAK_S` passed or
    `abort` is set (the broker went past its descriptor bound: no use going on)."""

    def __init__(self, ledger: Ledger, abort: threading.Event) -> None:
        self.ledger = ledger
        self.rate = RATES[ledger.name]
        self.count = int(self.rate * SOAK_S)
        self.abort = abort
        self.t0 = time.monotonic()

    def next(self) -> bool:
        """Wait until the next publish is due; False when this publisher is done."""
        if (
            self.ledger.sent >= self.count
            or time.monotonic() - self.t0 >= SOAK_S
            or self.abort.is_set()
        ):
            return False
        delay = self.t0 + self.ledger.sent / self.rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        return True


# -- AMQP 1.0 ----------------------------------------------------------------------------------


def _amqp10_sender(url: str, ledger: Ledger, abort: threading.Event) -> None:
    conn = BlockingConnection(url, timeout=30)
    try:
        snd = conn.create_sender("soak.amqp10")
        pacer = Pacer(ledger, abort)
        while pacer.next():
            msg_id = ledger.send()
            try:
                snd.send(Message(body=body_of(msg_id, 200), durable=True))  # once accepted
            except SendException:
                ledger.refuse()
                continue
            ledger.confirm(msg_id)
    finally:
        conn.close()


def _amqp10_receiver(url: str, ledger: Ledger, stop: threading.Event) -> None:
    conn = BlockingConnection(url, timeout=30)
    try:
        rcv = conn.create_receiver("soak.amqp10", credit=100)
        while True:
            try:
                m = rcv.receive(timeout=0.2)
            except Timeout:
                if stop.is_set():
                    return
                continue
            body = m.body
            assert isinstance(body, bytes | memoryview)  # proton: binary body
            ledger.receive(id_of(bytes(body)))
            rcv.accept()
    finally:
        conn.close()


# -- STOMP -------------------------------------------------------------------------------------


class _StompListener(stomp.ConnectionListener):  # type: ignore[misc]
    def __init__(self, ledger: Ledger, conn: Any = None) -> None:
        self.ledger = ledger
        self.conn = conn  # set on the subscriber: it acks each message
        self.errors: list[str] = []
        self.subscribed = threading.Event()

    def on_receipt(self, frame: Any) -> None:
        receipt = frame.headers["receipt-id"]
        if receipt == "subscribed":
            self.subscribed.set()
        elif receipt.isdigit():  # a SEND's (DISCONNECT's are stomp.py's own uuids)
            self.ledger.confirm(int(receipt))

    def on_error(self, frame: Any) -> None:
        self.errors.append(frame.body)
        self.ledger.refuse()

    def on_message(self, frame: Any) -> None:
        self.ledger.receive(id_of(frame.body))
        self.conn.ack(frame.headers["ack"])


def _stomp(port: int) -> Any:
    return stomp.Connection12([("127.0.0.1", port)], vhost="/", auto_decode=False)


def _stomp_sender(port: int, ledger: Ledger, abort: threading.Event) -> None:
    conn = _stomp(port)
    listener = _StompListener(ledger)
    conn.set_listener("soak", listener)
    conn.connect("guest", "guest", wait=True)
    try:
        pacer = Pacer(ledger, abort)
        while pacer.next() and not listener.errors:
            msg_id = ledger.send()
            headers = {"persistent": "true", "receipt": str(msg_id)}
            conn.send("/queue/soak.stomp", body_of(msg_id, 200), headers=headers)
        _until(lambda: len(ledger.confirmed) + ledger.refused >= ledger.sent, DRAIN_S, abort)
    finally:
        conn.disconnect()
    assert not listener.errors, listener.errors


def _stomp_subscriber(port: int, ledger: Ledger) -> Any:
    conn = _stomp(port)
    listener = _StompListener(ledger, conn)
    conn.set_listener("soak", listener)
    conn.connect("guest", "guest", wait=True)
    conn.subscribe(
        "/queue/soak.stomp",
        id="soak",
        ack="client-individual",
        headers={"prefetch-count": "200", "receipt": "subscribed"},
    )
    assert listener.subscribed.wait(30), "no RECEIPT for SUBSCRIBE"
    return conn


# -- MQTT --------------------------------------------------------------------------------------


def _mqtt_sender(port: int, ledger: Ledger, abort: threading.Event) -> None:
    pub = Paho(port, "soak-pub")
    try:
        sent: list[tuple[int, mqtt.MQTTMessageInfo]] = []
        pacer = Pacer(ledger, abort)
        while pacer.next():
            msg_id = ledger.send()
            sent.append((msg_id, pub.client.publish("soak/mqtt", body_of(msg_id, 200), qos=1)))
        _until(lambda: all(info.is_published() for _, info in sent), DRAIN_S, abort)
        for msg_id, info in sent:
            if info.is_published():  # PUBACK: the broker has it on disk
                ledger.confirm(msg_id)
    finally:
        pub.disconnect()


def _mqtt_subscriber(port: int, ledger: Ledger) -> Paho:
    sub = Paho(port, "soak-sub", clean=False)  # a persistent session: a durable queue
    sub.client.on_message = lambda _c, _u, m: ledger.receive(id_of(bytes(m.payload)))
    sub.subscribe("soak/mqtt", 1)
    return sub


# -- management and new connections ------------------------------------------------------------


class Probes:
    """GETs of the management API every second, a new AMQP connection every five."""

    PATHS = ("/api/queues", "/api/overview", "/metrics")

    def __init__(self, serve: Serve) -> None:
        self.serve = serve
        self.ok = 0
        self.failed: list[str] = []
        auth = base64.b64encode(b"guest:guest").decode()
        self.headers = {"Authorization": f"Basic {auth}"}

    def run(self, stop: threading.Event) -> None:
        base = f"http://127.0.0.1:{self.serve.http_port}"
        tick = 0
        while not stop.wait(1.0):
            for path in self.PATHS:
                req = urllib.request.Request(base + path, headers=self.headers)
                try:
                    with urllib.request.urlopen(req, timeout=10) as resp:
                        resp.read()
                    self.ok += 1
                except OSError as exc:
                    self.failed.append(f"GET {path}: {exc}")
            tick += 1
            if tick % 5 == 0:
                try:
                    pika.BlockingConnection(pika.URLParameters(self.serve.amqp_url)).close()
                    self.ok += 1
                except Exception as exc:  # noqa: BLE001 - counted as a failure
                    self.failed.append(f"AMQP connect: {exc!r}")


# -- the run -----------------------------------------------------------------------------------


def _until(
    pred: Callable[[], bool], timeout_s: float, abort: threading.Event | None = None
) -> bool:
    deadline = time.monotonic() + timeout_s
    while not pred():
        if time.monotonic() > deadline or (abort is not None and abort.is_set()):
            return False
        time.sleep(0.05)
    return True


@contextlib.contextmanager
def _serve(tmp_path: Path) -> Iterator[Serve]:
    serve = Serve(tmp_path / "data", tmp_path / "serve.log", http=True, stomp=True, mqtt=True)
    try:
        yield serve
    finally:
        serve.stop()


def _table(rows: list[tuple[str, Sample]]) -> str:
    lines = [f"{'':>14} {'t (s)':>7} {'fds':>6} {'RSS MiB':>8} {'threads':>7}"]
    for label, s in rows:
        lines.append(
            f"{label:>14} {s.t_s:>7.1f} {s.fds:>6} {s.rss_kib / 1024:>8.1f} {s.threads:>7}"
        )
    return "\n".join(lines)


@pytest.mark.timeout(int(SOAK_S) + 300)
def test_soak_every_protocol_confirmed_durable_load(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with _serve(tmp_path) as serve:
        pid = serve.proc.pid
        stomp_port, mqtt_port = serve.stomp_port, serve.mqtt_port
        assert stomp_port is not None
        assert mqtt_port is not None
        start = sample(pid)
        assert start is not None
        sampler = Sampler(pid, every_s=1.0, fd_limit=start.fds + FD_BOUND)
        sampler.start()
        abort = sampler.over_limit  # past the bound the run has failed: stop publishing
        ledgers = {name: Ledger(name) for name in RATES}
        load = Load()
        probes = Probes(serve)
        url10 = f"amqp://guest:guest@127.0.0.1:{serve.port}"
        # consumers first (the MQTT session and the queues exist before the first publish)
        amqp_consumer = PikaConsumer(serve.amqp_url, "soak.amqp", ledgers["amqp"], load.stop)
        amqp_consumer.start()
        assert amqp_consumer.ready.wait(30)
        load.threads.append(amqp_consumer)
        with pika.BlockingConnection(pika.URLParameters(serve.amqp_url)) as conn:
            conn.channel().queue_declare("soak.amqp10", durable=True)
        load.spawn("amqp10-receiver", lambda: _amqp10_receiver(url10, ledgers["amqp10"], load.stop))
        stomp_sub = _stomp_subscriber(stomp_port, ledgers["stomp"])
        mqtt_sub = _mqtt_subscriber(mqtt_port, ledgers["mqtt"])
        probe_stop = threading.Event()
        load.spawn("probes", lambda: probes.run(probe_stop))
        time.sleep(1.0)  # the consumers' links and subscriptions settle

        load_t0 = time.monotonic() - sampler.t0
        amqp_publisher = PikaPublisher(
            serve.amqp_url,
            "soak.amqp",
            ledgers["amqp"],
            rate_per_s=RATES["amqp"],
            count=int(RATES["amqp"] * SOAK_S),
            duration_s=SOAK_S,
            stop=abort,
            large_every=100,
        )
        amqp_publisher.start()
        publishers = [
            amqp_publisher,
            load.spawn("amqp10-sender", lambda: _amqp10_sender(url10, ledgers["amqp10"], abort)),
            load.spawn("stomp-sender", lambda: _stomp_sender(stomp_port, ledgers["stomp"], abort)),
            load.spawn("mqtt-sender", lambda: _mqtt_sender(mqtt_port, ledgers["mqtt"], abort)),
        ]
        for t in publishers:
            t.join(timeout=SOAK_S + DRAIN_S + 30)
        load_t1 = time.monotonic() - sampler.t0
        drained = _until(
            lambda: all(ledger.complete() for ledger in ledgers.values()), DRAIN_S, abort
        )

        # the clients go; the broker should be back near where it started
        load.stop.set()
        probe_stop.set()
        for t in load.threads:
            t.join(timeout=30)
        stomp_sub.disconnect()
        mqtt_sub.disconnect()
        time.sleep(2.0)
        samples = sampler.stop()
        end = sample(pid, time.monotonic() - sampler.t0)
        assert end is not None
        held = fd_targets(pid)

    during = [s for s in samples if load_t0 <= s.t_s <= load_t1] or samples
    peak_fds = max(samples, key=lambda s: s.fds)
    peak_threads = max(samples, key=lambda s: s.threads)
    warm_rss = median_of(during, 0.2, 0.4, "rss_kib") / 1024
    last_rss = median_of(during, 0.8, 1.0, "rss_kib") / 1024
    n = len(during)
    rows = [
        ("idle start", start),
        ("load 0%", during[0]),
        ("load 25%", during[n // 4]),
        ("load 50%", during[n // 2]),
        ("load 75%", during[3 * n // 4]),
        ("load end", during[-1]),
        ("peak fds", peak_fds),
        ("peak threads", peak_threads),
        ("clients gone", end),
    ]
    summary = "\n".join(
        [
            f"soak: {SOAK_S:.0f} s of load, {len(samples)} samples of pid {pid}"
            + (" (stopped early: past the descriptor bound)" if abort.is_set() else ""),
            _table(rows),
            f"RSS median 20-40%: {warm_rss:.1f} MiB, last 20%: {last_rss:.1f} MiB",
            *(ledger.row() for ledger in ledgers.values()),
            f"probes: {probes.ok} ok, {len(probes.failed)} failed {probes.failed[:3]}",
            f"descriptors held at the end: {held}",
        ]
    )
    with capsys.disabled():
        print("\n" + summary)

    assert peak_fds.fds <= start.fds + FD_BOUND, summary
    assert end.fds <= start.fds + FD_END_BOUND, summary
    assert load.errors == {}, summary
    assert amqp_publisher.error is None, summary
    assert amqp_consumer.error is None, summary
    assert drained, summary
    for ledger in ledgers.values():
        assert ledger.confirmed, f"{ledger.name}: nothing confirmed\n{summary}"
        assert ledger.lost() == [], f"{ledger.name}: lost {ledger.lost()[:20]}\n{summary}"
        assert ledger.duplicates() <= DUPLICATES_BOUND, summary
    assert probes.failed == [], summary
    assert peak_threads.threads <= THREAD_BOUND, summary
    assert len(during) >= 10, summary  # enough samples for the RSS windows
    assert last_rss - warm_rss <= RSS_GROWTH_MIB, summary
