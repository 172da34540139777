"""Publishers in four protocols that follow the leader, and the checker of what they confirmed.

Each `Publisher` is a thread that publishes `"<name>:<seq>"` bodies one at a time, persistent,
and waits for the protocol's own acknowledgement (a 0-9-1 publisher confirm, a settled 1.0
transfer, a STOMP RECEIPT, an MQTT PUBACK). When its connection fails it finds the leader again
(the node whose `/api/cluster` says `leader`: connecting to it directly, not through a
follower's relay, keeps the test about the leader's own confirms), reconnects
and sends the same sequence number again: a message that was stored but not confirmed then
appears twice (a duplicate), one that was confirmed is never sent again. Every loop is bounded
by a count and by a deadline.

`check` drains the surviving leader's queue (0-9-1 `basic.get`) and reports, per publisher:
confirmed messages lost (must be 0), duplicates, messages that were never published (must be
0), and whether the first deliveries keep the publisher's order.
"""

from __future__ import annotations

import contextlib
import queue
import socket
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
import paho.mqtt.client as mqtt
import pika
import stomp
from paho.mqtt.enums import CallbackAPIVersion
from proton import Message
from proton.utils import BlockingConnection

from tests.cluster.conftest import Node

QUEUE = "faults"
TOPIC_BINDING = "faults.#"  # MQTT topic faults/<name> is routing key faults.<name> on amq.topic
ACK_TIMEOUT_S = 20.0  # against hanging only: a confirm held this long counts as a failure


def leader_of(nodes: Iterable[Node]) -> Node | None:
    """The running node that says it leads (None while there is none or it is unclear)."""
    found = []
    for n in nodes:
        if not n.running():
            continue
        with contextlib.suppress(httpx.HTTPError, AssertionError):
            if n.cluster()["role"] == "leader":
                found.append(n)
    return found[0] if len(found) == 1 else None


def _params(node: Node, **kw: Any) -> pika.ConnectionParameters:
    credentials = pika.PlainCredentials(node.user, node.password)
    return pika.ConnectionParameters(node.host, node.port, credentials=credentials, **kw)


def declare(node: Node) -> None:
    """The durable queue every publisher writes to (MQTT's through amq.topic)."""
    conn = pika.BlockingConnection(_params(node))
    try:
        ch = conn.channel()
        ch.queue_declare(QUEUE, durable=True)
        ch.queue_bind(QUEUE, "amq.topic", TOPIC_BINDING)
    finally:
        conn.close()


@dataclass
class Outage:
    """From a publisher's first failure to its next confirm."""

    failed_at: float
    resumed_at: float | None = None

    @property
    def seconds(self) -> float | None:
        return None if self.resumed_at is None else self.resumed_at - self.failed_at


@dataclass(eq=False)  # a thread: hashed by identity
class Publisher(threading.Thread):
    """One publisher following the leader (see the module docstring); subclasses talk."""

    name_: str
    nodes: Callable[[], list[Node]]
    count: int = 1_000_000
    deadline_s: float = 120.0
    confirmed: list[int] = field(default_factory=list)
    sent_at: list[float] = field(default_factory=list)
    """For each confirmed message, when its (last) send began (monotonic)."""
    confirmed_at: list[float] = field(default_factory=list)
    attempted: set[int] = field(default_factory=set)
    outages: list[Outage] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    stop_event: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        threading.Thread.__init__(self, name=f"publisher-{self.name_}", daemon=True)

    # what a protocol implements
    def connect(self, node: Node) -> None:
        raise NotImplementedError

    def send(self, body: bytes) -> None:
        """Publish and wait for the acknowledgement; raise when there is none."""
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        self.stop_event.set()

    def run(self) -> None:
        end = time.monotonic() + self.deadline_s
        seq = 0
        connected = False
        while seq < self.count and time.monotonic() < end and not self.stop_event.is_set():
            try:
                if not connected:
                    node = leader_of(self.nodes())
                    if node is None:
                        time.sleep(0.1)
                        continue
                    self.connect(node)
                    connected = True
                self.attempted.add(seq)
                sent = time.monotonic()
                self.send(f"{self.name_}:{seq}".encode())
            except Exception as exc:  # noqa: BLE001 (any failure: find the leader, resend `seq`)
                self.errors[type(exc).__name__] += 1
                if not self.outages or self.outages[-1].resumed_at is not None:
                    self.outages.append(Outage(time.monotonic()))
                if connected:
                    with contextlib.suppress(Exception):
                        self.close()
                connected = False
                time.sleep(0.1)
                continue
            self.confirmed_at.append(time.monotonic())
            self.sent_at.append(sent)
            self.confirmed.append(seq)
            if self.outages and self.outages[-1].resumed_at is None:
                self.outages[-1].resumed_at = time.monotonic()
            seq += 1
        if connected:
            with contextlib.suppress(Exception):
                self.close()

    def wait_confirms(self, more: int, timeout_s: float = 60.0) -> None:
        """Block until `more` further messages are confirmed (bounded against hanging)."""
        target = len(self.confirmed) + more
        deadline = time.monotonic() + timeout_s
        while len(self.confirmed) < target:
            assert self.is_alive(), f"{self.name_} stopped at {len(self.confirmed)}"
            assert time.monotonic() < deadline, (
                f"{self.name_}: {len(self.confirmed)} of {target} confirmed, errors {self.errors}"
            )
            time.sleep(0.05)


