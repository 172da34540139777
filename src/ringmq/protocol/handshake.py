"""Connection handshake pieces: server properties, SASL responses, tune negotiation.

Pure functions; the state machine that calls them lives in ``connection.py``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, Final

from ringmq.amqp.frames import FRAME_MIN_SIZE
from ringmq.amqp.reply_codes import AMQPError, ReplyCode
from ringmq.amqp.tables import decode_table

MECHANISMS: Final = ("PLAIN", "AMQPLAIN")
"""SASL mechanisms offered in Connection.Start, in preference order."""
EXTERNAL: Final = "EXTERNAL"
"""The certificate mechanism, offered beside those only where the client presented a verified
certificate (RabbitMQ's `rabbit_auth_mechanism_ssl:should_offer`)."""

CAPABILITIES: Final[dict[str, Any]] = {
    "publisher_confirms": True,
    "exchange_exchange_bindings": True,
    "basic.nack": True,
    "consumer_cancel_notify": True,
    "connection.blocked": True,
    "authentication_failure_close": True,
    "per_consumer_qos": True,
    "direct_reply_to": True,
}


def server_properties(version: str, cluster_name: str = "ringmq") -> dict[str, Any]:
    """The server-properties table of Connection.Start (RabbitMQ's keys and capabilities)."""
    return {
        "capabilities": dict(CAPABILITIES),
        "cluster_name": cluster_name,
        "copyright": "ringmq contributors",
        "information": "Licensed under the Apache License 2.0",
        "platform": "Python",
        "product": "ringmq",
        "version": version,
    }


def client_capability(client_properties: dict[str, Any], name: str) -> bool:
    """True if the client announced capability ``name`` in its properties."""
    caps = client_properties.get("capabilities")
    return isinstance(caps, dict) and caps.get(name) is True


@dataclass(frozen=True, slots=True)
class Credentials:
    username: str
    password: str


def parse_sasl(mechanism: str, response: bytes) -> Credentials:
    """Parse a PLAIN (``authzid\\0authcid\\0passwd``) or AMQPLAIN (LOGIN/PASSWORD table) response.

    Raises:
        AMQPError: COMMAND_INVALID for a mechanism not offered (as RabbitMQ), ACCESS_REFUSED for
            a malformed response.
    """
    if mechanism == "PLAIN":
        parts = response.split(b"\x00")
        if len(parts) != 3:
            raise AMQPError(ReplyCode.ACCESS_REFUSED, "malformed PLAIN response")
        user, password = parts[1], parts[2]
        try:
            return Credentials(user.decode("utf-8"), password.decode("utf-8"))
        except UnicodeDecodeError:
            raise AMQPError(ReplyCode.ACCESS_REFUSED, "PLAIN response is not UTF-8") from None
    if mechanism == EXTERNAL:
        # the name comes from the certificate; the response (an authzid, if any) is ignored,
        # as RabbitMQ ignores it
        return Credentials("", "")
    if mechanism == "AMQPLAIN":
        # A field table without its length prefix (RabbitMQ's rabbit_auth_mechanism_amqplain).
        try:
            table, _ = decode_table(struct.pack(">I", len(response)) + response, 0)
        except (AMQPError, struct.error):
            raise AMQPError(ReplyCode.ACCESS_REFUSED, "malformed AMQPLAIN response") from None
        login = _text(table.get("LOGIN"))
        secret = _text(table.get("PASSWORD"))
        if login is None or secret is None:
            raise AMQPError(ReplyCode.ACCESS_REFUSED, "AMQPLAIN response lacks LOGIN/PASSWORD")
        return Credentials(login, secret)
    raise AMQPError(
        ReplyCode.COMMAND_INVALID,
        f"unknown authentication mechanism {mechanism!r}",
        class_id=10,
        method_id=11,
    )


def _text(value: object) -> str | None:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value if isinstance(value, str) else None


@dataclass(frozen=True, slots=True)
class TuneParams:
    """Tune values; 0 for heartbeat_s disables heartbeats."""

    channel_max: int = 2047
    frame_max: int = 131072
    heartbeat_s: int = 60


def negotiate(ours: TuneParams, channel_max: int, frame_max: int, heartbeat: int) -> TuneParams:
    """Validate the client's Tune-Ok against what we offered and return the final values.

    RabbitMQ's rules: a client value above our maximum, or a frame_max below 4096, is a
    NOT_ALLOWED connection error; 0 from the client for channel_max/frame_max means "no limit
    of mine" and resolves to ours. The client's heartbeat is final (it already applied "lower
    non-zero wins"; 0 disables), as RabbitMQ takes it.
    """
    if channel_max == 0:
        channel_max = ours.channel_max
    elif channel_max > ours.channel_max:
        raise AMQPError(
            ReplyCode.NOT_ALLOWED,
            f"negotiated channel_max = {channel_max} is higher than the maximum allowed value "
            f"({ours.channel_max})",
            class_id=10,
            method_id=31,
        )
    if frame_max == 0:
        frame_max = ours.frame_max
    elif frame_max < FRAME_MIN_SIZE:
        raise AMQPError(
            ReplyCode.NOT_ALLOWED,
            f"frame_max={frame_max} < {FRAME_MIN_SIZE} min size",
            class_id=10,
            method_id=31,
        )
    elif ours.frame_max and frame_max > ours.frame_max:
        raise AMQPError(
            ReplyCode.NOT_ALLOWED,
            f"negotiated frame_max = {frame_max} is higher than the maximum allowed value "
            f"({ours.frame_max})",
            class_id=10,
            method_id=31,
        )
    return TuneParams(channel_max=channel_max, frame_max=frame_max, heartbeat_s=heartbeat)


__all__ = [
    "CAPABILITIES",
    "EXTERNAL",
    "MECHANISMS",
    "Credentials",
    "TuneParams",
    "client_capability",
    "negotiate",
    "parse_sasl",
    "server_properties",
]
