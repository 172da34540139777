"""AMQP 1.0 addresses as nodes (Artemis and RabbitMQ 4 forms) and core conditions as AMQP 1.0
error conditions."""

from __future__ import annotations

import pytest

from ringmq.adapters.amqp10.addresses import AddressError, Kind, Node, resolve
from ringmq.adapters.amqp10.errors import CONDITIONS
from ringmq.core.errors import Condition


@pytest.mark.parametrize(
    ("address", "caps", "node", "exchange", "key"),
    [
        ("orders", None, Node(Kind.ANYCAST, "orders"), "", "orders"),
        ("orders", ("queue",), Node(Kind.ANYCAST, "orders"), "", "orders"),
        ("news", ("topic",), Node(Kind.MULTICAST, "news"), "amq.topic", "news"),
        ("queue://orders", ("topic",), Node(Kind.ANYCAST, "orders"), "", "orders"),
        ("topic://news.#", None, Node(Kind.MULTICAST, "news.#"), "amq.topic", "news.#"),
        ("/queues/a%2Fb", None, Node(Kind.QUEUE, "a/b"), "", "a/b"),
        ("/exchanges/x/k", None, Node(Kind.EXCHANGE, "x", "k"), "x", "k"),
        ("/exchanges/x", None, Node(Kind.EXCHANGE, "x"), "x", None),
        ("/exchanges/amq.default/q", None, Node(Kind.EXCHANGE, "", "q"), "", "q"),
    ],
)
def test_addresses(
    address: str, caps: tuple[str, ...] | None, node: Node, exchange: str, key: str | None
) -> None:
    got = resolve(address, caps)
    assert got == node
    assert (got.exchange, got.routing_key) == (exchange, key)


@pytest.mark.parametrize("address", ["", "queue://", "/queues/", "/topics/x", "/exchanges/"])
def test_bad_addresses(address: str) -> None:
    with pytest.raises(AddressError):
        resolve(address)


def test_every_condition_has_an_amqp10_condition() -> None:
    assert set(CONDITIONS) == set(Condition)
    assert all(v.startswith("amqp:") for v in CONDITIONS.values())