class Amqp091(Publisher):
    """pika, publisher confirms (`basic_publish` raises unless the broker confirms)."""

    def connect(self, node: Node) -> None:
        params = _params(node, heartbeat=2, socket_timeout=5, blocked_connection_timeout=10)
        self.conn = pika.BlockingConnection(params)
        self.ch = self.conn.channel()
        self.ch.confirm_delivery()
        self.props = pika.BasicProperties(delivery_mode=2)

    def send(self, body: bytes) -> None:
        self.ch.basic_publish("", QUEUE, body, self.props, mandatory=True)

    def close(self) -> None:
        if self.conn.is_open:
            self.conn.close()


class Amqp10(Publisher):
    """python-qpid-proton's blocking sender: `send` waits until the transfer is settled."""

    def connect(self, node: Node) -> None:
        url = f"amqp://{node.user}:{node.password}@{node.host}:{node.port}"
        # a heartbeat: after a cut (no FIN), close() would otherwise wait on the socket forever
        self.conn = BlockingConnection(url, timeout=ACK_TIMEOUT_S, heartbeat=2)
        self.sender = self.conn.create_sender(f"/queues/{QUEUE}")

    def send(self, body: bytes) -> None:
        # inferred: the bytes travel as a data section (the 0-9-1 body as it is)
        self.sender.send(Message(body=body, durable=True, inferred=True))

    def close(self) -> None:
        self.conn.close()


class _Receipts(stomp.ConnectionListener):  # type: ignore[misc]
    def __init__(self) -> None:
        self.receipts: queue.Queue[str] = queue.Queue()

    def on_receipt(self, frame: Any) -> None:
        self.receipts.put(frame.headers["receipt-id"])

    def on_error(self, frame: Any) -> None:
        self.receipts.put("error")

    def on_disconnected(self) -> None:
        self.receipts.put("disconnected")


class Stomp(Publisher):
    """stomp.py, each SEND with a receipt; the RECEIPT is the acknowledgement."""

    def connect(self, node: Node) -> None:
        assert node.stomp_port is not None
        self.conn = stomp.Connection12([(node.host, node.stomp_port)], reconnect_attempts_max=1)
        self.listener = _Receipts()
        self.conn.set_listener("receipts", self.listener)
        self.conn.connect(node.user, node.password, wait=True)

    def send(self, body: bytes) -> None:
        receipt = body.decode()
        self.conn.send(
            f"/amq/queue/{QUEUE}", body, headers={"persistent": "true", "receipt": receipt}
        )
        got = self.listener.receipts.get(timeout=ACK_TIMEOUT_S)
        if got != receipt:
            raise ConnectionError(f"no receipt: {got}")

    def close(self) -> None:
        self.conn.disconnect()


class Mqtt(Publisher):
    """paho-mqtt QoS 1: `wait_for_publish` returns once the PUBACK came."""

    def connect(self, node: Node) -> None:
        assert node.mqtt_port is not None
        self.client = mqtt.Client(
            CallbackAPIVersion.VERSION2, client_id=f"faults-{uuid.uuid4().hex[:8]}"
        )
        self.lost = threading.Event()
        self.client.on_disconnect = lambda *_: self.lost.set()
        self.client.username_pw_set(node.user, node.password)
        self.client.connect(node.host, node.mqtt_port, keepalive=5)
        self.client.loop_start()

    def send(self, body: bytes) -> None:
        info = self.client.publish(f"faults/{self.name_}", body, qos=1)
        deadline = time.monotonic() + ACK_TIMEOUT_S
        # paho would wait out the timeout after a disconnect: watch for it instead
        while not info.is_published():
            if self.lost.is_set() or time.monotonic() > deadline:
                raise ConnectionError(f"no PUBACK (rc {info.rc})")
            info.wait_for_publish(timeout=0.05)

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


