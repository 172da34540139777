"""broker.xml address-settings: each element is applied, accepted at ringmq's own value, accepted
with no effect (logged), or refused at start-up with a message naming it; none is dropped."""

from __future__ import annotations

import logging

import pytest

from ringmq.server.brokerxml import parse_artemis_xml
from ringmq.server.configspec import ConfigError
from ringmq.server.setup import broker_config


def _xml(body: str, match: str = "#") -> str:
    return (
        "<configuration><core><address-settings>"
        f"<address-setting match='{match}'>{body}</address-setting>"
        "</address-settings></core></configuration>"
    )


def _core(body: str, match: str = "#") -> dict[str, dict[str, object]]:
    return broker_config(parse_artemis_xml(_xml(body, match))).address_settings


def test_undelivered_message_settings_reach_the_core() -> None:
    got = _core(
        "<dead-letter-address>DLA</dead-letter-address>"
        "<auto-create-dead-letter-resources>true</auto-create-dead-letter-resources>"
        "<dead-letter-queue-prefix></dead-letter-queue-prefix>"
        "<dead-letter-queue-suffix>.DLQ</dead-letter-queue-suffix>"
        "<expiry-address>EXP</expiry-address>"
        "<max-delivery-attempts>3</max-delivery-attempts>"
        "<redelivery-delay>100</redelivery-delay>"
        "<redelivery-delay-multiplier>1.5</redelivery-delay-multiplier>"
        "<max-redelivery-delay>900</max-redelivery-delay>"
        "<auto-create-queues>false</auto-create-queues>"
        "<default-address-routing-type>multicast</default-address-routing-type>",
        match="orders.#",
    )
    assert got["orders.#"] == {
        "dead-letter-address": "DLA",
        "auto-create-dead-letter-resources": True,
        "dead-letter-queue-prefix": "",
        "dead-letter-queue-suffix": ".DLQ",
        "expiry-address": "EXP",
        "max-delivery-attempts": 3,
        "redelivery-delay": 100,
        "redelivery-delay-multiplier": 1.5,
        "max-redelivery-delay": 900,
        "auto-create-queues": False,
        "default-address-routing-type": "multicast",
    }
    # Artemis' default max-delivery-attempts, for every address of a broker.xml broker
    assert got["#"] == {"max-delivery-attempts": 10}


def test_an_explicit_catch_all_keeps_its_own_attempts() -> None:
    assert _core("<max-delivery-attempts>-1</max-delivery-attempts>")["#"] == {
        "max-delivery-attempts": -1
    }


@pytest.mark.parametrize(
    ("body", "text"),
    [
        ("<slow-consumer-threshold>10</slow-consumer-threshold>", "<slow-consumer-threshold>"),
        ("<page-limit-bytes>1000</page-limit-bytes>", "only -1 is supported"),
        ("<send-to-dla-on-no-route>true</send-to-dla-on-no-route>", "only false"),
        ("<auto-delete-queues>true</auto-delete-queues>", "auto-delete-queues"),
        ("<expiry-delay>1000</expiry-delay>", "expiry-delay"),
        ("<redelivery-delay-multiplier>0.5</redelivery-delay-multiplier>", "multiplier"),
        ("<default-queue-routing-type>BOTH</default-queue-routing-type>", "ANYCAST or MULTICAST"),
    ],
)
def test_what_ringmq_cannot_honour_is_refused_at_start_up(body: str, text: str) -> None:
    with pytest.raises(ConfigError, match=text):
        _core(body)


def test_tuning_settings_are_accepted_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="ringmq.server.brokerxml"):
        got = _core("<page-size-bytes>10M</page-size-bytes><expiry-delay>-1</expiry-delay>")
    assert got["#"] == {"max-delivery-attempts": 10}
    assert "page-size-bytes" in caplog.text
    assert "no effect" in caplog.text
