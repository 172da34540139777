"""MQTT reason codes (5.0 §2.4) and the error a codec or machine raises.

MQTT 3.1.1 has fewer codes: CONNACK return codes 0-5 and SUBACK 0x80 failure; everything else
is a closed connection. `connack_v3` maps a 5.0 CONNACK reason onto the 3.1.1 return code.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Final


class Reason(IntEnum):
    """MQTT 5.0 reason codes (one byte)."""

    SUCCESS = 0x00
    GRANTED_QOS_1 = 0x01
    GRANTED_QOS_2 = 0x02
    DISCONNECT_WITH_WILL = 0x04
    NO_MATCHING_SUBSCRIBERS = 0x10
    NO_SUBSCRIPTION_EXISTED = 0x11
    UNSPECIFIED_ERROR = 0x80
    MALFORMED_PACKET = 0x81
    PROTOCOL_ERROR = 0x82
    IMPLEMENTATION_SPECIFIC_ERROR = 0x83
    UNSUPPORTED_PROTOCOL_VERSION = 0x84
    CLIENT_IDENTIFIER_NOT_VALID = 0x85
    BAD_USER_NAME_OR_PASSWORD = 0x86
    NOT_AUTHORIZED = 0x87
    SERVER_UNAVAILABLE = 0x88
    SERVER_BUSY = 0x89
    BANNED = 0x8A
    SERVER_SHUTTING_DOWN = 0x8B
    BAD_AUTHENTICATION_METHOD = 0x8C
    KEEP_ALIVE_TIMEOUT = 0x8D
    SESSION_TAKEN_OVER = 0x8E
    TOPIC_FILTER_INVALID = 0x8F
    TOPIC_NAME_INVALID = 0x90
    PACKET_IDENTIFIER_IN_USE = 0x91
    PACKET_IDENTIFIER_NOT_FOUND = 0x92
    RECEIVE_MAXIMUM_EXCEEDED = 0x93
    TOPIC_ALIAS_INVALID = 0x94
    PACKET_TOO_LARGE = 0x95
    MESSAGE_RATE_TOO_HIGH = 0x96
    QUOTA_EXCEEDED = 0x97
    ADMINISTRATIVE_ACTION = 0x98
    PAYLOAD_FORMAT_INVALID = 0x99
    RETAIN_NOT_SUPPORTED = 0x9A
    QOS_NOT_SUPPORTED = 0x9B
    USE_ANOTHER_SERVER = 0x9C
    SERVER_MOVED = 0x9D
    SHARED_SUBSCRIPTIONS_NOT_SUPPORTED = 0x9E
    CONNECTION_RATE_EXCEEDED = 0x9F
    MAXIMUM_CONNECT_TIME = 0xA0
    SUBSCRIPTION_IDENTIFIERS_NOT_SUPPORTED = 0xA1
    WILDCARD_SUBSCRIPTIONS_NOT_SUPPORTED = 0xA2

    @property
    def is_error(self) -> bool:
        """Codes from 0x80 up are failures."""
        return self >= 0x80


SUBACK_FAILURE_V3: Final = 0x80
"""The 3.1.1 SUBACK return code of a refused subscription."""

_CONNACK_V3: Final = {
    Reason.SUCCESS: 0,
    Reason.UNSUPPORTED_PROTOCOL_VERSION: 1,
    Reason.CLIENT_IDENTIFIER_NOT_VALID: 2,
    Reason.SERVER_UNAVAILABLE: 3,
    Reason.SERVER_BUSY: 3,
    Reason.SERVER_SHUTTING_DOWN: 3,
    Reason.BAD_USER_NAME_OR_PASSWORD: 4,
    Reason.NOT_AUTHORIZED: 5,
    Reason.BANNED: 5,
}


def connack_v3(reason: Reason) -> int:
    """The 3.1.1 CONNACK return code closest to a 5.0 CONNACK reason (3.1.1 §3.2.2.3)."""
    return _CONNACK_V3.get(reason, 3 if reason.is_error else 0)


class MQTTError(Exception):
    """A packet that breaks the protocol: the connection answers `reason` and closes.

    Attributes:
        reason: the 5.0 reason code (DISCONNECT, or CONNACK before the connection is up).
        text: what was wrong (the DISCONNECT's reason string; logged).
    """

    def __init__(self, reason: Reason, text: str) -> None:
        super().__init__(f"{reason.name}: {text}")
        self.reason = reason
        self.text = text
