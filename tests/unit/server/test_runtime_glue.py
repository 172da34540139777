"""The server glue against a scripted broker: handshake, effects routing, errors, shutdown.

The real `Broker` is exercised by tests/integration; here a small scripted broker makes the
server's own duties observable: one write per batch, AMQPError -> Channel/Connection.Close,
unexpected exceptions -> 541 for that connection only, deadline timers, clean shutdown.
"""

from __future__ import annotations

import socket
import threading
from pathlib import Path
from typing import Any, cast

import pika
import pika.exceptions
import pytest

from ringmq.adapters.amqp091 import Amqp091
from ringmq.amqp import spec
from ringmq.amqp.reply_codes import AMQPError, ReplyCode
from ringmq.core.auth import Identity
from ringmq.core.broker import Broker
from ringmq.core.effects import Effect, Reply, ReplyContent
from ringmq.core.message import Message
from ringmq.node import BrokerThread
from ringmq.server.runtime import ServerOptions


class ScriptedBroker:
    """Just enough broker: queue.declare echoes, passive declare of 'missing' is 404,
    declare of 'boom' raises a bug, basic.publish to 'echo' delivers to every consumer."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.calls: list[tuple[Any, ...]] = []
        self.consumers: list[tuple[int, int, str]] = []
        self.deadline: int | None = None
        self.ticks = 0
        # what the server reads of every broker, with nothing to do here
        self.flow_requests: dict[int, Any] = {}
        self.defer_dispatch = False
        self.alarms: dict[str, str] = {}
        self.memory_bound = (0, 0)

    def as_broker(self) -> Broker:
        return cast("Broker", self)

    def as_amqp091(self) -> Amqp091:
        return cast("Amqp091", self)

    def dispatch_pending(self, now_ms: int) -> list[Effect]:
        return []

    def check_publish(self, conn_id: int, channel: int, method: Any) -> None:
        pass

    def publish_run_channels(self, conn_id: int) -> set[int] | None:
        return None  # every publish the per-command way

    def take_flow(self) -> list[Any]:
        return []

    def memory_held_bytes(self) -> int:
        return 0

    def set_memory_bound(self, head_count: int, head_bytes: int) -> int:
        self.memory_bound = (head_count, head_bytes)
        return 0

    def set_alarm(self, resource: str, reason: str | None) -> list[Effect]:
        return []

    def close(self) -> None:
        pass

    def check_login(
        self,
        mechanism: str,
        response: bytes,
        peer_loopback: bool,
        cert: bytes | None = None,
        now_ms: int = 0,
    ) -> Identity:
        user = response.split(b"\x00")[1].decode()
        if response.split(b"\x00")[2] != b"guest":
            raise AMQPError(ReplyCode.ACCESS_REFUSED, "bad password")
        return Identity(user)

    def connection_opened(self, conn_id: int, user: str, vhost: str, *a: Any) -> None:
        if vhost != "/":
            raise AMQPError(ReplyCode.NOT_ALLOWED, f"vhost {vhost} not found")
        self.calls.append(("opened", conn_id))

    def connection_closed(self, conn_id: int, now_ms: int) -> list[Effect]:
        self.calls.append(("closed", conn_id))
        self.consumers = [c for c in self.consumers if c[0] != conn_id]
        return []

    def channel_opened(self, conn_id: int, channel: int, now_ms: int) -> list[Effect]:
        return []

    def channel_closed(self, conn_id: int, channel: int, now_ms: int) -> list[Effect]:
        self.calls.append(("channel_closed", conn_id, channel))
        return []

    def set_writable(self, conn_id: int, writable: bool, now_ms: int) -> list[Effect]:
        return []

    def handle(
        self, conn_id: int, channel: int, method: Any, content: Any, now_ms: int
    ) -> list[Effect]:
        if isinstance(method, spec.QueueDeclare):
            if method.queue == "boom":
                raise KeyError("a bug in the core")
            if method.passive and method.queue == "missing":
                raise AMQPError(
                    ReplyCode.NOT_FOUND,
                    "no queue 'missing' in vhost '/'",
                    class_id=50,
                    method_id=10,
                )
            if method.queue == "tick":
                self.deadline = now_ms + 50
            return [Reply(conn_id, channel, spec.QueueDeclareOk(method.queue, 0, 0))]
        if isinstance(method, spec.BasicConsume):
            self.consumers.append((conn_id, channel, method.consumer_tag or "ctag"))
            return [Reply(conn_id, channel, spec.BasicConsumeOk(method.consumer_tag or "ctag"))]
        if isinstance(method, spec.BasicCancel):
            self.consumers = [c for c in self.consumers if c[2] != method.consumer_tag]
            return [Reply(conn_id, channel, spec.BasicCancelOk(method.consumer_tag))]
        if isinstance(method, spec.BasicPublish):
            msg = Message("", method.routing_key, content.properties_bin, bytes(content.body))
            return [
                ReplyContent(
                    c, ch, spec.BasicDeliver(tag, i + 1, False, "", method.routing_key), msg
                )
                for i, (c, ch, tag) in enumerate(self.consumers)
            ]
        return []

    def tick(self, now_ms: int) -> list[Effect]:
        self.ticks += 1
        self.deadline = None
        return []

    def next_deadline_ms(self) -> int | None:
        return self.deadline


@pytest.fixture
def scripted(tmp_path: Path):
    broker = ScriptedBroker()
    b = BrokerThread(
        ServerOptions(host="127.0.0.1", amqp_port=0, http_port=None, data_dir=tmp_path),
        broker=broker.as_broker(),
        amqp091=broker.as_amqp091(),
    )
    b.start()
    yield b, broker
    b.stop()


def connect(b: BrokerThread, **kw: Any) -> pika.BlockingConnection:
    return pika.BlockingConnection(pika.ConnectionParameters(host=b.host, port=b.port, **kw))


def test_handshake_declare_and_delivery(scripted: tuple[BrokerThread, ScriptedBroker]) -> None:
    b, _broker = scripted
    with connect(b) as c1, connect(b) as c2:
        ch1, ch2 = c1.channel(), c2.channel()
        assert ch1.queue_declare("q").method.queue == "q"
        got: list[bytes] = []
        ch2.basic_consume("q", lambda ch, m, p, body: got.append(body), auto_ack=True)
        ch1.basic_publish("", "echo", b"hello")
        for _ in range(100):
            if got:
                break
            c2.process_data_events(time_limit=0.02)
        assert got == [b"hello"]


def test_soft_error_closes_channel_only(scripted: tuple[BrokerThread, ScriptedBroker]) -> None:
    b, _broker = scripted
    with connect(b) as conn:
        ch = conn.channel()
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as exc:
            ch.queue_declare("missing", passive=True)
        assert exc.value.reply_code == 404
        assert exc.value.reply_text == "NOT_FOUND - no queue 'missing' in vhost '/'"
        assert conn.channel().queue_declare("still-fine").method.queue == "still-fine"


def test_core_bug_is_541_for_that_connection_only(
    scripted: tuple[BrokerThread, ScriptedBroker],
) -> None:
    b, _broker = scripted
    with connect(b) as bystander:
        with connect(b) as victim:
            with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as exc:
                victim.channel().queue_declare("boom")
            assert exc.value.reply_code == 541
        assert bystander.channel().queue_declare("ok").method.queue == "ok"


def test_login_and_vhost_refusals(scripted: tuple[BrokerThread, ScriptedBroker]) -> None:
    b, _ = scripted
    with pytest.raises(pika.exceptions.ProbableAuthenticationError):
        connect(b, credentials=pika.PlainCredentials("guest", "nope"))
    with pytest.raises(pika.exceptions.ProbableAccessDeniedError, match="530"):
        connect(b, virtual_host="elsewhere")


def test_deadline_timer_fires(scripted: tuple[BrokerThread, ScriptedBroker]) -> None:
    b, broker = scripted
    with connect(b) as conn:
        conn.channel().queue_declare("tick")
        for _ in range(200):
            if broker.ticks:
                break
            conn.sleep(0.01)
        assert broker.ticks == 1


def test_connection_close_reaches_broker(scripted: tuple[BrokerThread, ScriptedBroker]) -> None:
    b, broker = scripted
    conn = connect(b)
    conn.channel()
    conn.close()
    for _ in range(200):
        if any(c[0] == "closed" for c in b.call(lambda: list(broker.calls))):
            break
        threading.Event().wait(0.01)
    assert ("closed", 1) in b.call(lambda: list(broker.calls))


def test_shutdown_sends_320(tmp_path: Path) -> None:
    broker = ScriptedBroker()
    b = BrokerThread(
        ServerOptions(host="127.0.0.1", amqp_port=0, http_port=None, data_dir=tmp_path),
        broker=broker.as_broker(),
        amqp091=broker.as_amqp091(),
    )
    b.start()
    conn = connect(b)
    b.stop()
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as exc:
        conn.channel()
    assert exc.value.reply_code == 320


def test_bad_protocol_header(scripted: tuple[BrokerThread, ScriptedBroker]) -> None:
    b, _ = scripted
    with socket.create_connection((b.host, b.port), timeout=5) as s:
        s.sendall(b"AMQP\x01\x01\x00\x0a")
        data = b""
        while chunk := s.recv(64):
            data += chunk
    assert data == b"AMQP\x00\x00\x09\x01"


def test_handshake_timeout(tmp_path: Path) -> None:
    from ringmq.server.configfile import FileConfig, LimitsSpec

    b = BrokerThread(
        ServerOptions(
            host="127.0.0.1",
            amqp_port=0,
            http_port=None,
            data_dir=tmp_path,
            config=FileConfig(limits=LimitsSpec(handshake_timeout_ms=200)),
        ),
        broker=(scripted := ScriptedBroker()).as_broker(),
        amqp091=scripted.as_amqp091(),
    )
    b.start()
    try:
        with socket.create_connection((b.host, b.port), timeout=10) as s:
            # silent client: the server drops it after the handshake timeout
            assert s.recv(64) == b""
    finally:
        b.stop()


def test_timeouts_follow_the_injected_clock(tmp_path: Path) -> None:
    from ringmq.server.clock import FakeClock

    clock = FakeClock()
    b = BrokerThread(
        ServerOptions(host="127.0.0.1", amqp_port=0, http_port=None, data_dir=tmp_path),
        clock=clock,
        broker=(scripted := ScriptedBroker()).as_broker(),
        amqp091=scripted.as_amqp091(),
    )
    b.start()
    try:
        with socket.create_connection((b.host, b.port), timeout=10) as s:
            # silent client; real time passes but the fake clock does not: still connected
            s.settimeout(1.5)
            with pytest.raises(TimeoutError):
                s.recv(64)
            clock.advance(10_001)  # past the 10 s handshake timeout
            s.settimeout(10)
            assert s.recv(64) == b""
    finally:
        b.stop()


def test_each_own_port_listener_has_its_port_field_plain_and_tls() -> None:
    # runtime.py opens the listeners of `OWN_PORT_LISTENERS` by the `<key>_port` rule: a key
    # without its field in the options or in [tls] would fail only when a broker starts
    from dataclasses import fields

    from ringmq.server.configspec import TLSSpec
    from ringmq.server.options import ServerOptions
    from ringmq.server.ports import LOOPBACK_LISTENERS, OWN_PORT_LISTENERS

    plain = {f.name for f in fields(ServerOptions)}
    tls = {f.name for f in fields(TLSSpec)}
    for key in OWN_PORT_LISTENERS:
        assert f"{key.replace('-', '_')}_port" in plain & tls, key
    for key in LOOPBACK_LISTENERS:  # never over TLS
        assert f"{key.replace('-', '_')}_port" in plain, key
