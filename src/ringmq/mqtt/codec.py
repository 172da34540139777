"""The MQTT wire codec: the fixed header, the remaining length, every packet type.

`PacketReader` cuts the byte stream into packets (h11 style: `feed`, then `next_packet`
returns None while a packet is incomplete) and refuses one over its maximum size from the
fixed header alone, before its body arrives. `decode` turns one packet's bytes into a packet
of `packets.py` for the protocol level the connection negotiated; `encode` does the reverse.
Both raise `MQTTError` with the 5.0 reason code that names what is wrong (MALFORMED_PACKET,
PROTOCOL_ERROR, PACKET_TOO_LARGE, UNSUPPORTED_PROTOCOL_VERSION).
"""

from __future__ import annotations

import struct
from typing import Final

from ringmq.mqtt.packets import (
    V5,
    V31,
    V311,
    Auth,
    ConnAck,
    Connect,
    Disconnect,
    Packet,
    PacketType,
    PingReq,
    PingResp,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    SubAck,
    Subscribe,
    Subscription,
    UnsubAck,
    Unsubscribe,
    Will,
)
from ringmq.mqtt.properties import (
    Properties,
    decode_binary,
    decode_properties,
    decode_utf8,
    encode_binary,
    encode_properties,
    encode_utf8,
    encode_varint,
    ids,
)
from ringmq.mqtt.reasons import MQTTError, Reason

MAX_REMAINING_LENGTH: Final = 268_435_455
_U16: Final = struct.Struct(">H")

_CONNECT_PROPS: Final = ids(
    "session_expiry_interval",
    "receive_maximum",
    "maximum_packet_size",
    "topic_alias_maximum",
    "request_response_information",
    "request_problem_information",
    "authentication_method",
    "authentication_data",
)
_WILL_PROPS: Final = ids(
    "will_delay_interval",
    "payload_format_indicator",
    "message_expiry_interval",
    "content_type",
    "response_topic",
    "correlation_data",
)
_CONNACK_PROPS: Final = ids(
    "session_expiry_interval",
    "receive_maximum",
    "maximum_qos",
    "retain_available",
    "maximum_packet_size",
    "assigned_client_identifier",
    "topic_alias_maximum",
    "reason_string",
    "wildcard_subscription_available",
    "subscription_identifier_available",
    "shared_subscription_available",
    "server_keep_alive",
    "response_information",
    "server_reference",
    "authentication_method",
    "authentication_data",
)
_PUBLISH_PROPS: Final = ids(
    "payload_format_indicator",
    "message_expiry_interval",
    "topic_alias",
    "response_topic",
    "correlation_data",
    "subscription_identifiers",
    "content_type",
)
_ACK_PROPS: Final = ids("reason_string")
_SUBSCRIBE_PROPS: Final = ids("subscription_identifiers")
_UNSUBSCRIBE_PROPS: Final = ids()
_DISCONNECT_PROPS: Final = ids("session_expiry_interval", "reason_string", "server_reference")
_AUTH_PROPS: Final = ids("authentication_method", "authentication_data", "reason_string")

_PROTOCOL_NAMES: Final = {V31: "MQIsdp", V311: "MQTT", V5: "MQTT"}


