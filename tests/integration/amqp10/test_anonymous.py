"""The AMQP 1.0 anonymous login setting (`[amqp10] anonymous_user`, docs/amqp10.md).

SASL ANONYMOUS, and a client that skips SASL, logs in as the configured user (guest by
default); "off" refuses both with `amqp:unauthorized-access`, while PLAIN still works.
"""

from __future__ import annotations

import socket

import pytest
from proton import ConnectionException, Message
from proton.utils import BlockingConnection

from ringmq.amqp10 import performatives as p
from ringmq.amqp10.frames import AMQP_HEADER, SASL_HEADER, encode_frame
from ringmq.node import BrokerThread
from ringmq.server.brokerxml import parse_artemis_xml
from ringmq.status import ConnectionInfo
from tests.integration.amqp10.test_errors import read_until_closed
from tests.integration.conftest import BrokerFactory, wait_until

pytestmark = pytest.mark.integration

APP_USER = """
[amqp10]
anonymous_user = "app"
anonymous_password = "app-secret"

[[users]]
name = "app"
password = "app-secret"

[[permissions]]
user = "app"
"""


def anonymous(b: BrokerThread) -> BlockingConnection:
    return BlockingConnection(f"amqp://127.0.0.1:{b.port}", timeout=5, allowed_mechs="ANONYMOUS")


def amqp10_connections(b: BrokerThread) -> list[ConnectionInfo]:
    return [c for c in b.call(b.server.connections) if c.protocol == "AMQP 1.0"]


def test_anonymous_is_guest_by_default(broker: BrokerThread) -> None:
    c = anonymous(broker)
    try:
        c.create_sender("anon-q").send(Message(body="hi"))
        (info,) = amqp10_connections(broker)
        assert (info.user, info.auth_mechanism) == ("guest", "ANONYMOUS")
    finally:
        c.close()


@pytest.mark.parametrize(
    "off",
    [
        '[amqp10]\nanonymous_user = "off"\n',
        "[amqp10]\nanonymous_user = false\n",
        '[auth]\nanonymous_login_user = "off"\n',  # the one setting of every protocol
    ],
)
def test_off_refuses_anonymous_logins(broker_factory: BrokerFactory, off: str) -> None:
    b = broker_factory(off)
    with pytest.raises(ConnectionException) as exc:
        anonymous(b)
    assert "amqp:unauthorized-access" in str(exc.value)
    # a client that skips SASL is refused too: an open, then a close with the condition
    with socket.create_connection((b.host, b.port), timeout=5) as s:
        s.sendall(AMQP_HEADER + encode_frame(0, p.Open(container_id="raw")))
        s.sendall(encode_frame(0, p.Close()))
        header, opened, closed = read_until_closed(s)
    assert (header, type(opened)) == (AMQP_HEADER, p.Open)
    assert closed.error.condition == "amqp:unauthorized-access"
    # and SASL ANONYMOUS over a raw socket gets the auth outcome
    with socket.create_connection((b.host, b.port), timeout=5) as s:
        s.sendall(SASL_HEADER + encode_frame(0, p.SaslInit(mechanism="ANONYMOUS")))
        got = read_until_closed(s)
    assert isinstance(got[-1], p.SaslOutcome)
    assert got[-1].code == p.SASL_AUTH
    # PLAIN still logs in
    c = BlockingConnection(f"amqp://guest:guest@127.0.0.1:{b.port}", timeout=5)
    c.create_sender("still-q").send(Message(body="ok"))
    c.close()


def test_anonymous_logs_in_as_the_configured_user(broker_factory: BrokerFactory) -> None:
    b = broker_factory(APP_USER)
    c = anonymous(b)
    try:
        c.create_sender("app-q").send(Message(body="hi"))
        (info,) = amqp10_connections(b)
        assert (info.user, info.auth_mechanism) == ("app", "ANONYMOUS")
    finally:
        c.close()
    wait_until(lambda: not amqp10_connections(b))


def broker_xml(acceptor: str) -> str:
    """An Artemis broker.xml with one acceptor (and an anycast queue)."""
    return f"""<configuration xmlns="urn:activemq"><core xmlns="urn:activemq:core">
  <acceptors><acceptor name="amqp">{acceptor}</acceptor></acceptors>
  <addresses><address name="xml-q"><anycast><queue name="xml-q"/></anycast></address></addresses>
</core></configuration>"""


def test_broker_xml_switches_anonymous_off(broker_factory: BrokerFactory) -> None:
    # Artemis' own acceptor parameter: saslMechanisms without ANONYMOUS
    xml = broker_xml("tcp://0.0.0.0:5672?protocols=AMQP;saslMechanisms=PLAIN")
    b = broker_factory(parse_artemis_xml(xml))
    with pytest.raises(ConnectionException) as exc:
        anonymous(b)
    assert "amqp:unauthorized-access" in str(exc.value)
    c = BlockingConnection(f"amqp://guest:guest@127.0.0.1:{b.port}", timeout=5)
    c.create_sender("xml-q").send(Message(body="ok"))
    c.close()


def test_broker_xml_names_the_anonymous_user(broker_factory: BrokerFactory) -> None:
    xml = broker_xml(
        "tcp://0.0.0.0:5672?protocols=AMQP;anonymousUser=guest;anonymousPassword=guest"
    )
    b = broker_factory(parse_artemis_xml(xml))
    c = anonymous(b)
    try:
        c.create_sender("xml-q").send(Message(body="hi"))
        (info,) = amqp10_connections(b)
        assert (info.user, info.auth_mechanism) == ("guest", "ANONYMOUS")
    finally:
        c.close()
    # a user that does not exist: the anonymous login is refused (checked as any login)
    xml = broker_xml("tcp://0.0.0.0:5672?anonymousUser=nobody;anonymousPassword=x")
    b = broker_factory(parse_artemis_xml(xml))
    with pytest.raises(ConnectionException) as exc:
        anonymous(b)
    assert "amqp:unauthorized-access" in str(exc.value)
