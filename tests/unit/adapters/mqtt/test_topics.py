"""The topic <-> routing key mapping: RabbitMQ's swap of `/` and `.`, `+` as `*`, whatever the
characters (the ASCII path over bytes gives what the character table gives)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ringmq.adapters.mqtt.topics import from_routing_key, to_routing_key

_CHARS = st.one_of(st.sampled_from("/.+*#$ab"), st.characters())
_REFERENCE = {"/": ".", ".": "/", "+": "*"}


def _reference_to_amqp(topic: str) -> str:
    return "".join(_REFERENCE.get(ch, ch) for ch in topic)


def _reference_to_mqtt(key: str) -> str:
    back = {v: k for k, v in _REFERENCE.items()}
    return "".join(back.get(ch, ch) for ch in key)


def test_the_documented_examples() -> None:
    assert to_routing_key("a/b.c/+/#") == "a.b/c.*.#"
    assert from_routing_key("a.b/c.*.#") == "a/b.c/+/#"
    assert to_routing_key("é/ü.x") == "é.ü/x"


@given(st.text(_CHARS))
def test_both_ways_match_the_character_table(text: str) -> None:
    assert to_routing_key(text) == _reference_to_amqp(text)
    assert from_routing_key(text) == _reference_to_mqtt(text)
    assert from_routing_key(to_routing_key(text)) == text.replace("*", "+")
