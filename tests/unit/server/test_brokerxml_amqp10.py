"""The AMQP 1.0 anonymous login from an Artemis broker.xml: the first acceptor serving AMQP,
Artemis' `saslMechanisms` and ringmq's `anonymousUser` / `anonymousPassword` parameters."""

from __future__ import annotations

import pytest

from ringmq.server.brokerxml import parse_artemis_xml
from ringmq.server.configspec import ConfigError


def xml(*acceptors: str) -> str:
    rows = "".join(f'<acceptor name="a{i}">{a}</acceptor>' for i, a in enumerate(acceptors))
    return (
        '<configuration xmlns="urn:activemq"><core xmlns="urn:activemq:core">'
        f"<acceptors>{rows}</acceptors></core></configuration>"
    )


@pytest.mark.parametrize(
    ("text", "user", "password"),
    [
        ('<configuration xmlns="urn:activemq"><core/></configuration>', "guest", "guest"),
        (xml("tcp://0.0.0.0:5672?protocols=AMQP"), "guest", "guest"),
        (xml("tcp://0.0.0.0:5672?protocols=CORE,AMQP;saslMechanisms=PLAIN"), None, "guest"),
        (xml("tcp://0.0.0.0:5672?saslMechanisms=PLAIN,ANONYMOUS"), "guest", "guest"),
        (xml("tcp://0.0.0.0:5672?anonymousUser=off"), None, "guest"),
        (
            xml("tcp://0.0.0.0:5672?protocols=AMQP;anonymousUser=app;anonymousPassword=pw"),
            "app",
            "pw",
        ),
        # the first acceptor that serves AMQP decides (a CORE-only one is skipped)
        (
            xml(
                "tcp://0.0.0.0:61616?protocols=CORE;saslMechanisms=PLAIN",
                "tcp://0.0.0.0:5672?protocols=AMQP&amp;anonymousUser=app&amp;anonymousPassword=pw",
            ),
            "app",
            "pw",
        ),
    ],
)
def test_anonymous_login_from_the_acceptor(text: str, user: str | None, password: str) -> None:
    spec = parse_artemis_xml(text).anonymous_login
    assert (spec.anonymous_user, spec.anonymous_password) == (user, password)


@pytest.mark.parametrize(
    ("url", "needle"),
    [
        ("tcp://0.0.0.0:5672?anonymousUser=app", "needs anonymous_password"),
        ("tcp://0.0.0.0:5672?anonymousUser=off;anonymousPassword=x", "are off"),
        ("tcp://0.0.0.0:5672?saslMechanisms=PLAIN;anonymousUser=app", "saslMechanisms"),
    ],
)
def test_acceptor_errors(url: str, needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        parse_artemis_xml(xml(url))