class PacketReader:
    """Cuts a byte stream into MQTT packets.

    Args:
        max_packet_size: the largest whole packet accepted (fixed header included); a larger
            one raises MQTTError(PACKET_TOO_LARGE) as soon as its fixed header is read.
    """

    def __init__(self, max_packet_size: int = MAX_REMAINING_LENGTH + 5) -> None:
        self.max_packet_size = max_packet_size
        self._buf = bytearray()
        self._pos = 0

    def feed(self, data: bytes) -> None:
        """Append bytes read from the socket."""
        if self._pos and self._pos == len(self._buf):
            self._buf.clear()
            self._pos = 0
        self._buf += data

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as packets."""
        return len(self._buf) - self._pos

    def first_byte(self) -> int | None:
        """The first byte of the next packet, None before it arrives."""
        return self._buf[self._pos] if self._pos < len(self._buf) else None

    def next_packet(self) -> tuple[int, bytes] | None:
        """The next whole packet as (first byte, body after the remaining length), or None."""
        buf, pos = self._buf, self._pos
        end = len(buf)
        if end - pos < 2:
            return None
        first = buf[pos]
        length = 0
        i = pos + 1
        for shift in (0, 7, 14, 21):
            if i >= end:
                return None
            byte = buf[i]
            i += 1
            length |= (byte & 0x7F) << shift
            if not byte & 0x80:
                break
        else:
            raise MQTTError(Reason.MALFORMED_PACKET, "remaining length over four bytes")
        total = i - pos + length
        if total > self.max_packet_size:
            raise MQTTError(
                Reason.PACKET_TOO_LARGE,
                f"packet of {total} bytes over the maximum of {self.max_packet_size}",
            )
        if end - i < length:
            return None
        body = bytes(buf[i : i + length])
        self._pos = i + length
        if self._pos > 65536 and self._pos * 2 > end:  # compact once the head is mostly read
            del buf[: self._pos]
            self._pos = 0
        return first, body


# ---------------------------------------------------------------------- decoding
def decode(first: int, body: bytes, version: int) -> Packet:
    """The packet of fixed-header byte `first` and `body`, at protocol level `version`
    (ignored for CONNECT, which carries its own)."""
    kind = first >> 4
    flags = first & 0x0F
    end = len(body)
    if kind == PacketType.PUBLISH:
        return _decode_publish(flags, body, version)
    if kind in (PacketType.PUBREL, PacketType.SUBSCRIBE, PacketType.UNSUBSCRIBE):
        if flags != 0b0010:
            raise MQTTError(Reason.MALFORMED_PACKET, f"reserved flags {flags:#x} of packet {kind}")
    elif flags:
        raise MQTTError(Reason.MALFORMED_PACKET, f"reserved flags {flags:#x} of packet {kind}")
    match kind:
        case PacketType.CONNECT:
            return _decode_connect(body)
        case PacketType.PUBACK | PacketType.PUBREC | PacketType.PUBREL | PacketType.PUBCOMP:
            return _decode_id_ack(kind, body, version)
        case PacketType.SUBSCRIBE:
            return _decode_subscribe(body, version)
        case PacketType.UNSUBSCRIBE:
            return _decode_unsubscribe(body, version)
        case PacketType.PINGREQ | PacketType.PINGRESP:
            if end:
                raise MQTTError(Reason.MALFORMED_PACKET, "PINGREQ/PINGRESP with a body")
            return PingReq() if kind == PacketType.PINGREQ else PingResp()
        case PacketType.DISCONNECT:
            return _decode_disconnect(body, version)
        case PacketType.AUTH:
            if version != V5:
                raise MQTTError(Reason.MALFORMED_PACKET, "AUTH before MQTT 5")
            reason = body[0] if end else 0
            props = decode_properties(body, 1, end, _AUTH_PROPS)[0] if end > 1 else None
            return Auth(reason, props)
        case PacketType.CONNACK:
            return _decode_connack(body, version)
        case PacketType.SUBACK | PacketType.UNSUBACK:
            return _decode_suback(kind, body, version)
        case _:
            raise MQTTError(Reason.MALFORMED_PACKET, f"packet type {kind} is reserved")


def _u16(body: bytes, pos: int, end: int) -> tuple[int, int]:
    if pos + 2 > end:
        raise MQTTError(Reason.MALFORMED_PACKET, "truncated packet")
    return _U16.unpack_from(body, pos)[0], pos + 2


def _packet_id(body: bytes, pos: int, end: int) -> tuple[int, int]:
    pid, pos = _u16(body, pos, end)
    if pid == 0:
        raise MQTTError(Reason.MALFORMED_PACKET, "packet identifier 0")
    return pid, pos


def _decode_connect(body: bytes) -> Connect:
    end = len(body)
    name, pos = decode_utf8(body, 0, end)
    if pos >= end:
        raise MQTTError(Reason.MALFORMED_PACKET, "truncated CONNECT")
    level = body[pos]
    pos += 1
    if name not in ("MQTT", "MQIsdp") or level not in _PROTOCOL_NAMES:
        raise MQTTError(
            Reason.UNSUPPORTED_PROTOCOL_VERSION, f"protocol {name!r} level {level} not supported"
        )
    if name != _PROTOCOL_NAMES[level]:
        raise MQTTError(Reason.UNSUPPORTED_PROTOCOL_VERSION, f"protocol {name!r} level {level}")
    if pos >= end:
        raise MQTTError(Reason.MALFORMED_PACKET, "truncated CONNECT")
    flags = body[pos]
    pos += 1
    if flags & 0x01:
        raise MQTTError(Reason.MALFORMED_PACKET, "CONNECT reserved flag set")
    will_flag = bool(flags & 0x04)
    will_qos = (flags >> 3) & 0x03
    will_retain = bool(flags & 0x20)
    if will_qos == 3 or (not will_flag and (will_qos or will_retain)):
        raise MQTTError(Reason.MALFORMED_PACKET, "invalid will flags")
    has_password, has_user = bool(flags & 0x40), bool(flags & 0x80)
    if level != V5 and has_password and not has_user:
        raise MQTTError(Reason.MALFORMED_PACKET, "password flag without user name flag")
    keep_alive, pos = _u16(body, pos, end)
    props = None
    if level == V5:
        props, pos = decode_properties(body, pos, end, _CONNECT_PROPS)
    client_id, pos = decode_utf8(body, pos, end)
    will = None
    if will_flag:
        will_props = None
        if level == V5:
            will_props, pos = decode_properties(body, pos, end, _WILL_PROPS)
        topic, pos = decode_utf8(body, pos, end)
        payload, pos = decode_binary(body, pos, end)
        will = Will(topic, payload, will_qos, will_retain, will_props)
    username = password = None
    if has_user:
        username, pos = decode_utf8(body, pos, end)
    if has_password:
        password, pos = decode_binary(body, pos, end)
    if pos != end:
        raise MQTTError(Reason.MALFORMED_PACKET, "bytes after the CONNECT payload")
    return Connect(
        level,
        client_id,
        bool(flags & 0x02),
        keep_alive,
        username,
        password,
        will,
        props,
        name,
    )


def _decode_publish(flags: int, body: bytes, version: int) -> Publish:
    qos = (flags >> 1) & 0x03
    if qos == 3:
        raise MQTTError(Reason.MALFORMED_PACKET, "PUBLISH with QoS 3")
    dup = bool(flags & 0x08)
    if dup and qos == 0:
        raise MQTTError(Reason.MALFORMED_PACKET, "PUBLISH QoS 0 with DUP set")
    end = len(body)
    topic, pos = decode_utf8(body, 0, end)
    pid = 0
    if qos:
        pid, pos = _packet_id(body, pos, end)
    props = None
    if version == V5:
        props, pos = decode_properties(body, pos, end, _PUBLISH_PROPS)
    return Publish(topic, body[pos:], qos, bool(flags & 0x01), dup, pid, props)


def _decode_id_ack(kind: int, body: bytes, version: int) -> Packet:
    end = len(body)
    pid, pos = _packet_id(body, 0, end)
    reason, props = 0, None
    if version == V5:
        if pos < end:
            reason = body[pos]
            pos += 1
        if pos < end:
            props, pos = decode_properties(body, pos, end, _ACK_PROPS)
    if pos != end:
        raise MQTTError(Reason.MALFORMED_PACKET, "bytes after an acknowledgement")
    if kind == PacketType.PUBACK:
        return PubAck(pid, reason, props)
    if kind == PacketType.PUBREC:
        return PubRec(pid, reason, props)
    if kind == PacketType.PUBREL:
        return PubRel(pid, reason, props)
    return PubComp(pid, reason, props)


def _decode_subscribe(body: bytes, version: int) -> Subscribe:
    end = len(body)
    pid, pos = _packet_id(body, 0, end)
    props = None
    if version == V5:
        props, pos = decode_properties(body, pos, end, _SUBSCRIBE_PROPS)
        if len(props.subscription_identifiers) > 1:
            raise MQTTError(Reason.PROTOCOL_ERROR, "several subscription identifiers")
        if 0 in props.subscription_identifiers:
            raise MQTTError(Reason.PROTOCOL_ERROR, "subscription identifier 0")
    subs: list[Subscription] = []
    while pos < end:
        topic_filter, pos = decode_utf8(body, pos, end)
        if pos >= end:
            raise MQTTError(Reason.MALFORMED_PACKET, "SUBSCRIBE filter without options")
        opts = body[pos]
        pos += 1
        qos = opts & 0x03
        if qos == 3:
            raise MQTTError(Reason.MALFORMED_PACKET, "subscription QoS 3")
        if version == V5:
            if opts & 0xC0:
                raise MQTTError(Reason.MALFORMED_PACKET, "subscription options reserved bits")
            rh = (opts >> 4) & 0x03
            if rh == 3:
                raise MQTTError(Reason.PROTOCOL_ERROR, "retain handling 3")
            subs.append(Subscription(topic_filter, qos, bool(opts & 0x04), bool(opts & 0x08), rh))
        else:
            if opts & 0xFC:
                raise MQTTError(Reason.MALFORMED_PACKET, "SUBSCRIBE options reserved bits")
            subs.append(Subscription(topic_filter, qos))
    if not subs:
        raise MQTTError(Reason.PROTOCOL_ERROR, "SUBSCRIBE without topic filters")
    return Subscribe(pid, subs, props)


def _decode_unsubscribe(body: bytes, version: int) -> Unsubscribe:
    end = len(body)
    pid, pos = _packet_id(body, 0, end)
    props = None
    if version == V5:
        props, pos = decode_properties(body, pos, end, _UNSUBSCRIBE_PROPS)
    filters: list[str] = []
    while pos < end:
        f, pos = decode_utf8(body, pos, end)
        filters.append(f)
    if not filters:
        raise MQTTError(Reason.PROTOCOL_ERROR, "UNSUBSCRIBE without topic filters")
    return Unsubscribe(pid, filters, props)


def _decode_disconnect(body: bytes, version: int) -> Disconnect:
    end = len(body)
    if version != V5:
        if end:
            raise MQTTError(Reason.MALFORMED_PACKET, "DISCONNECT with a body")
        return Disconnect()
    reason = body[0] if end else 0
    props = decode_properties(body, 1, end, _DISCONNECT_PROPS)[0] if end > 1 else None
    return Disconnect(reason, props)


def _decode_connack(body: bytes, version: int) -> ConnAck:
    end = len(body)
    if end < 2:
        raise MQTTError(Reason.MALFORMED_PACKET, "truncated CONNACK")
    props = decode_properties(body, 2, end, _CONNACK_PROPS)[0] if version == V5 else None
    return ConnAck(body[1], bool(body[0] & 0x01), props)


def _decode_suback(kind: int, body: bytes, version: int) -> Packet:
    end = len(body)
    pid, pos = _packet_id(body, 0, end)
    props = None
    if version == V5:
        props, pos = decode_properties(body, pos, end, _ACK_PROPS)
    codes = list(body[pos:])
    if kind == PacketType.SUBACK:
        return SubAck(pid, codes, props)
    return UnsubAck(pid, codes, props)


# ---------------------------------------------------------------------- encoding
def _packet(first: int, body: bytes) -> bytes:
    if len(body) > MAX_REMAINING_LENGTH:
        raise ValueError("packet body over the MQTT maximum")
    return bytes((first,)) + encode_varint(len(body)) + body


def _props(version: int, props: Properties | None) -> bytes:
    return encode_properties(props) if version == V5 else b""


_ACK_KINDS: Final[dict[type, int]] = {PubAck: 4, PubRec: 5, PubRel: 6, PubComp: 7}


def encode(packet: Packet, version: int) -> bytes:
    """The bytes of `packet` at protocol level `version` (5.0 properties only for V5)."""
    match packet:
        case Publish():
            first = 0x30 | (packet.dup << 3) | (packet.qos << 1) | packet.retain
            body = encode_utf8(packet.topic)
            if packet.qos:
                body += _U16.pack(packet.packet_id)
            return _packet(first, body + _props(version, packet.properties) + packet.payload)
        case PubAck() | PubRec() | PubRel() | PubComp():
            kind = _ACK_KINDS[type(packet)]
            first = (kind << 4) | (0b0010 if kind == 6 else 0)
            body = _U16.pack(packet.packet_id)
            if version == V5 and (packet.reason_code or packet.properties is not None):
                body += bytes((packet.reason_code,))
                if packet.properties is not None:
                    body += encode_properties(packet.properties)
            return _packet(first, body)
        case ConnAck():
            body = bytes((int(packet.session_present), packet.reason_code))
            return _packet(0x20, body + _props(version, packet.properties))
        case SubAck() | UnsubAck():
            first = 0x90 if isinstance(packet, SubAck) else 0xB0
            body = _U16.pack(packet.packet_id) + _props(version, packet.properties)
            if version == V5 or isinstance(packet, SubAck):
                body += bytes(packet.reason_codes)
            return _packet(first, body)
        case PingReq():
            return b"\xc0\x00"
        case PingResp():
            return b"\xd0\x00"
        case Disconnect():
            if version != V5 or (not packet.reason_code and packet.properties is None):
                return b"\xe0\x00"
            body = bytes((packet.reason_code,))
            if packet.properties is not None:
                body += encode_properties(packet.properties)
            return _packet(0xE0, body)
        case Auth():
            body = bytes((packet.reason_code,)) + encode_properties(packet.properties)
            return _packet(0xF0, body)
        case Connect():
            return _encode_connect(packet)
        case Subscribe():
            body = _U16.pack(packet.packet_id) + _props(version, packet.properties)
            for s in packet.subscriptions:
                opts = s.qos
                if version == V5:
                    opts |= (
                        (s.no_local << 2) | (s.retain_as_published << 3) | (s.retain_handling << 4)
                    )
                body += encode_utf8(s.topic_filter) + bytes((opts,))
            return _packet(0x82, body)
        case Unsubscribe():
            body = _U16.pack(packet.packet_id) + _props(version, packet.properties)
            for f in packet.topic_filters:
                body += encode_utf8(f)
            return _packet(0xA2, body)
    raise TypeError(f"not an MQTT packet: {packet!r}")


def _encode_connect(c: Connect) -> bytes:
    v = c.protocol_level
    flags = (c.clean_start << 1) | ((c.username is not None) << 7) | ((c.password is not None) << 6)
    if c.will is not None:
        flags |= 0x04 | (c.will.qos << 3) | (c.will.retain << 5)
    body = encode_utf8(_PROTOCOL_NAMES.get(v, c.protocol_name)) + bytes((v, flags))
    body += _U16.pack(c.keep_alive) + _props(v, c.properties) + encode_utf8(c.client_id)
    if c.will is not None:
        body += _props(v, c.will.properties)
        body += encode_utf8(c.will.topic) + encode_binary(c.will.payload)
    if c.username is not None:
        body += encode_utf8(c.username)
    if c.password is not None:
        body += encode_binary(c.password)
    return _packet(0x10, body)
