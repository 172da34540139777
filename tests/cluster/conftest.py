"""etcd members and ringmq cluster nodes for the cluster tests (`@pytest.mark.cluster`).

`etcd_cluster(n)` starts n etcd members (Debian's `etcd-server`: `.ci/run` installs it) on free
loopback ports, each with its own data directory under tmp_path, and stops them; the tests skip,
with the reason, when no etcd binary is found. `start_node` runs `ringmq serve` with the cluster
options as a subprocess (tests/serve.py), so that a test can SIGKILL it.

Every test here kills, stops or cuts off nodes that pika, proton and rstream clients are
connected to, and those clients leave the sockets the fault broke to the garbage collector,
which may warn in whichever later test it runs: the ResourceWarnings of tests/cluster are
ignored for all of them in one place (`pytest_collection_modifyitems`), and each test's
teardown collects its garbage while they are, so that none reaches a test outside.
"""

from __future__ import annotations

import gc
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.cluster.netns import Network
from tests.ports import free_ports
from tests.serve import _HTTP, Serve

ETCD = os.environ.get("RINGMQ_ETCD") or shutil.which("etcd") or "/usr/bin/etcd"
LEASE_TTL_S = 2


_HERE = Path(__file__).parent
_FAULT_CLIENT_WARNINGS = (
    "ignore::ResourceWarning",
    "ignore::pytest.PytestUnraisableExceptionWarning",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if _HERE in item.path.parents:
            for spec in _FAULT_CLIENT_WARNINGS:
                item.add_marker(pytest.mark.filterwarnings(spec))


@pytest.fixture(autouse=True)
def _collect_fault_clients() -> Iterator[None]:
    yield
    gc.collect()


def etcd_binary() -> str:
    if not (os.path.isfile(ETCD) and os.access(ETCD, os.X_OK)):
        pytest.skip("no etcd binary (Debian's etcd-server; .ci/run installs it)")
    return ETCD


class EtcdMember:
    def __init__(
        self, name: str, client: int, peer: int, data: Path, host: str = "127.0.0.1"
    ) -> None:
        self.host = host
        self.name = name
        self.client = client
        self.peer = peer
        self.data = data
        self.proc: subprocess.Popen[bytes] | None = None
        self._args: tuple[str, str, Path] | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.client}"

    def start(self, binary: str, initial_cluster: str, log: Path) -> None:
        self._args = (binary, initial_cluster, log)
        with log.open("ab") as out:
            self.proc = subprocess.Popen(
                [
                    binary,
                    "--name",
                    self.name,
                    "--data-dir",
                    str(self.data),
                    "--listen-client-urls",
                    self.url,
                    "--advertise-client-urls",
                    self.url,
                    "--listen-peer-urls",
                    f"http://{self.host}:{self.peer}",
                    "--initial-advertise-peer-urls",
                    f"http://{self.host}:{self.peer}",
                    "--initial-cluster",
                    initial_cluster,
                    "--initial-cluster-state",
                    "new",
                    "--initial-cluster-token",
                    f"ringmq-test-{os.getpid()}",
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=30)

    def restart(self) -> None:
        """Start again on the same data directory (it rejoins its cluster)."""
        assert self._args is not None
        self.start(*self._args)


class EtcdCluster:
    """n etcd members on loopback (see the module docstring)."""

    def __init__(self, n: int, root: Path, host: str = "127.0.0.1") -> None:
        binary = etcd_binary()
        ports = free_ports(2 * n)
        self.members = [
            EtcdMember(f"e{i}", ports[2 * i], ports[2 * i + 1], root / f"etcd-e{i}", host)
            for i in range(n)
        ]
        initial = ",".join(f"{m.name}=http://{host}:{m.peer}" for m in self.members)
        for m in self.members:
            m.start(binary, initial, root / f"etcd-{m.name}.log")
        self.wait_healthy()

    @property
    def endpoints(self) -> str:
        return ",".join(m.url for m in self.members)

    def wait_healthy(self, timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                if all(
                    httpx.get(f"{m.url}/health", timeout=1).json().get("health") == "true"
                    for m in self.members
                ):
                    return
            except (httpx.HTTPError, ValueError):
                pass
            time.sleep(0.1)
        raise AssertionError("etcd did not become healthy")

    def leader(self) -> EtcdMember:
        """The member etcd's own Raft has as leader now."""
        for m in self.members:
            status = httpx.post(f"{m.url}/v3/maintenance/status", json={}, timeout=2).json()
            if status["leader"] == status["header"]["member_id"]:
                return m
        raise AssertionError("etcd has no leader")

    def stop(self) -> None:
        for m in self.members:
            m.kill()
            # etcd preallocates its WAL in 64 MB files (about 120 MB a member) and pytest keeps
            # the last runs' directories: the data goes, the member's log (beside it) stays
            shutil.rmtree(m.data, ignore_errors=True)


@pytest.fixture
def etcd_cluster(tmp_path: Path) -> Iterator[Callable[..., EtcdCluster]]:
    started: list[EtcdCluster] = []

    def start(n: int, host: str = "127.0.0.1") -> EtcdCluster:
        c = EtcdCluster(n, tmp_path, host)
        started.append(c)
        return c

    yield start
    for c in started:
        c.stop()


class Node(Serve):
    """One clustered `ringmq serve` and its management API.

    `protocols=True` opens STOMP and MQTT too, on fixed ports, `stream=True` the stream
    protocol (`stream_port`, fixed too); `web=True` the stream protocol's port and the WebSocket
    ports (Web STOMP, Web MQTT, Web AMQP); `host` and `wrap` put the node
    on another address (a network namespace: `wrap=("ip", "netns", "exec", NS)`). `spec` keeps
    what started it, so that `start_node(**node.spec)` restarts it on the same ports and data.
    """

    def __init__(
        self,
        name: str,
        etcd: str,
        root: Path,
        *,
        ttl_s: int = LEASE_TTL_S,
        ports: tuple[int, int, int] | None = None,
        extra_config: str = "",
        protocols: bool = False,
        protocol_ports: tuple[int, int] | None = None,
        stream: bool = False,
        stream_port: int | None = None,
        host: str = "127.0.0.1",
        wrap: tuple[str, ...] = (),
        web: bool = False,
        web_ports: tuple[int, int, int, int] | None = None,
    ) -> None:
        self.name = name
        self.etcd = etcd
        self.host = host
        self.hook_log = root / f"{name}.roles"
        # the on_role_change hook appends "<role> <epoch> <leader>" to hook_log
        hook = f"/bin/sh -c 'echo $0 $1 $2 >> {self.hook_log}'"
        config = root / f"{name}.toml"
        # guest may log in from loopback only: a node on another address gets a user of its own
        self.user = self.password = "guest" if host == "127.0.0.1" else "faults"
        users = (
            ""
            if self.user == "guest"
            else '\n[[users]]\nname = "faults"\npassword = "faults"\ntags = ["administrator"]\n'
            '\n[[permissions]]\nuser = "faults"\n'
        )
        config.write_text(
            f'[cluster]\nlease_ttl_s = {ttl_s}\nname = "test"\non_role_change = "{hook}"\n'
            + extra_config
            + users
        )
        # fixed ports: a node restarts its server at each role change (tests read the
        # management port's line and know the others)
        amqp, http, cluster = ports or free_ports(3)
        self.ports = (amqp, http, cluster)
        more: tuple[str, ...] = ()
        stomp_port = mqtt_port = None
        if protocols:
            stomp_port, mqtt_port = protocol_ports or free_ports(2)
            more = ("--stomp-port", str(stomp_port), "--mqtt-port", str(mqtt_port))
        stream_p: int | None = None
        if stream:
            stream_p = stream_port or free_ports(1)[0]
            more += ("--stream-port", str(stream_p))
        web_stomp: int | None = None
        web_mqtt: int | None = None
        web_amqp: int | None = None
        if web:
            ws, web_stomp, web_mqtt, web_amqp = web_ports or free_ports(4)
            if stream_p is None:
                stream_p = ws
                more += ("--stream-port", str(stream_p))
            more += (
                *("--web-stomp-port", str(web_stomp)),
                *("--web-mqtt-port", str(web_mqtt), "--web-amqp-port", str(web_amqp)),
            )
        self.spec: dict[str, Any] = {
            "name": name,
            "etcd": etcd,
            "ttl_s": ttl_s,
            "ports": self.ports,
            "extra_config": extra_config,
            "protocols": protocols,
            "protocol_ports": (stomp_port, mqtt_port) if protocols else None,
            "stream": stream,
            "stream_port": stream_p if stream else None,
            "host": host,
            "wrap": wrap,
            "web": web,
            "web_ports": (stream_p, web_stomp, web_mqtt, web_amqp) if web else None,
        }
        super().__init__(
            root / name,
            root / f"{name}.log",
            http=True,
            amqp_port=amqp,
            http_port=http,
            wait=_HTTP,
            wrap=wrap,
            extra=(
                "--config",
                str(config),
                "--cluster-etcd",
                etcd,
                "--node-name",
                name,
                "--cluster-port",
                str(cluster),
                "--host",
                host,
                *more,
            ),
        )
        self.port, self.http_port = amqp, http
        self.stomp_port, self.mqtt_port = stomp_port, mqtt_port
        self.stream_port = stream_p
        self.web_stomp_port, self.web_mqtt_port, self.web_amqp_port = web_stomp, web_mqtt, web_amqp

    def cluster(self) -> dict[str, Any]:
        # A node changing roles restarts its server (ringmq.server.member): its management
        # port is closed for that moment. Ask again, a bounded number of times.
        url = f"http://{self.host}:{self.http_port}/api/cluster"
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline:
            try:
                r = httpx.get(url, auth=(self.user, self.password), timeout=2)
            except httpx.ConnectError:
                # refused while it restarts; "no route" (a cut node) takes seconds: bounded
                if not self.running():
                    raise
                time.sleep(0.1)
                continue
            r.raise_for_status()
            body: dict[str, Any] = r.json()
            return body
        raise AssertionError(f"{self.name}: management port closed for 5 s")

    def running(self) -> bool:
        return self.proc.poll() is None


@pytest.fixture
def start_node(tmp_path: Path) -> Iterator[Callable[..., Node]]:
    nodes: list[Node] = []

    def start(name: str, etcd: str, **kw: Any) -> Node:
        node = Node(name, etcd, tmp_path, **kw)
        nodes.append(node)
        return node

    yield start
    for n in nodes:
        n.kill()


@pytest.fixture
def network() -> Iterator[Network]:
    """Network namespaces for the nodes (tests/cluster/netns.py); skips unless root. List it
    before `start_node` so that it is torn down after the nodes are killed."""
    net = Network()
    try:
        yield net
    finally:
        net.close()
