"""Repeated failed logins from one address are slowed, over AMQP and HTTP (issue 16, 1.6).

Assertions read the broker's throttle (`BrokerServer.login_guard`): the delays it imposed and
the failures it counts for 127.0.0.1, never the wall clock. Its delays are shortened for the
test (base 20 ms, cap 80 ms) so the penalised attempts run quickly.
"""

from __future__ import annotations

import logging

import httpx
import pika
import pika.exceptions
import pytest

from ringmq.node import BrokerThread
from tests.integration.conftest import BrokerFactory

pytestmark = pytest.mark.integration

LOOPBACK = "127.0.0.1"


def _quick(b: BrokerThread) -> None:
    def shorten() -> None:
        t = b.server.login_guard.throttle
        t.base_ms, t.max_ms = 20, 80

    b.call(shorten)


def _amqp_login(b: BrokerThread, password: str) -> bool:
    params = pika.ConnectionParameters(
        LOOPBACK, b.port, credentials=pika.PlainCredentials("guest", password), heartbeat=0
    )
    try:
        pika.BlockingConnection(params).close()
    except pika.exceptions.ProbableAuthenticationError:
        return False
    return True


def test_wrong_amqp_passwords_from_one_address_are_slowed_and_logged_rate_limited(
    broker_factory: BrokerFactory, caplog: pytest.LogCaptureFixture
) -> None:
    b = broker_factory()
    _quick(b)
    guard = b.server.login_guard
    with caplog.at_level(logging.WARNING, logger="ringmq.core.throttle"):
        for _ in range(7):
            assert not _amqp_login(b, "wrong")
    now = b.call(b.server.clock.wall_ms)
    assert b.call(lambda: guard.throttle.failures(LOOPBACK, now)) == 7
    # the first three were answered at once; each later one waited, doubling to the cap
    assert b.call(lambda: list(guard.delayed)) == [20, 40, 80, 80]
    lines = [r.getMessage() for r in caplog.records if "login failed" in r.getMessage()]
    assert len(lines) == 1  # one line per period, not one per attempt
    assert "user 'guest' from 127.0.0.1" in lines[0]
    # a success resets the address
    assert _amqp_login(b, "guest")
    assert b.call(lambda: guard.throttle.failures(LOOPBACK, now)) == 0


def test_wrong_http_passwords_share_the_throttle(broker_factory: BrokerFactory) -> None:
    b = broker_factory(http_port=0)
    _quick(b)
    guard = b.server.login_guard
    url = f"http://{LOOPBACK}:{b.server.http_port}/api/whoami"
    with httpx.Client() as http:
        for _ in range(5):
            assert http.get(url, auth=("guest", "nope")).status_code == 401
        now = b.call(b.server.clock.wall_ms)
        assert b.call(lambda: guard.throttle.failures(LOOPBACK, now)) == 5
        assert b.call(lambda: list(guard.delayed)) == [20, 40]
        # a wrong AMQP password from the same address is held too: the same record
        assert not _amqp_login(b, "wrong")
        assert b.call(lambda: list(guard.delayed)) == [20, 40, 80]
        assert http.get(url, auth=("guest", "guest")).status_code == 200
        assert b.call(lambda: guard.throttle.failures(LOOPBACK, now)) == 0
