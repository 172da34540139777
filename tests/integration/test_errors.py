"""Reply codes as pika sees them, and malformed bytes over a raw socket."""

from __future__ import annotations

import random
import socket
import struct
from typing import Any

import pika
import pika.exceptions
import pytest

from ringmq.node import BrokerThread

pytestmark = pytest.mark.integration


def connect(b: BrokerThread, **kw: Any) -> pika.BlockingConnection:
    return pika.BlockingConnection(pika.ConnectionParameters(host=b.host, port=b.port, **kw))


def test_passive_declare_missing_queue_is_404(broker: BrokerThread) -> None:
    with connect(broker) as conn:
        ch = conn.channel()
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as exc:
            ch.queue_declare(queue="nope", passive=True)
        assert exc.value.reply_code == 404
        assert "nope" in exc.value.reply_text
        # only the channel died: the connection still works
        ch2 = conn.channel()
        ch2.queue_declare(queue="yes")


def test_redeclare_with_different_args_is_406(broker: BrokerThread) -> None:
    with connect(broker) as conn:
        ch = conn.channel()
        ch.queue_declare(queue="q406", arguments={"x-max-length": 10})
        ch.queue_declare(queue="q406", arguments={"x-max-length": 10})  # same: fine
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as exc:
            ch.queue_declare(queue="q406", arguments={"x-max-length": 20})
        assert exc.value.reply_code == 406
        ch = conn.channel()
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as exc:
            ch.queue_declare(queue="q406", durable=True, arguments={"x-max-length": 10})
        assert exc.value.reply_code == 406


def test_bad_queue_argument_is_406(broker: BrokerThread) -> None:
    with connect(broker) as conn:
        ch = conn.channel()
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as exc:
            ch.queue_declare(queue="bad", arguments={"x-max-length": "ten"})
        assert exc.value.reply_code == 406


def test_amq_prefix_is_403(broker: BrokerThread) -> None:
    with connect(broker) as conn:
        ch = conn.channel()
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as exc:
            ch.exchange_declare(exchange="amq.mine", exchange_type="direct")
        assert exc.value.reply_code == 403


def test_publish_to_missing_exchange_is_404(broker: BrokerThread) -> None:
    with connect(broker) as conn:
        ch = conn.channel()
        ch.basic_publish(exchange="missing", routing_key="k", body=b"x")
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as exc:
            ch.queue_declare(queue="after")  # the close arrives before this reply
        assert exc.value.reply_code == 404


def test_unknown_delivery_tag_is_406(broker: BrokerThread) -> None:
    with connect(broker) as conn:
        ch = conn.channel()
        ch.basic_ack(delivery_tag=99)
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as exc:
            ch.queue_declare(queue="after")
        assert exc.value.reply_code == 406


def test_exclusive_queue_of_another_connection_is_405(broker: BrokerThread) -> None:
    with connect(broker) as owner, connect(broker) as other:
        owner.channel().queue_declare(queue="mine", exclusive=True)
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as exc:
            other.channel().queue_declare(queue="mine", exclusive=True)
        assert exc.value.reply_code == 405


def test_wrong_password_is_refused(broker: BrokerThread) -> None:
    creds = pika.PlainCredentials("guest", "wrong")
    with pytest.raises(pika.exceptions.ProbableAuthenticationError):
        connect(broker, credentials=creds)


def test_unknown_vhost_is_refused(broker: BrokerThread) -> None:
    with pytest.raises(pika.exceptions.ProbableAccessDeniedError, match="530"):
        connect(broker, virtual_host="nowhere")


def test_delete_in_use_queue_if_unused_is_406(broker: BrokerThread) -> None:
    with connect(broker) as conn:
        ch = conn.channel()
        ch.queue_declare(queue="busy")
        ch.basic_consume("busy", lambda *a: None)
        ch2 = conn.channel()
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as exc:
            ch2.queue_delete(queue="busy", if_unused=True)
        assert exc.value.reply_code == 406


# -- raw sockets --------------------------------------------------------------------------------

FRAME_END = b"\xce"


