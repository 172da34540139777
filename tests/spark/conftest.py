"""Spark tests: one SparkSession and one broker per module, queues named per test.

Marked `spark` (needs pyspark, pyarrow and Java 17); run with `pytest -m spark tests/spark`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from ringmq.connector.client import StreamClient
from ringmq.connector.publisher import Publisher
from ringmq.node import BrokerThread
from ringmq.server.configfile import FileConfig
from ringmq.server.runtime import ServerOptions
from tests.ports import free_port


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


class SparkCluster:
    """A Spark standalone master and workers on 127.0.0.1, from pyspark's own jars.

    Each daemon is a `spark-class` JVM in its own process group with its own port and work
    dir (executors are children of their worker); `stop()` ends them. Sized for a small
    machine: one core and 1 GiB per worker (executors of 512 MiB in `conf()`; Spark's
    default 1 GiB executors of the example pipeline fit too).
    """

    def __init__(self, root: Path, workers: int = 2) -> None:
        import pyspark

        self.root = root
        self.home = Path(pyspark.__file__).parent
        self.env = {
            **python_env(),
            "SPARK_HOME": str(self.home),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_NO_DAEMONIZE": "1",
            "SPARK_LOG_DIR": str(root / "logs"),
        }
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.port = free_port()
        self.url = f"spark://127.0.0.1:{self.port}"
        self._start("master", "org.apache.spark.deploy.master.Master", "--port", str(self.port))
        self._wait_log("master", "Starting Spark master", 120)
        for i in range(workers):
            self.start_worker(f"worker{i}")

    def _start(self, name: str, cls: str, *args: str) -> None:
        log = (self.root / f"{name}.log").open("wb")
        cmd = [str(self.home / "bin" / "spark-class"), cls, "--host", "127.0.0.1"]
        cmd += ["--webui-port", "0", *args]
        self.procs[name] = subprocess.Popen(
            cmd, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        log.close()

    def _wait_log(self, name: str, text: str, timeout: float, count: int = 1) -> None:
        path = self.root / f"{name}.log"
        wait_until(lambda: path.read_text(errors="replace").count(text) >= count, timeout, 0.2)

    def start_worker(self, name: str) -> None:
        """Start (or restart) worker `name` and wait until the master registered it."""
        if name in self.procs:
            return  # still running
        work = self.root / name
        work.mkdir(exist_ok=True)
        before = (self.root / "master.log").read_text(errors="replace").count("Registering worker")
        self._start(
            name,
            "org.apache.spark.deploy.worker.Worker",
            *("--port", "0", "--cores", "1", "--memory", "1g", "--work-dir", str(work)),
            self.url,
        )
        self._wait_log("master", "Registering worker", 120, before + 1)

    def executor_pids(self) -> list[int]:
        """Executor JVMs (CoarseGrainedExecutorBackend) running under the workers."""
        out = subprocess.run(
            ["pgrep", "-f", "CoarseGrainedExecutorBackend"], capture_output=True, check=False
        )
        mine = {str(p.pid) for p in self.procs.values()}
        pids = [int(x) for x in out.stdout.split()]
        return [p for p in pids if _parent_chain_has(p, mine)]

    def kill(self, name: str) -> None:
        """SIGKILL daemon `name` and everything in its process group (its executors)."""
        p = self.procs.pop(name)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)
        p.wait(30)

    def stop(self) -> None:
        for name in [n for n in self.procs if n != "master"] + ["master"]:
            p = self.procs.pop(name, None)
            if p is None:
                continue
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGTERM)
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(30)

    def conf(self) -> dict[str, str]:
        """Session settings for this cluster (small executors, driver on loopback)."""
        return {
            "spark.executor.memory": "512m",
            "spark.executor.cores": "1",
            "spark.cores.max": "2",
            "spark.task.maxFailures": "4",
        }


def _parent_chain_has(pid: int, ancestors: set[str]) -> bool:
    for _ in range(10):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return False
        ppid = stat.rsplit(")", 1)[1].split()[1]
        if ppid in ancestors:
            return True
        if ppid in ("0", "1"):
            return False
        pid = int(ppid)
    return False


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkCluster]:
    """A standalone master and two workers for the whole session (stopped at the end)."""
    cluster = SparkCluster(tmp_path_factory.mktemp("spark-cluster"))
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def cspark(spark_cluster: SparkCluster) -> Iterator[Any]:
    """A SparkSession on the standalone cluster (one application at a time holds its cores)."""
    from ringmq.connector.spark import session

    s = session("ringmq-cluster-tests", spark_cluster.url, **spark_cluster.conf())
    yield s
    s.stop()
