"""The app served by the real server: management calls reach AMQP clients (pika)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from urllib.parse import quote

import httpx
import pika
import pika.exceptions
import pytest

from ringmq.node import BrokerThread
from ringmq.server.runtime import ServerOptions

pytestmark = pytest.mark.integration


@pytest.fixture
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerThread, httpx.Client]]:
    b = BrokerThread(
        ServerOptions(
            host="127.0.0.1", amqp_port=0, http_port=0, data_dir=tmp_path_factory.mktemp("live")
        )
    )
    b.start()
    url = f"http://127.0.0.1:{b.server.http_port}/api"
    with httpx.Client(base_url=url, auth=("guest", "guest"), verify=False, timeout=10) as api:
        yield b, api
    b.stop()


def _pump(conn: pika.BlockingConnection, until: object, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not until() and time.monotonic() < deadline:  # type: ignore[operator]
        conn.process_data_events(time_limit=0.05)


def test_management_publish_and_purge_reach_a_pika_consumer(
    live: tuple[BrokerThread, httpx.Client],
) -> None:
    b, api = live
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", b.port))
    try:
        ch = conn.channel()
        ch.queue_declare("live", arguments={"x-ring-size": 3})
        ch.basic_qos(prefetch_count=10)
        got: list[bytes] = []
        ch.basic_consume("live", lambda _c, _m, _p, body: got.append(body))
        for i in range(4):
            r = api.post(
                "/exchanges/%2F/amq.default/publish",
                json={"routing_key": "live", "payload": f"m{i}"},
            )
            assert r.json() == {"routed": True}
        _pump(conn, lambda: len(got) == 4)
        assert got == [b"m0", b"m1", b"m2", b"m3"]
        q = api.get("/queues/%2F/live").json()
        assert (q["messages"], q["messages_unacknowledged"], q["consumers"]) == (4, 4, 1)
        conns = api.get("/connections").json()
        assert len(conns) == 1
        assert conns[0]["channels"] == 1
        assert api.get("/channels").json()[0]["messages_unacknowledged"] == 4
        metrics = httpx.get(f"http://127.0.0.1:{b.server.http_port}/metrics/per-object").text
        assert 'rabbitmq_queue_messages_unacked{vhost="/",queue="live"} 4' in metrics
        assert "rabbitmq_connections 1" in metrics
    finally:
        conn.close()


def test_closing_a_connection_from_the_api(live: tuple[BrokerThread, httpx.Client]) -> None:
    b, api = live
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", b.port))
    name = api.get("/connections").json()[0]["name"]
    r = api.delete(f"/connections/{quote(name, safe='')}", headers={"X-Reason": "bye"})
    assert r.status_code == 204

    def close_code() -> int:
        try:
            _pump(conn, lambda: False, timeout_s=5)
            conn.channel()
        except pika.exceptions.ConnectionClosedByBroker as exc:
            return int(exc.reply_code)
        return 0

    assert close_code() == 320
    deadline = time.monotonic() + 5
    while api.get("/connections").json() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert api.get("/connections").json() == []