def _frame(ftype: int, channel: int, payload: bytes, end: bytes = FRAME_END) -> bytes:
    return struct.pack(">BHI", ftype, channel, len(payload)) + payload + end


def _shortstr(s: str) -> bytes:
    b = s.encode()
    return bytes([len(b)]) + b


def _read_frames(sock: socket.socket, limit: int = 20) -> list[tuple[int, int, bytes]]:
    """Read frames until Connection.Close (answered with Close-Ok, then EOF expected) or EOF."""
    buf = b""
    frames: list[tuple[int, int, bytes]] = []
    sock.settimeout(5)
    while len(frames) < limit:
        try:
            chunk = sock.recv(65536)
        except (ConnectionResetError, TimeoutError):
            break
        if not chunk:
            break
        buf += chunk
        while len(buf) >= 8:
            ftype, ch, size = struct.unpack(">BHI", buf[:7])
            if len(buf) < 8 + size:
                break
            frames.append((ftype, ch, buf[7 : 7 + size]))
            buf = buf[8 + size :]
        if _close_code(frames) is not None:
            # answer like a client; the server then closes the socket
            sock.sendall(_frame(1, 0, struct.pack(">HH", 10, 51)))
            try:
                assert sock.recv(65536) == b""
            except ConnectionResetError:
                pass
            break
    return frames


def _close_code(frames: list[tuple[int, int, bytes]]) -> int | None:
    for ftype, ch, payload in frames:
        if ftype == 1 and ch == 0 and payload[:4] == struct.pack(">HH", 10, 50):
            return int(struct.unpack(">H", payload[4:6])[0])
    return None


def _handshake(sock: socket.socket) -> None:
    """Protocol header, Start-Ok (PLAIN guest/guest), Tune-Ok and Open for vhost '/'."""
    sock.sendall(b"AMQP\x00\x00\x09\x01")
    start_ok = (
        struct.pack(">HH", 10, 11)
        + struct.pack(">I", 0)  # empty client properties
        + _shortstr("PLAIN")
        + struct.pack(">I", 12)
        + b"\x00guest\x00guest"
        + _shortstr("en_US")
    )
    tune_ok = struct.pack(">HHHIH", 10, 31, 2047, 131072, 0)
    open_ = struct.pack(">HH", 10, 40) + _shortstr("/") + _shortstr("") + b"\x00"
    # read Start and Tune before answering, as a client would
    sock.settimeout(5)
    _recv_frame(sock)  # connection.start
    sock.sendall(_frame(1, 0, start_ok))
    _recv_frame(sock)  # connection.tune
    sock.sendall(_frame(1, 0, tune_ok) + _frame(1, 0, open_))
    f = _recv_frame(sock)  # connection.open-ok
    assert f[2][:4] == struct.pack(">HH", 10, 41)


def _recv_frame(sock: socket.socket) -> tuple[int, int, bytes]:
    head = _recv_exact(sock, 7)
    ftype, ch, size = struct.unpack(">BHI", head)
    payload = _recv_exact(sock, size + 1)
    assert payload[-1:] == FRAME_END
    return ftype, ch, payload[:-1]


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    return buf


def _still_serves(b: BrokerThread) -> None:
    with connect(b) as conn:
        ch = conn.channel()
        ch.queue_declare(queue="alive")
        ch.basic_publish(exchange="", routing_key="alive", body=b"ok")
        _, _, body = ch.basic_get("alive", auto_ack=True)
        assert body == b"ok"


def test_bad_protocol_header_gets_our_header_back(broker: BrokerThread) -> None:
    with socket.create_connection((broker.host, broker.port), timeout=5) as s:
        s.sendall(b"AMQP\x01\x01\x00\x0a")  # AMQP 0-10
        data = b""
        while True:
            chunk = s.recv(100)
            if not chunk:
                break
            data += chunk
        assert data == b"AMQP\x00\x00\x09\x01"
    _still_serves(broker)


def test_http_request_on_amqp_port_is_dropped(broker: BrokerThread) -> None:
    with socket.create_connection((broker.host, broker.port), timeout=5) as s:
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        data = b""
        while True:
            chunk = s.recv(100)
            if not chunk:
                break
            data += chunk
        assert data == b"AMQP\x00\x00\x09\x01"
    _still_serves(broker)


