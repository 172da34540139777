"""Spark tests: one SparkSession and one broker per module, queues named per test.

Marked `spark` (needs pyspark, pyarrow and Java 17); run with `pytest -m spark tests/spark`.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from ringmq.connector.client import Publisher, StreamClient
from ringmq.server.configfile import FileConfig
from ringmq.server.runtime import BrokerThread, ServerOptions


class Env:
    """A running broker plus helpers (declare, publish, inspect)."""

    def __init__(self, broker: BrokerThread) -> None:
        self.broker = broker
        self.amqp = f"amqp://guest:guest@127.0.0.1:{broker.port}/%2F"
        self.http = f"http://guest:guest@127.0.0.1:{broker.server.http_port}"

    def declare(self, queue: str, **arguments: Any) -> None:
        import pika

        conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", self.broker.port))
        conn.channel().queue_declare(queue, arguments=arguments or None)
        conn.close()

    def publish(self, queue: str, bodies: list[bytes]) -> None:
        with Publisher(self.amqp) as pub:
            pub.publish_many(("", queue, b"\x00\x00", b) for b in bodies)

    def client(self) -> StreamClient:
        return StreamClient(self.http)

    def info(self, queue: str) -> dict[str, Any]:
        with self.client() as c:
            return c.info(queue)

    def bodies(self, queue: str) -> list[bytes]:
        with self.client() as c:
            return [r.body for r in c.browse_all(queue)]

    def call(self, fn: Callable[[Any], Any]) -> Any:
        return self.broker.call(lambda: fn(self.broker.broker))

    def options(self, **extra: str) -> dict[str, str]:
        return {"url": self.amqp, "httpUrl": self.http, **extra}


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    b = BrokerThread(
        ServerOptions(
            host="127.0.0.1",
            amqp_port=0,
            http_port=0,
            data_dir=tmp_path_factory.mktemp("broker"),
            config=FileConfig(),
        )
    )
    b.start()
    yield Env(b)
    b.stop()


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    from ringmq.connector.spark import session

    s = session("ringmq-tests", "local[2]", **{"spark.task.maxFailures": "3"})
    yield s
    s.stop()


def wait_until(pred: Callable[[], object], timeout: float = 60.0, interval: float = 0.05) -> None:
    """Poll `pred` until truthy; fail after `timeout` seconds (a bound, not a measurement)."""
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(interval)


def python_env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(Path(__file__).resolve().parents[2] / "src"), env.get("PYTHONPATH", "")]
    )
    return env
