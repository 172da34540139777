"""Differential tests: the same client scenario against ringmq and a private RabbitMQ 3.10.8.

`rabbitmq` is one RabbitMQ node of our own for the whole session (Debian's `rabbitmq-server`,
started by `benchmarks.rabbitmq_cluster.RabbitCluster`: free loopback ports, its own epmd,
data directory and Erlang cookie, the management plugin on), skipped with the reason when the
package is missing (tools/test_deps.sh installs it for CI). `ringmq` is an in-process broker
for the session. Both are configured alike where a scenario needs it: a consumer timeout of
`CONSUMER_TIMEOUT_MS` (RabbitMQ's `consumer_timeout`, checked on every channel tick, whose
interval is shortened to match). A scenario is a function of a `Target` that returns what the
client saw (replies, reply codes and texts, which operations succeeded); a test runs it against
both and compares, saying so where they differ on purpose.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final
from urllib.parse import quote

import httpx
import pika
import pika.exceptions
import pytest
from benchmarks import rabbitmq_cluster

from ringmq.node import BrokerThread
from ringmq.server.configfile import parse_toml
from ringmq.server.options import ServerOptions

CONSUMER_TIMEOUT_MS: Final = 1_000
RABBITMQ_VERSION: Final = "3.10."
# RabbitMQ 3.10 checks consumer timeouts on the channel tick (60 s by default).
_ADVANCED: Final = (
    f"[{{rabbit, [{{consumer_timeout, {CONSUMER_TIMEOUT_MS}}}, {{channel_tick_interval, 100}}]}}]."
)
_RINGMQ_CONFIG: Final = f"[limits]\nconsumer_timeout_ms = {CONSUMER_TIMEOUT_MS}\n"
_START_TIMEOUT_S: Final = 120.0  # against hanging only


@dataclass(frozen=True)
class Target:
    """One broker under test: its AMQP port and management API (guest/guest on both)."""

    name: str
    port: int
    http: str

    def api(self, method: str, path: str, body: Any = None) -> httpx.Response:
        """A management API call; `path` starts with /api/."""
        return httpx.request(
            method, self.http + path, json=body, auth=("guest", "guest"), timeout=30
        )

    def connect(
        self, vhost: str = "/", user: str = "guest", password: str = "guest"
    ) -> pika.BlockingConnection:
        params = pika.ConnectionParameters(
            "127.0.0.1",
            self.port,
            vhost,
            pika.PlainCredentials(user, password),
            connection_attempts=1,
            socket_timeout=10,
            blocked_connection_timeout=30,
        )
        return pika.BlockingConnection(params)

    def vhost(self, name: str) -> None:
        """Create vhost `name` (anew) with every permission for guest."""
        self.api("DELETE", f"/api/vhosts/{quote(name, safe='')}")
        for method, path, body in (
            ("PUT", f"/api/vhosts/{quote(name, safe='')}", {}),
            (
                "PUT",
                f"/api/permissions/{quote(name, safe='')}/guest",
                {"configure": ".*", "write": ".*", "read": ".*"},
            ),
        ):
            r = self.api(method, path, body)
            assert r.status_code in (201, 204), (self.name, path, r.status_code, r.text)

    def user(self, name: str, password: str, vhost: str = "/") -> None:
        """Create user `name` (anew) with every permission on `vhost`."""
        self.api("DELETE", f"/api/users/{name}")
        for method, path, body in (
            ("PUT", f"/api/users/{name}", {"password": password, "tags": ""}),
            (
                "PUT",
                f"/api/permissions/{quote(vhost, safe='')}/{name}",
                {"configure": ".*", "write": ".*", "read": ".*"},
            ),
        ):
            r = self.api(method, path, body)
            assert r.status_code in (201, 204), (self.name, path, r.status_code, r.text)


def outcome(step: Callable[[], object]) -> tuple[Any, ...]:
    """What a client step came to: ("ok",) or the refusal as pika reports it (its exception
    class, and the reply code and text of the close the broker sent)."""
    try:
        step()
    except (pika.exceptions.ChannelClosedByBroker, pika.exceptions.ConnectionClosedByBroker) as e:
        return (type(e).__name__, e.reply_code, e.reply_text)
    except pika.exceptions.AMQPError as e:
        return (type(e).__name__, repr(e.args))
    return ("ok",)


def eventually(step: Callable[[], object], timeout_s: float = 30.0) -> tuple[Any, ...]:
    """`outcome(step)` once it is ("ok",), or the last refusal after `timeout_s` (a bound):
    RabbitMQ forgets a closed connection a moment after the close (its connection tracking)."""
    deadline = time.monotonic() + timeout_s
    while True:
        got = outcome(step)
        if got == ("ok",) or time.monotonic() > deadline:
            return got
        time.sleep(0.1)


def _answers(url: str) -> bool:
    with contextlib.suppress(httpx.HTTPError):
        return httpx.get(url + "/api/overview", auth=("guest", "guest"), timeout=5).is_success
    return False


@pytest.fixture(scope="session")
def rabbitmq() -> Iterator[Target]:
    """A private RabbitMQ 3.10 node with its management API (see the module docstring)."""
    why = rabbitmq_cluster.available()
    if why:
        pytest.skip(f"rabbitmq-server is not installed: {why} (tools/test_deps.sh)")
    node = rabbitmq_cluster.RabbitCluster(
        1,
        prefix="ringmq-diff",
        timeout_s=_START_TIMEOUT_S,
        plugins=[rabbitmq_cluster.MANAGEMENT],
        advanced=_ADVANCED,
    )
    try:
        node.start()
        target = Target("rabbitmq", node.ports[0], node.http_urls[0])
        deadline = time.monotonic() + _START_TIMEOUT_S
        while not _answers(target.http):
            assert time.monotonic() < deadline, "RabbitMQ's management API did not answer"
            time.sleep(0.5)
        version = str(target.api("GET", "/api/overview").json().get("rabbitmq_version"))
        if not version.startswith(RABBITMQ_VERSION):
            pytest.skip(f"RabbitMQ {version} here; these tests compare with 3.10.8")
        yield target
    finally:
        node.stop()


@pytest.fixture(scope="session")
def ringmq(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    """An in-process ringmq configured as the RabbitMQ node (see the module docstring)."""
    data: Path = tmp_path_factory.mktemp("ringmq-diff")
    b = BrokerThread(
        ServerOptions(
            host="127.0.0.1",
            amqp_port=0,
            http_port=0,
            data_dir=data,
            config=parse_toml(_RINGMQ_CONFIG),
        )
    )
    b.start()
    try:
        yield Target("ringmq", b.port, f"http://127.0.0.1:{b.server.http_port}")
    finally:
        b.stop()


@pytest.fixture(scope="session")
def both(rabbitmq: Target, ringmq: Target) -> tuple[Target, Target]:
    """(ringmq, rabbitmq): RabbitMQ first, so a missing one skips before ringmq starts."""
    return ringmq, rabbitmq
