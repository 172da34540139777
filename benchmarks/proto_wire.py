"""The few MQTT 3.1.1 and STOMP 1.2 frames the protocol load generators need, hand-encoded.

Theory of operation: the load generator must cost the same against every broker and as little
as possible, so it pre-encodes what it sends and parses only what it counts. MQTT: CONNECT,
SUBSCRIBE, PUBLISH (QoS 0 and 1), PUBACK, DISCONNECT, and a reader that splits packets by the
fixed header (type nibble, remaining-length varint) without decoding topics or payloads.
STOMP 1.2: CONNECT, SUBSCRIBE, SEND (with `content-length`), ACK, DISCONNECT, and a reader
that finds each frame's end from its `content-length` (or the NUL) and reads only the header
asked for. Checked against paho-mqtt and stomp.py's own encodings in tests/unit/bench/.
"""

from __future__ import annotations

import struct
from typing import Final

# -- MQTT 3.1.1 ------------------------------------------------------------------------------

CONNACK: Final = 2
PUBLISH: Final = 3
PUBACK: Final = 4
SUBACK: Final = 9
PINGRESP: Final = 13


def varint(n: int) -> bytes:
    """MQTT's remaining length: 7 bits a byte, low first, high bit set on all but the last."""
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _string(s: str | bytes) -> bytes:
    raw = s.encode() if isinstance(s, str) else s
    return struct.pack(">H", len(raw)) + raw


def _packet(first: int, body: bytes) -> bytes:
    return bytes([first]) + varint(len(body)) + body


def mqtt_connect(
    client_id: str,
    *,
    username: str | None = None,
    password: str | None = None,
    clean: bool = True,
    keepalive_s: int = 0,
) -> bytes:
    flags = (0x02 if clean else 0) | (0x80 if username is not None else 0)
    flags |= 0x40 if password is not None else 0
    body = _string("MQTT") + bytes([4, flags]) + struct.pack(">H", keepalive_s)
    body += _string(client_id)
    if username is not None:
        body += _string(username)
    if password is not None:
        body += _string(password)
    return _packet(0x10, body)


def mqtt_subscribe(packet_id: int, topic_filter: str, qos: int) -> bytes:
    return _packet(0x82, struct.pack(">H", packet_id) + _string(topic_filter) + bytes([qos]))


def mqtt_publish(topic: str, payload: bytes, qos: int = 0, packet_id: int = 0) -> bytes:
    body = _string(topic)
    if qos:
        body += struct.pack(">H", packet_id)
    return _packet(0x30 | (qos << 1), body + payload)


def mqtt_publish_parts(topic: str, payload: bytes, qos: int) -> tuple[bytes, bytes]:
    """A QoS 1 PUBLISH split around its packet id: `head + pack(">H", id) + tail`."""
    whole = mqtt_publish(topic, payload, qos, 0)
    cut = len(whole) - len(payload) - 2
    return whole[:cut], whole[cut + 2 :]


def mqtt_puback(packet_id: int) -> bytes:
    return b"\x40\x02" + struct.pack(">H", packet_id)


MQTT_DISCONNECT: Final = b"\xe0\x00"


class MqttReader:
    """Splits MQTT packets out of a byte stream: `(type, flags, body)` without decoding."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[tuple[int, int, bytes]]:
        buf = self._buf
        buf += data
        out = []
        pos = 0
        n = len(buf)
        while n - pos >= 2:
            length = 0
            shift = 0
            i = pos + 1
            complete = False
            while i < n and i - pos <= 4:
                b = buf[i]
                i += 1
                length |= (b & 0x7F) << shift
                shift += 7
                if not b & 0x80:
                    complete = True
                    break
            if not complete or n - i < length:
                break
            first = buf[pos]
            out.append((first >> 4, first & 0x0F, bytes(buf[i : i + length])))
            pos = i + length
        del buf[:pos]
        return out


def publish_packet_id(flags: int, body: bytes) -> int:
    """The packet id of a received QoS 1/2 PUBLISH (0 for QoS 0)."""
    if not flags & 0x06:
        return 0
    topic_len = (body[0] << 8) | body[1]
    return int((body[2 + topic_len] << 8) | body[3 + topic_len])


# -- STOMP 1.2 -------------------------------------------------------------------------------


def stomp_frame(command: str, headers: dict[str, str], body: bytes = b"") -> bytes:
    head = command + "\n" + "".join(f"{k}:{v}\n" for k, v in headers.items())
    return head.encode() + b"\n" + body + b"\x00"


def stomp_connect(host: str, login: str, passcode: str) -> bytes:
    return stomp_frame(
        "CONNECT",
        {"accept-version": "1.2", "host": host, "login": login, "passcode": passcode},
    )


def stomp_send(destination: str, body: bytes, receipt: str | None = None) -> bytes:
    headers = {"destination": destination, "content-length": str(len(body))}
    if receipt is not None:
        headers["receipt"] = receipt
    return stomp_frame("SEND", headers, body)


class StompReader:
    """Splits STOMP frames out of a byte stream: `(command, headers_text, body)`.

    Heart-beat EOLs between frames are skipped; `content-length` is honoured (a body may hold
    NUL bytes); header values are left undecoded (`header()` reads one when needed).
    """

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[tuple[bytes, bytes, bytes]]:
        buf = self._buf
        buf += data
        out = []
        pos = 0
        n = len(buf)
        while pos < n:
            while pos < n and buf[pos] in (0x0A, 0x0D):
                pos += 1
            end_head = buf.find(b"\n\n", pos)
            if end_head < 0:
                break
            head = bytes(buf[pos:end_head])
            cmd_end = head.find(b"\n")
            command = head if cmd_end < 0 else head[:cmd_end]
            headers = b"" if cmd_end < 0 else head[cmd_end + 1 :]
            start = end_head + 2
            clen = header(headers, b"content-length")
            if clen is not None:
                stop = start + int(clen)
                if stop + 1 > n:
                    break
            else:
                stop = buf.find(b"\x00", start)
                if stop < 0:
                    break
            out.append((command.rstrip(b"\r"), headers, bytes(buf[start:stop])))
            pos = stop + 1
        del buf[:pos]
        return out


def header(headers: bytes, name: bytes) -> bytes | None:
    """The first value of header `name` in a frame's header block (None when absent)."""
    key = name + b":"
    if headers.startswith(key):
        i = 0
    else:
        i = headers.find(b"\n" + key)
        if i < 0:
            return None
        i += 1
    j = headers.find(b"\n", i)
    return headers[i + len(key) : j if j >= 0 else len(headers)].rstrip(b"\r")
