"""Celery over ringmq: a task round trip with a result-less configuration (slow, optional)."""

from __future__ import annotations

import threading

import pytest

from ringmq.node import BrokerThread

pytestmark = [pytest.mark.integration, pytest.mark.slow]

celery = pytest.importorskip("celery")
worker_testing = pytest.importorskip("celery.contrib.testing.worker")


def test_celery_task_round_trip(broker: BrokerThread) -> None:
    app = celery.Celery(
        "ringmq_smoke", broker=f"pyamqp://guest:guest@{broker.host}:{broker.port}//"
    )
    app.conf.update(
        task_ignore_result=True,
        result_backend=None,
        broker_connection_retry_on_startup=False,
        worker_hijack_root_logger=False,
        task_acks_late=True,
        worker_prefetch_multiplier=1,
        # the solo worker's drain loop waits a heartbeat tick before it notices shutdown
        broker_heartbeat=0,
    )
    done = threading.Event()
    seen: list[int] = []

    @app.task(name="smoke.add")
    def add(x: int, y: int) -> None:
        seen.append(x + y)
        if len(seen) == 3:
            done.set()

    with worker_testing.start_worker(
        app, pool="solo", perform_ping_check=False, shutdown_timeout=10
    ):
        for i in range(3):
            add.delay(i, 10)
        assert done.wait(30)
    assert sorted(seen) == [10, 11, 12]
