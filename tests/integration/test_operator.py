"""Running the broker as an operator does: ports, the data directory's lock, start-up logs."""

from __future__ import annotations

import asyncio
import logging
import socket
from pathlib import Path

import pika
import pytest

from ringmq.node import BrokerThread, build_broker, server
from ringmq.server.configfile import ConfigError, parse_toml
from ringmq.server.datadir import DataDirInUseError
from ringmq.server.listener import PortInUseError
from ringmq.server.runtime import ServerOptions
from ringmq.server.setup import broker_config
from tests.integration.conftest import BrokerFactory, wait_until

pytestmark = pytest.mark.integration


def _snapshot(directory: Path) -> dict[str, tuple[int, int]]:
    return {
        str(p.relative_to(directory)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in sorted(directory.rglob("*"))
    }


def _start(options: ServerOptions) -> None:
    # the start-up a refused broker gets no further than (serve_forever's stop() included)
    asyncio.run(server(options).serve_forever())


def test_taken_amqp_port_names_the_option_and_writes_nothing(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        data = tmp_path / "fresh"
        with pytest.raises(PortInUseError) as exc:
            _start(ServerOptions(host="127.0.0.1", amqp_port=port, http_port=None, data_dir=data))
    cause = exc.value
    assert f"amqp port {port} on 127.0.0.1 is already in use" in str(cause)
    assert "--amqp-port" in str(cause)
    assert not data.exists()


def test_a_second_broker_on_a_data_directory_refuses_and_writes_nothing(
    broker_factory: BrokerFactory, tmp_path: Path
) -> None:
    data = tmp_path / "shared"
    first = broker_factory(data_dir=data)
    with pika.BlockingConnection(pika.ConnectionParameters(first.host, first.port)) as conn:
        ch = conn.channel()
        ch.confirm_delivery()
        ch.queue_declare("kept", durable=True)
        ch.basic_publish("", "kept", b"x", pika.BasicProperties(delivery_mode=2))
    before = _snapshot(data)
    with pytest.raises(DataDirInUseError) as exc:
        _start(ServerOptions(host="127.0.0.1", amqp_port=0, http_port=0, data_dir=data))
    cause = exc.value
    assert f"data directory {data} is in use by another ringmq broker" in str(cause)
    assert _snapshot(data) == before
    first.stop()
    # the lock goes with the broker: the same directory starts again, message and all
    third = broker_factory(data_dir=data)
    with pika.BlockingConnection(pika.ConnectionParameters(third.host, third.port)) as conn:
        _, _, body = conn.channel().basic_get("kept", auto_ack=True)
    assert body == b"x"


def test_config_file_ports_out_of_range_are_refused() -> None:
    with pytest.raises(ConfigError, match="amqp_port: must be <= 65535, got 99999"):
        parse_toml("[server]\namqp_port = 99999\n")
    with pytest.raises(ConfigError, match="http_port: must be <= 65535"):
        parse_toml("[server]\nhttp_port = 70000\n")


def test_connection_open_and_close_are_logged_at_info(
    broker: BrokerThread, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="ringmq.server.handlers")
    params = pika.ConnectionParameters(
        broker.host, broker.port, client_properties={"connection_name": "orders-worker"}
    )
    with pika.BlockingConnection(params) as conn:
        host, port = conn._impl._transport._sock.getsockname()[:2]
        local = f"{host}:{port}"

    def lines(kind: str) -> list[str]:
        return [
            r.getMessage()
            for r in caplog.records
            if r.levelno == logging.INFO and r.getMessage().startswith(f"connection {kind}:")
        ]

    wait_until(lambda: lines("closed"))
    for kind in ("opened", "closed"):
        (line,) = lines(kind)
        assert line.startswith(f"connection {kind}: {local} -> ")
        assert "user 'guest', vhost '/', name 'orders-worker'" in line


def test_the_core_records_the_peer_as_host_port_text(broker: BrokerThread) -> None:
    # core.session.Conn.peer is "peer address text (for listings)"; the server passed its
    # (host, port) tuple until the broker was typed
    with pika.BlockingConnection(pika.ConnectionParameters(broker.host, broker.port)) as conn:
        host, port = conn._impl._transport._sock.getsockname()[:2]
        peers = broker.call(lambda: [c.peer for c in broker.broker.conns.values()])
    assert peers == [f"{host}:{port}"]


def test_first_start_of_an_empty_directory_is_not_called_a_crash(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="ringmq.node")
    cfg = parse_toml("")
    broker = build_broker(broker_config(cfg), tmp_path, 0)
    first = [r.getMessage() for r in caplog.records]
    broker.close()
    caplog.clear()
    build_broker(broker_config(cfg), tmp_path, 0).close()
    again = [r.getMessage() for r in caplog.records]
    assert not any("crash" in m for m in first), first
    assert any("new data directory" in m for m in first), first
    assert any("after a clean stop" in m for m in again), again
