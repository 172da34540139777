"""How RabbitMQ words values in its error texts, for texts users compare with RabbitMQ's; and
the texts of ringmq's own refusals that several protocols send alike."""

from __future__ import annotations

from typing import Any


def field_type(value: Any) -> str:
    """The field-table type name RabbitMQ prints for `value` ('signedint', 'longstr')."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "signedint" if -(2**31) <= value < 2**31 else "long"
    if isinstance(value, float):
        return "double"
    if isinstance(value, str | bytes):
        return "longstr"
    if isinstance(value, dict):
        return "table"
    if isinstance(value, list):
        return "array"
    return type(value).__name__


def fmt_value(value: Any) -> str:
    """RabbitMQ's "the value '10' of type 'signedint'" for inequivalent-arg texts."""
    if value is None:
        return "none"
    kind = field_type(value)
    shown = value.decode("utf-8", "replace") if isinstance(value, bytes) else value
    if isinstance(shown, bool):
        shown = str(shown).lower()
    return f"the value '{shown}' of type '{kind}'"


def flag(value: bool) -> str:
    """'true' / 'false'."""
    return "true" if value else "false"


def as_str(value: Any) -> str | None:
    """A header or argument value as text (bytes decoded), None when it is neither."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value if isinstance(value, str) else None


def unknown_delivery(delivery_id: int) -> str:
    """RabbitMQ's text for a settle that names no outstanding delivery (clients compare it)."""
    return f"unknown delivery tag {delivery_id}"


def not_the_leader(host: str, port: int) -> str:
    """A cluster follower's refusal (`proxy = false`), in every protocol: where the leader's
    port of the same protocol is."""
    return f"not the leader: connect to {host}:{port}"