@pytest.mark.parametrize(
    ("payload", "code"),
    [
        # bad frame end octet
        (_frame(1, 0, struct.pack(">HH", 20, 10) + b"\x00", end=b"\x00"), 501),
        # frame larger than the negotiated frame_max
        (struct.pack(">BHI", 1, 1, 10_000_000) + b"\x00" * 64, 501),
        # unknown frame type
        (_frame(9, 0, b"abc"), 501),
        # unknown class / method
        (_frame(1, 1, struct.pack(">HH", 99, 1)), 540),
        # content header without a method
        (_frame(2, 1, struct.pack(">HHQH", 60, 0, 0, 0)), 505),
        # truncated method arguments (queue.declare without its fields)
        (_frame(1, 1, struct.pack(">HH", 50, 10)), 502),
    ],
    ids=["bad-frame-end", "oversized", "frame-type", "unknown-method", "header-first", "short"],
)
def test_malformed_frames_close_the_connection(
    broker: BrokerThread, payload: bytes, code: int
) -> None:
    with socket.create_connection((broker.host, broker.port), timeout=5) as s:
        _handshake(s)
        if code in {540, 505, 502}:
            # open channel 1 first, so the error is about the frame, not the channel
            s.sendall(_frame(1, 1, struct.pack(">HH", 20, 10) + _shortstr("")))
            assert _recv_frame(s)[2][:4] == struct.pack(">HH", 20, 11)
        s.sendall(payload)
        got = _close_code(_read_frames(s))
        assert got == code or (code == 502 and got == 501)
    _still_serves(broker)


def test_garbage_after_handshake(broker: BrokerThread) -> None:
    with socket.create_connection((broker.host, broker.port), timeout=5) as s:
        _handshake(s)
        s.sendall(bytes(range(256)) * 4)
        assert _close_code(_read_frames(s)) in {501, 505}
    _still_serves(broker)


def test_channel_number_above_channel_max_opens(broker: BrokerThread) -> None:
    # channel_max limits how many channels are open, not their numbers (as RabbitMQ)
    with socket.create_connection((broker.host, broker.port), timeout=5) as s:
        _handshake(s)
        s.sendall(_frame(1, 4000, struct.pack(">HH", 20, 10) + _shortstr("")))
        ftype, channel, payload = _recv_frame(s)
        assert (ftype, channel, payload[:4]) == (1, 4000, struct.pack(">HH", 20, 11))
    _still_serves(broker)


def test_abrupt_disconnect_requeues(broker: BrokerThread) -> None:
    with connect(broker) as conn:
        ch = conn.channel()
        ch.queue_declare(queue="abrupt")
        ch.basic_publish(exchange="", routing_key="abrupt", body=b"m")
    with socket.create_connection((broker.host, broker.port), timeout=5) as s:
        _handshake(s)
        s.sendall(_frame(1, 1, struct.pack(">HH", 20, 10) + _shortstr("")))
        _recv_frame(s)
        get = struct.pack(">HHH", 60, 70, 0) + _shortstr("abrupt") + b"\x00"
        s.sendall(_frame(1, 1, get))
        assert _recv_frame(s)[2][:4] == struct.pack(">HH", 60, 71)  # get-ok
    # the socket vanished with the message unacked: it is back, redelivered
    with connect(broker) as conn:
        ch = conn.channel()
        for _ in range(100):
            m, _, body = ch.basic_get("abrupt", auto_ack=True)
            if m is not None:
                break
            conn.sleep(0.02)
        assert m is not None
        assert m.redelivered is True
        assert body == b"m"


