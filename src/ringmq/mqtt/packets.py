"""MQTT control packets (3.1.1 and 5.0) as plain records.

One frozen-ish slotted dataclass per packet type; fields use the specification's names.
`properties` is None for 3.1.1 packets (the codec writes none), a `Properties` for 5.0. The
packet identifier acknowledgements (PUBACK, PUBREC, PUBREL, PUBCOMP) share one shape.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from typing import Final

from ringmq.mqtt.properties import Properties
from ringmq.mqtt.reasons import Reason

V31: Final = 3
V311: Final = 4
V5: Final = 5


class PacketType(IntEnum):
    """The fixed header's packet type (high nibble of its first byte)."""

    CONNECT = 1
    CONNACK = 2
    PUBLISH = 3
    PUBACK = 4
    PUBREC = 5
    PUBREL = 6
    PUBCOMP = 7
    SUBSCRIBE = 8
    SUBACK = 9
    UNSUBSCRIBE = 10
    UNSUBACK = 11
    PINGREQ = 12
    PINGRESP = 13
    DISCONNECT = 14
    AUTH = 15


@dataclass(slots=True)
class Will:
    """The will message of a CONNECT."""

    topic: str
    payload: bytes
    qos: int = 0
    retain: bool = False
    properties: Properties | None = None


@dataclass(slots=True)
class Connect:
    protocol_level: int
    client_id: str
    clean_start: bool = True
    keep_alive: int = 60
    username: str | None = None
    password: bytes | None = None
    will: Will | None = None
    properties: Properties | None = None
    protocol_name: str = "MQTT"


@dataclass(slots=True)
class ConnAck:
    reason_code: int = 0
    """A 5.0 `Reason`, or the 3.1.1 return code (0-5)."""
    session_present: bool = False
    properties: Properties | None = None


@dataclass(slots=True)
class Publish:
    topic: str
    payload: bytes
    qos: int = 0
    retain: bool = False
    dup: bool = False
    packet_id: int = 0
    properties: Properties | None = None


@dataclass(slots=True)
class _IdAck:
    packet_id: int
    reason_code: int = Reason.SUCCESS
    properties: Properties | None = None


@dataclass(slots=True)
class PubAck(_IdAck):
    pass


@dataclass(slots=True)
class PubRec(_IdAck):
    pass


@dataclass(slots=True)
class PubRel(_IdAck):
    pass


@dataclass(slots=True)
class PubComp(_IdAck):
    pass


@dataclass(slots=True)
class Subscription:
    """One topic filter of a SUBSCRIBE with its options (5.0 §3.8.3.1)."""

    topic_filter: str
    qos: int = 0
    no_local: bool = False
    retain_as_published: bool = False
    retain_handling: int = 0


@dataclass(slots=True)
class Subscribe:
    packet_id: int
    subscriptions: list[Subscription]
    properties: Properties | None = None


@dataclass(slots=True)
class SubAck:
    packet_id: int
    reason_codes: list[int]
    properties: Properties | None = None


@dataclass(slots=True)
class Unsubscribe:
    packet_id: int
    topic_filters: list[str]
    properties: Properties | None = None


@dataclass(slots=True)
class UnsubAck:
    packet_id: int
    reason_codes: list[int] = field(default_factory=list)
    """5.0 only (3.1.1 UNSUBACK has no payload)."""
    properties: Properties | None = None


@dataclass(slots=True)
class PingReq:
    pass


@dataclass(slots=True)
class PingResp:
    pass


@dataclass(slots=True)
class Disconnect:
    reason_code: int = Reason.SUCCESS
    properties: Properties | None = None


@dataclass(slots=True)
class Auth:
    reason_code: int = Reason.SUCCESS
    properties: Properties | None = None


Packet = (
    Connect
    | ConnAck
    | Publish
    | PubAck
    | PubRec
    | PubRel
    | PubComp
    | Subscribe
    | SubAck
    | Unsubscribe
    | UnsubAck
    | PingReq
    | PingResp
    | Disconnect
    | Auth
)
