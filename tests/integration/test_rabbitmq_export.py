"""A definitions export taken from a real RabbitMQ imports into ringmq whole (issue 28, item 6).

The test starts Debian's rabbitmq-server (3.10.8 here) as its own node on free loopback ports
with a throw-away data directory (management, federation and shovel plugins on), sets it up as
an installation would be (vhosts, users with passwords and limits, permissions, exchanges of
several types with arguments, queues with arguments, quorum included, bindings with routing
keys and header arguments, a policy, federation and shovel parameters, vhost limits) through
its HTTP API, exports, imports the export into ringmq, and checks what ringmq has: the users
log in with the passwords set in RabbitMQ, a message routes through the imported bindings, the
limits hold, and the parameters ringmq does not act on are kept and shown. Skipped with the
reason when rabbitmq-server is not installed (tools/test_deps.sh installs it for CI).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pika
import pytest

from ringmq.node import BrokerThread
from tests.integration.conftest import BrokerFactory
from tests.ports import free_port

SERVER = Path("/usr/lib/rabbitmq/bin/rabbitmq-server")  # the script itself: runs as this user
EPMD = shutil.which("epmd")

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,  # RabbitMQ takes 15-30 s to start
    pytest.mark.skipif(
        not SERVER.exists() or EPMD is None,
        reason="rabbitmq-server is not installed (Debian's package; tools/test_deps.sh)",
    ),
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
    pytest.mark.timeout(300),
]


@pytest.fixture(scope="module")
def rabbitmq() -> Iterator[str]:
    """A RabbitMQ node of its own; yields its management URL."""
    base = Path(tempfile.mkdtemp(prefix="ringmq-defs-rabbit-"))
    amqp, http, dist, epmd_port = free_port(), free_port(), free_port(), free_port()
    (base / "enabled_plugins").write_text(
        "[rabbitmq_management,rabbitmq_federation,rabbitmq_shovel].\n"
    )
    (base / "rabbitmq.conf").write_text(
        f"listeners.tcp.default = 127.0.0.1:{amqp}\n"
        f"management.tcp.port = {http}\nmanagement.tcp.ip = 127.0.0.1\n"
    )
    env = os.environ | {
        "HOME": str(base),  # its own Erlang cookie
        "RABBITMQ_NODENAME": f"ringmq-test-{os.getpid()}@localhost",
        "RABBITMQ_BASE": str(base),
        "RABBITMQ_MNESIA_BASE": str(base / "mnesia"),
        "RABBITMQ_LOG_BASE": str(base / "log"),
        "RABBITMQ_ENABLED_PLUGINS_FILE": str(base / "enabled_plugins"),
        "RABBITMQ_CONFIG_FILE": str(base / "rabbitmq"),
        "RABBITMQ_DIST_PORT": str(dist),
        "RABBITMQ_PID_FILE": str(base / "pid"),
        "RABBITMQ_FEATURE_FLAGS_FILE": str(base / "feature_flags"),
        "RABBITMQ_PLUGINS_EXPAND_DIR": str(base / "plugins-expand"),
        "ERL_EPMD_ADDRESS": "127.0.0.1",
        "ERL_EPMD_PORT": str(epmd_port),  # an epmd of its own, ended with the node
    }
    log = (base / "server.log").open("wb")
    epmd = subprocess.Popen(
        ["epmd", "-port", str(epmd_port), "-address", "127.0.0.1"],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    proc = subprocess.Popen(
        [str(SERVER)], env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    url = f"http://127.0.0.1:{http}"
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                pytest.fail(f"rabbitmq-server exited: {(base / 'server.log').read_text()[-2000:]}")
            try:
                if httpx.get(url + "/api/overview", auth=("guest", "guest")).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        else:
            pytest.fail("rabbitmq-server did not answer on its management port in 120 s")
        yield url
    finally:
        # Only the node this fixture started: its own process group (the script and beam).
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        epmd.terminate()
        epmd.wait(timeout=10)
        log.close()
        shutil.rmtree(base, ignore_errors=True)


FEDERATION = {"uri": "amqp://upstream-host", "expires": 3600000}
SHOVEL = {"src-uri": "amqp://", "src-queue": "dead", "dest-uri": "amqp://far", "dest-queue": "a"}


def _set_up(url: str) -> None:
    # A representative installation, through RabbitMQ's own HTTP API.
    with httpx.Client(base_url=url, auth=("guest", "guest"), timeout=30) as h:
        calls: list[tuple[str, str, dict[str, Any]]] = [
            ("PUT", "/api/vhosts/prod", {}),
            ("PUT", "/api/users/app", {"password": "app-pw", "tags": "management"}),
            ("PUT", "/api/users/ops", {"password": "ops-pw", "tags": "administrator"}),
            (
                "PUT",
                "/api/permissions/prod/app",
                {"configure": "^app\\.", "write": ".*", "read": ".*"},
            ),
            ("PUT", "/api/permissions/prod/ops", {"configure": ".*", "write": ".*", "read": ".*"}),
            ("PUT", "/api/exchanges/prod/orders", {"type": "topic", "durable": True}),
            ("PUT", "/api/exchanges/prod/dlx", {"type": "fanout", "durable": True}),
            (
                "PUT",
                "/api/exchanges/prod/by-header",
                {"type": "headers", "durable": True, "arguments": {"alternate-exchange": "dlx"}},
            ),
            (
                "PUT",
                "/api/queues/prod/orders.eu",
                {
                    "durable": True,
                    "arguments": {
                        "x-max-length": 1000,
                        "x-overflow": "reject-publish",
                        "x-dead-letter-exchange": "dlx",
                        "x-message-ttl": 60000,
                    },
                },
            ),
            (
                "PUT",
                "/api/queues/prod/orders.us",
                {
                    "durable": True,
                    "arguments": {"x-max-priority": 5, "x-single-active-consumer": True},
                },
            ),
            ("PUT", "/api/queues/prod/dead", {"durable": True, "arguments": {}}),
            (
                "PUT",
                "/api/queues/prod/work",
                {"durable": True, "arguments": {"x-queue-type": "quorum", "x-delivery-limit": 5}},
            ),
            ("POST", "/api/bindings/prod/e/orders/q/orders.eu", {"routing_key": "eu.#"}),
            ("POST", "/api/bindings/prod/e/orders/q/orders.us", {"routing_key": "us.*"}),
            ("POST", "/api/bindings/prod/e/dlx/q/dead", {"routing_key": ""}),
            (
                "POST",
                "/api/bindings/prod/e/by-header/q/dead",
                {"routing_key": "", "arguments": {"x-match": "any", "kind": "x"}},
            ),
            (
                "PUT",
                "/api/policies/prod/cap",
                {
                    "pattern": "^orders\\.",
                    "definition": {"max-length-bytes": 1048576},
                    "apply-to": "queues",
                    "priority": 1,
                },
            ),
            ("PUT", "/api/parameters/federation-upstream/prod/up", {"value": FEDERATION}),
            ("PUT", "/api/parameters/shovel/prod/move", {"value": SHOVEL}),
            ("PUT", "/api/vhost-limits/prod/max-queues", {"value": 50}),
            ("PUT", "/api/user-limits/app/max-connections", {"value": 10}),
        ]
        for method, path, body in calls:
            r = h.request(method, path, json=body)
            assert r.status_code in (201, 204), (path, r.status_code, r.text)


@pytest.fixture(scope="module")
def export(rabbitmq: str) -> dict[str, Any]:
    _set_up(rabbitmq)
    doc: dict[str, Any] = httpx.get(
        rabbitmq + "/api/definitions", auth=("guest", "guest"), timeout=30
    ).json()
    assert doc["rabbitmq_version"].startswith("3.")
    return doc


@pytest.fixture
def ringmq(broker_factory: BrokerFactory) -> BrokerThread:
    return broker_factory(http_port=0)


def test_a_rabbitmq_export_imports_whole(export: dict[str, Any], ringmq: BrokerThread) -> None:
    base = f"http://127.0.0.1:{ringmq.server.http_port}"
    with httpx.Client(base_url=base, auth=("guest", "guest"), timeout=30) as h:
        r = h.post("/api/definitions", json=export)
        assert r.status_code == 204, r.text
        mine = h.get("/api/definitions").json()

        def names(section: str, vhost: str = "prod") -> set[str]:
            return {x["name"] for x in mine[section] if x.get("vhost", vhost) == vhost}

        assert {"/", "prod"} <= {v["name"] for v in mine["vhosts"]}
        assert {"app", "ops", "guest"} <= {u["name"] for u in mine["users"]}
        assert {"orders", "dlx", "by-header"} <= names("exchanges")
        assert names("queues") == {"orders.eu", "orders.us", "dead", "work"}
        queues = {q["name"]: q for q in mine["queues"] if q["vhost"] == "prod"}
        for q in export["queues"]:
            assert queues[q["name"]]["arguments"] == q["arguments"]
        assert {(b["source"], b["destination"], b["routing_key"]) for b in mine["bindings"]} >= {
            ("orders", "orders.eu", "eu.#"),
            ("orders", "orders.us", "us.*"),
            ("dlx", "dead", ""),
            ("by-header", "dead", ""),
        }
        assert [p["name"] for p in mine["policies"]] == ["cap"]
        params = {(p["component"], p["name"]): p for p in h.get("/api/parameters").json()}
        assert params["federation-upstream", "up"]["value"] == FEDERATION
        assert params["federation-upstream", "up"]["acted_on"] is False
        assert params["shovel", "move"]["value"] == SHOVEL
        assert params["vhost-limits", "limits"]["acted_on"] is True
        assert h.get("/api/vhost-limits/prod").json() == [
            {"vhost": "prod", "value": {"max-queues": 50}}
        ]
        assert h.get("/api/user-limits/app").json() == [
            {"user": "app", "value": {"max-connections": 10}}
        ]
        globals_ = [g["name"] for g in h.get("/api/global-parameters").json()]
        assert "internal_cluster_id" in globals_
        work = h.get("/api/queues/prod/work").json()
        assert work["type"] == "quorum"
    # the password set in RabbitMQ logs in to ringmq, and the imported topology routes
    creds = pika.PlainCredentials("app", "app-pw")
    params = pika.ConnectionParameters(ringmq.host, ringmq.port, "prod", creds)
    with pika.BlockingConnection(params) as conn:
        ch = conn.channel()
        ch.confirm_delivery()
        ch.basic_publish("orders", "eu.paris", b"order-1")
        got = ch.basic_get("orders.eu", auto_ack=True)
        assert got[2] == b"order-1"
