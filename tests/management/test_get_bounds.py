"""A management get is bounded, and a large one does not stop AMQP traffic while it runs."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import httpx
import pika
import pytest

from ringmq.management.queues import GET_SLICE, MAX_GET_COUNT
from ringmq.node import BrokerThread
from ringmq.server.runtime import ServerOptions

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerThread, httpx.Client]]:
    b = BrokerThread(
        ServerOptions(
            host="127.0.0.1", amqp_port=0, http_port=0, data_dir=tmp_path_factory.mktemp("get")
        )
    )
    b.start()
    url = f"http://127.0.0.1:{b.server.http_port}/api"
    with httpx.Client(base_url=url, auth=("guest", "guest"), timeout=60) as api:
        yield b, api
    b.stop()


def test_a_get_beyond_the_cap_is_a_bad_request(live: tuple[BrokerThread, httpx.Client]) -> None:
    _, api = live
    assert api.put("/queues/%2F/capped", json={}).status_code == 201
    for count in (MAX_GET_COUNT + 1, 100_000, 0):
        r = api.post("/queues/%2F/capped/get", json={"count": count})
        assert (r.status_code, r.json()["error"]) == (400, "bad_request"), count
    assert api.post("/queues/%2F/capped/get", json={"count": MAX_GET_COUNT}).json() == []


def test_a_get_near_the_cap_returns_everything_while_amqp_keeps_flowing(
    live: tuple[BrokerThread, httpx.Client],
) -> None:
    b, api = live
    n = MAX_GET_COUNT
    assert n > 10 * GET_SLICE
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", b.port, heartbeat=1))
    try:
        ch = conn.channel()
        ch.queue_declare("big", durable=False)
        for i in range(n):
            ch.basic_publish("", "big", f"m{i}".encode())
        assert ch.queue_declare("big", passive=True).method.message_count == n
        # Passive declares on the AMQP connection while the get runs: the ready count they see
        # falls slice by slice, so AMQP was served between slices (one blocking get would
        # show only n before and n after, once the messages are requeued). On a loaded
        # machine this test thread may not run at all while one get runs, so a get is tried
        # up to five times (each requeues everything); a get that never yields fails them all.
        result: list[httpx.Response] = []

        def get() -> None:
            result.append(api.post("/queues/%2F/big/get", json={"count": n}))

        between: list[int] = []
        for _ in range(5):
            getter = threading.Thread(target=get)
            getter.start()
            seen: list[int] = []
            while getter.is_alive():
                seen.append(ch.queue_declare("big", passive=True).method.message_count)
            getter.join()
            got = result[-1].json()
            assert [m["payload"] for m in got] == [f"m{i}" for i in range(n)]
            between = [m for m in seen if 0 < m < n]
            if between:
                break
        assert between, seen[:20]
        # the get requeued everything (ack_requeue_true) and the connection is still healthy
        assert ch.queue_declare("big", passive=True).method.message_count == n
        assert result[0].json()[0]["redelivered"] is False  # (a later get sees requeued ones)
    finally:
        conn.close()
