"""LDAP logins (issue 29) against a real OpenLDAP (Debian's slapd, started by the test on a
loopback port): RabbitMQ's query model (user DN pattern, group lookups for vhost access,
resource permissions and tags), backends chained internal then LDAP; an LDAP server that is
down or silent refuses that login alone, with a clear reason, and never stalls the broker."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pika
import pytest

from ringmq.core.ldapquery import LdapGrant
from ringmq.node import BrokerThread
from tests.integration.conftest import BrokerFactory
from tests.ldapserver import SUFFIX, Slapd, slapd_binary
from tests.ports import free_port

pytestmark = pytest.mark.integration
GROUPS = f"ou=groups,{SUFFIX}"


@pytest.fixture(scope="module")
def slapd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Slapd]:
    slapd_binary()  # skips, with the reason, where slapd is not installed
    server = Slapd(Path(tmp_path_factory.mktemp("slapd")))
    try:
        server.seed(
            {"alice": "alice-pw", "bob": "bob-pw", "carol": "carol-pw"},
            {"admins": ["alice"], "mq-users": ["alice", "bob"]},
        )
        yield server
    finally:
        server.stop()


def _config(port: int, timeout_s: float = 5.0) -> str:
    admins = f'{{ in_group = "cn=admins,{GROUPS}" }}'
    configure = f'{{ or = [{admins}, {{ match = ["${{name}}", "^${{username}}-"] }}] }}'
    resources = (
        f'{{ for = [{{ permission = "configure", query = {configure} }}, '
        '{ permission = "write", query = { constant = true } }, '
        '{ permission = "read", query = { constant = true } }] }'
    )
    return (
        '[auth]\nbackends = ["internal", "ldap"]\n'
        "[auth.ldap]\n"
        f'servers = ["127.0.0.1"]\nport = {port}\ntimeout_s = {timeout_s}\n'
        f'user_dn_pattern = "cn=${{username}},ou=People,{SUFFIX}"\n'
        f'vhost_access_query = {{ in_group = "cn=mq-users,{GROUPS}" }}\n'
        f"resource_access_query = {resources}\n"
        f"[auth.ldap.tag_queries]\nadministrator = {admins}\n"
    )


def conn_grants(b: BrokerThread, user: str) -> list[Any]:
    """The grants of `user`'s open connections (each connection holds its own)."""
    return b.call(lambda: [c.grant for c in b.server.broker.state.conns.values() if c.user == user])


def _pika(b: BrokerThread, user: str, password: str) -> pika.BlockingConnection:
    params = pika.ConnectionParameters(
        "127.0.0.1",
        b.port,
        credentials=pika.PlainCredentials(user, password),
        heartbeat=0,
        connection_attempts=1,
    )
    return pika.BlockingConnection(params)


def test_users_groups_and_tags_come_from_ldap(broker_factory: BrokerFactory, slapd: Slapd) -> None:
    b = broker_factory(_config(slapd.port))
    with _pika(b, "alice", "alice-pw") as conn:  # in admins: configure anything
        ch = conn.channel()
        ch.queue_declare("shared")
        ch.basic_publish("", "shared", b"via ldap")
        assert ch.basic_get("shared", auto_ack=True)[2] == b"via ldap"
        [grant] = conn_grants(b, "alice")
        assert isinstance(grant, LdapGrant)
        assert grant.tags == ("administrator",)
        assert grant.user_dn == f"cn=alice,ou=People,{SUFFIX}"
    with _pika(b, "bob", "bob-pw") as conn:  # not an admin: only his own queues
        ch = conn.channel()
        ch.queue_declare("bob-inbox")
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
            conn.channel().queue_declare("elsewhere")
        assert refused.value.reply_code == 403
        assert [g.tags for g in conn_grants(b, "bob")] == [()]
    # the internal backend comes first: guest still logs in with its password
    with _pika(b, "guest", "guest") as conn:
        assert conn.channel().is_open


def test_refusals_say_why(broker_factory: BrokerFactory, slapd: Slapd) -> None:
    b = broker_factory(_config(slapd.port))
    with pytest.raises(pika.exceptions.ProbableAuthenticationError, match="invalid credentials"):
        _pika(b, "alice", "wrong")
    with pytest.raises(pika.exceptions.ProbableAuthenticationError, match="empty password"):
        _pika(b, "alice", "")
    with pytest.raises(pika.exceptions.ProbableAccessDeniedError, match="vhost '/' refused"):
        _pika(b, "carol", "carol-pw")  # a valid LDAP user outside mq-users
    with _pika(b, "bob", "bob-pw") as conn:
        assert conn.channel().is_open


def test_ldap_refusals_count_toward_the_login_throttle(
    broker_factory: BrokerFactory, slapd: Slapd
) -> None:
    # the answer comes back through HandlerContext.slow_login, run as a read of the connection
    b = broker_factory(_config(slapd.port))

    def shorten() -> None:  # keep the throttle's delays short: the second refusal waits on it
        t = b.server.login_guard.throttle
        t.base_ms, t.max_ms = 20, 80

    b.call(shorten)

    def failures() -> int:
        return b.call(
            lambda: b.server.login_guard.throttle.failures("127.0.0.1", b.server.clock.wall_ms())
        )

    for n in (1, 2):
        with pytest.raises(pika.exceptions.ProbableAuthenticationError, match="LDAP"):
            _pika(b, "alice", "wrong")
        assert failures() == n
    with _pika(b, "alice", "alice-pw") as conn:  # an LDAP success clears the record
        assert conn.channel().is_open
    assert failures() == 0


def test_an_ldap_server_that_is_down_refuses_the_login_alone(
    broker_factory: BrokerFactory, tmp_path: Path
) -> None:
    slapd_binary()
    b = broker_factory(_config(free_port()))  # a port with nobody behind it
    with pytest.raises(
        pika.exceptions.ProbableAuthenticationError, match="no LDAP server reachable"
    ):
        _pika(b, "alice", "alice-pw")
    with _pika(b, "guest", "guest") as conn:
        assert conn.channel().is_open


def test_a_silent_ldap_server_does_not_stall_the_broker(broker_factory: BrokerFactory) -> None:
    slapd_binary()
    # accepts TCP connections (the kernel's backlog) but never answers a bind
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)
    try:
        # (LDAP's timeout below the AMQP handshake's 10 s, as it should be configured)
        b = broker_factory(_config(silent.getsockname()[1], timeout_s=6))
        outcome: list[BaseException] = []

        def ldap_login() -> None:
            try:
                _pika(b, "alice", "alice-pw").close()
            except BaseException as exc:  # noqa: BLE001 - recorded for the assertion below
                outcome.append(exc)

        waiting = threading.Thread(target=ldap_login)
        waiting.start()
        # while that login waits on LDAP, the broker serves everyone else
        with _pika(b, "guest", "guest") as conn:
            ch = conn.channel()
            ch.queue_declare("meanwhile")
            ch.basic_publish("", "meanwhile", b"served")
            assert ch.basic_get("meanwhile", auto_ack=True)[2] == b"served"
        assert waiting.is_alive(), "the LDAP login ended before the broker served guest"
        waiting.join(40)
        assert not waiting.is_alive()
        assert outcome
        assert "no LDAP server reachable" in str(outcome[0])
    finally:
        silent.close()