def _mutations(rng: random.Random, n: int) -> list[bytes]:
    """Valid frame streams with random corruption, plus plain noise."""
    channel_open = _frame(1, 1, struct.pack(">HH", 20, 10) + _shortstr(""))
    declare = _frame(
        1, 1, struct.pack(">HHH", 50, 10, 0) + _shortstr("fuzz") + b"\x00" + struct.pack(">I", 0)
    )
    publish = (
        _frame(1, 1, struct.pack(">HHH", 60, 40, 0) + _shortstr("") + _shortstr("fuzz") + b"\x00")
        + _frame(2, 1, struct.pack(">HHQH", 60, 0, 5, 0))
        + _frame(3, 1, b"hello")
    )
    base = channel_open + declare + publish
    out = []
    for _ in range(n):
        data = bytearray(base)
        match rng.randrange(4):
            case 0:  # flip bytes
                for _ in range(rng.randint(1, 8)):
                    data[rng.randrange(len(data))] = rng.randrange(256)
            case 1:  # truncate and append noise
                del data[rng.randrange(len(data)) :]
                data += rng.randbytes(rng.randint(0, 64))
            case 2:  # duplicate a slice
                i = rng.randrange(len(data))
                data[i:i] = data[i : i + rng.randint(1, 40)]
            case _:
                data = bytearray(rng.randbytes(rng.randint(1, 300)))
        out.append(bytes(data))
    return out


def test_fuzzed_frame_streams_never_hurt_the_broker(
    broker: BrokerThread, caplog: pytest.LogCaptureFixture
) -> None:
    rng = random.Random(4242)
    for payload in _mutations(rng, 40):
        with socket.create_connection((broker.host, broker.port), timeout=5) as s:
            _handshake(s)
            s.sendall(payload)
            s.shutdown(socket.SHUT_WR)  # EOF: the server must close, whatever it parsed
            s.settimeout(5)
            while True:
                try:
                    chunk = s.recv(65536)
                except ConnectionResetError:
                    break
                if not chunk:
                    break
    _still_serves(broker)
    bugs = [r for r in caplog.records if r.name.startswith("ringmq") and r.levelno >= 40]
    assert bugs == [], [r.getMessage() for r in bugs]


def test_commands_pipelined_after_a_channel_error_are_ignored(broker: BrokerThread) -> None:
    with socket.create_connection((broker.host, broker.port), timeout=5) as s:
        _handshake(s)
        s.sendall(_frame(1, 1, struct.pack(">HH", 20, 10) + _shortstr("")))
        _recv_frame(s)  # open-ok
        passive_missing = struct.pack(">HHH", 50, 10, 0) + _shortstr("absent") + b"\x01"
        declare_after = struct.pack(">HHH", 50, 10, 0) + _shortstr("after-error") + b"\x00"
        # one write: the passive declare fails (404), the declare behind it must not run
        s.sendall(
            _frame(1, 1, passive_missing + struct.pack(">I", 0))
            + _frame(1, 1, declare_after + struct.pack(">I", 0))
        )
        _ftype, _ch, payload = _recv_frame(s)
        assert payload[:4] == struct.pack(">HH", 20, 40)  # channel.close
        assert struct.unpack(">H", payload[4:6])[0] == 404
    with connect(broker) as conn:
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as exc:
            conn.channel().queue_declare("after-error", passive=True)
        assert exc.value.reply_code == 404


def test_publish_pipelined_with_channel_close_is_not_lost(broker: BrokerThread) -> None:
    with connect(broker) as conn:
        conn.channel().queue_declare("pipelined")
    with socket.create_connection((broker.host, broker.port), timeout=5) as s:
        _handshake(s)
        s.sendall(_frame(1, 1, struct.pack(">HH", 20, 10) + _shortstr("")))
        _recv_frame(s)  # open-ok
        publish = (
            _frame(
                1,
                1,
                struct.pack(">HHH", 60, 40, 0) + _shortstr("") + _shortstr("pipelined") + b"\x00",
            )
            + _frame(2, 1, struct.pack(">HHQH", 60, 0, 2, 0))
            + _frame(3, 1, b"ok")
        )
        close = _frame(1, 1, struct.pack(">HHH", 20, 40, 200) + _shortstr("bye") + b"\x00" * 4)
        s.sendall(publish + close)  # one read batch: the publish comes before the close
        assert _recv_frame(s)[2][:4] == struct.pack(">HH", 20, 41)  # close-ok
    with connect(broker) as conn:
        assert conn.channel().basic_get("pipelined", auto_ack=True)[2] == b"ok"