PROTOCOLS: dict[str, type[Publisher]] = {
    "amqp091": Amqp091,
    "amqp10": Amqp10,
    "stomp": Stomp,
    "mqtt": Mqtt,
}


def drain(node: Node) -> list[bytes]:
    """Every message the node's queue holds, in order (acknowledged)."""
    conn = pika.BlockingConnection(_params(node))
    got: list[bytes] = []
    try:
        ch = conn.channel()
        depth = ch.queue_declare(QUEUE, durable=True).method.message_count
        ch.basic_qos(prefetch_count=1000)
        # bounded: the depth read above, or a second without a delivery
        for method, _props, body in ch.consume(QUEUE, inactivity_timeout=1.0):
            if method is None:
                break
            got.append(body)
            ch.basic_ack(method.delivery_tag)
            if len(got) >= depth:
                break
        ch.cancel()
    finally:
        conn.close()
    return got


@dataclass
class Report:
    publisher: str
    confirmed: int
    delivered: int
    lost: list[int]
    duplicates: int
    unknown: list[int]
    in_order: bool

    def __str__(self) -> str:
        return (
            f"{self.publisher}: confirmed {self.confirmed}, delivered {self.delivered}, "
            f"lost {len(self.lost)}, duplicates {self.duplicates}, never published "
            f"{len(self.unknown)}, order kept {self.in_order}"
        )


def check(publishers: Sequence[Publisher], delivered: list[bytes]) -> list[Report]:
    """Compare what each publisher had confirmed with the surviving queue; assert and report."""
    by_name: dict[str, list[int]] = {p.name_: [] for p in publishers}
    strangers = []
    for body in delivered:
        name, _, seq = body.decode().partition(":")
        if name in by_name:
            by_name[name].append(int(seq))
        else:
            strangers.append(body)
    reports = []
    for p in publishers:
        got = by_name[p.name_]
        firsts: list[int] = []
        seen: set[int] = set()
        for s in got:
            if s not in seen:
                seen.add(s)
                firsts.append(s)
        reports.append(
            Report(
                publisher=p.name_,
                confirmed=len(p.confirmed),
                delivered=len(got),
                lost=sorted(set(p.confirmed) - seen),
                duplicates=len(got) - len(seen),
                unknown=sorted(seen - p.attempted),
                in_order=firsts == sorted(firsts),
            )
        )
    for r in reports:
        print(r)
    for p in publishers:
        done = [o.seconds for o in p.outages if o.seconds is not None]
        print(f"{p.name_}: outages {', '.join(f'{s:.2f} s' for s in done) or 'none'}")
    assert not strangers, f"messages nobody published: {strangers[:5]}"
    for r in reports:
        assert not r.lost, f"{r.publisher}: {len(r.lost)} confirmed messages lost: {r.lost[:20]}"
        assert not r.unknown, f"{r.publisher}: never published: {r.unknown[:20]}"
        assert r.in_order, f"{r.publisher}: first deliveries out of order"
    return reports


class DelayProxy:
    """A loopback TCP proxy that holds every chunk sent to `target` for `delay_s` first.

    In front of etcd it makes each of the nodes' etcd requests (an ISR write among them) take
    `delay_s` longer, so that a leader that confirmed before its ISR write reached etcd would
    be caught by a read made right after the confirm. Threads, one pair per connection.
    """

    def __init__(self, target: tuple[str, int], delay_s: float) -> None:
        self.target = target
        self.delay_s = delay_s
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.listener.getsockname()[1]
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self.listener.accept()
            except OSError:
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                self._sockets |= {client, upstream}
            threading.Thread(target=self._pump, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, False), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, delayed: bool) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                if delayed:
                    time.sleep(self.delay_s)
                dst.sendall(data)
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self._closed.set()
        self.listener.close()
        with self._lock:
            for s in self._sockets:
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()
            self._sockets.clear()
