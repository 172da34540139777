"""MQTT topic names and filters: validation, matching, and RabbitMQ's mapping onto `amq.topic`.

MQTT topics route through the topic exchange `amq.topic` as RabbitMQ routes them: the level
separator `/` and the AMQP word separator `.` are swapped, `+` becomes `*` and `#` stays `#`
(so MQTT `a/b` is routing key `a.b`, and a 0-9-1 publish to `a.b` reaches MQTT `a/b`). The
exchange decides which subscriber queues get a message; `matches` then applies MQTT's own rule
at delivery, which the exchange does not know: a topic starting with `$` is not matched by a
filter starting with a wildcard (§4.7.2).

Shared subscriptions (5.0 §4.8.2) are `$share/<group>/<filter>`; `parse_shared` splits them.
"""

from __future__ import annotations

from typing import Final

MAX_TOPIC_BYTES: Final = 65535
SHARE_PREFIX: Final = "$share/"

_MQTT_SIDE: Final = "/.+"
_AMQP_SIDE: Final = "./*"
"""The mapping, once: each MQTT character becomes the AMQP one at its place, and back."""
_TO_AMQP: Final = str.maketrans(_MQTT_SIDE, _AMQP_SIDE)
_TO_MQTT: Final = str.maketrans(_AMQP_SIDE, _MQTT_SIDE)
# The same tables over bytes, for ASCII topics (nearly all): `bytes.translate` indexes a
# 256-byte table where `str.translate` looks each character up in a dict, several times
# slower, and both run once per message.
_TO_AMQP_BYTES: Final = bytes.maketrans(_MQTT_SIDE.encode(), _AMQP_SIDE.encode())
_TO_MQTT_BYTES: Final = bytes.maketrans(_AMQP_SIDE.encode(), _MQTT_SIDE.encode())


class TopicError(ValueError):
    """A topic name or filter that MQTT does not allow."""


def check_topic_name(topic: str) -> None:
    """A PUBLISH topic: not empty, no wildcard, not a shared-subscription name (§4.7.3)."""
    if not topic:
        raise TopicError("empty topic name")
    if "+" in topic or "#" in topic:
        raise TopicError(f"wildcard in topic name {topic!r}")
    if topic.startswith(SHARE_PREFIX):
        raise TopicError(f"topic name {topic!r} is a shared subscription")
    if len(topic.encode("utf-8")) > MAX_TOPIC_BYTES:
        raise TopicError("topic name too long")


def check_filter(topic_filter: str) -> None:
    """A SUBSCRIBE filter: not empty; `#` only alone as the last level, `+` only alone."""
    if not topic_filter:
        raise TopicError("empty topic filter")
    levels = topic_filter.split("/")
    for i, level in enumerate(levels):
        if "#" in level and (level != "#" or i != len(levels) - 1):
            raise TopicError(f"'#' misplaced in {topic_filter!r}")
        if "+" in level and level != "+":
            raise TopicError(f"'+' misplaced in {topic_filter!r}")


def parse_shared(topic_filter: str) -> tuple[str, str] | None:
    """(group, filter) of `$share/<group>/<filter>`, None for a plain filter.

    Raises TopicError for a malformed shared filter (empty group, wildcard in the group, no
    filter).
    """
    if not topic_filter.startswith(SHARE_PREFIX):
        return None
    group, sep, rest = topic_filter[len(SHARE_PREFIX) :].partition("/")
    if not group or not sep or not rest or "+" in group or "#" in group:
        raise TopicError(f"invalid shared subscription {topic_filter!r}")
    check_filter(rest)
    return group, rest


def matches(topic_filter: str, topic: str) -> bool:
    """True when MQTT filter `topic_filter` matches topic name `topic` (§4.7)."""
    if topic.startswith("$") and topic_filter[:1] in ("+", "#"):
        return False
    f_levels = topic_filter.split("/")
    t_levels = topic.split("/")
    for i, f in enumerate(f_levels):
        if f == "#":
            return True
        if i >= len(t_levels):
            return False
        if f != "+" and f != t_levels[i]:
            return False
    return len(f_levels) == len(t_levels)


def to_routing_key(topic: str) -> str:
    """The `amq.topic` routing key (or binding key, for a filter) of an MQTT topic."""
    if topic.isascii():
        return topic.encode().translate(_TO_AMQP_BYTES).decode()
    return topic.translate(_TO_AMQP)


def from_routing_key(routing_key: str) -> str:
    """The MQTT topic (or filter) of an `amq.topic` routing (or binding) key."""
    if routing_key.isascii():
        return routing_key.encode().translate(_TO_MQTT_BYTES).decode()
    return routing_key.translate(_TO_MQTT)
