"""AMQP 0-9-1 framing: a sans-IO frame reader and the frame encoders.

Theory of operation
-------------------
``FrameReader`` owns the received-but-unparsed bytes as one immutable ``bytes`` object and a
read position. ``feed(data)`` replaces the buffer with the new read when the last batch consumed
everything (the common case: no copy at all), else with the unconsumed rest joined to it; a
frame that spans several reads is collected in a list and joined once, when it can be whole, so
a slowly trickling frame costs linear, not quadratic, copying. Because the buffer is ``bytes``,
every field cut out of it (body, properties, method arguments) is one slice, one copy.
``next_frame()`` parses one frame at the read position and returns it, or ``None`` when the
buffer does not yet hold a whole frame ("need more data"). Parsing never raises for incomplete
input, only ``AMQPError`` for a bad one:

* frame payload larger than ``frame_max - 8`` (RabbitMQ's check; 0 means unlimited), a frame-end
  octet other than 0xCE, an unknown frame type, a heartbeat with a payload or on a channel other
  than 0, a content header shorter than 14 bytes -> FRAME_ERROR (501);
* anything ``decode_method`` rejects (501/502/503/540).

When created with ``expect_protocol_header=True`` the first thing returned is a
``ProtocolHeader`` (after 8 bytes arrive); the caller checks ``.valid`` and, per AMQP §4.2.2,
answers a bad header by sending ``PROTOCOL_HEADER`` and closing. Method frames are decoded into
spec dataclasses; content headers keep their property list raw; bodies are copied out as
``bytes``. The module holds no I/O and no clock.

Encoders return ``bytes`` ready for one ``transport.write``. Basic.Deliver, every delivery's
hot path, has its own encoders in ``deliverframes.py``.
"""

from __future__ import annotations

import struct
from collections.abc import Container
from typing import Final, NamedTuple

from ringmq.amqp.reply_codes import AMQPError, ReplyCode
from ringmq.amqp.spec import Method, decode_method

FRAME_METHOD: Final = 1
FRAME_HEADER: Final = 2
FRAME_BODY: Final = 3
FRAME_HEARTBEAT: Final = 8
FRAME_END: Final = 0xCE
FRAME_OVERHEAD: Final = 8
"""Bytes of framing around each payload: 7 header bytes and the frame-end octet."""
FRAME_MIN_SIZE: Final = 4096
"""The smallest frame_max a peer may negotiate; also the limit before tuning (AMQP §4.2.3)."""

PROTOCOL_HEADER: Final = b"AMQP\x00\x00\x09\x01"
HEARTBEAT_FRAME: Final = b"\x08\x00\x00\x00\x00\x00\x00\xce"

FRAME_HEAD: Final = struct.Struct(">BHI")
"""A frame's head: type, channel, payload size."""
CONTENT_HEAD: Final = struct.Struct(">HHQ")
"""A content header's fixed fields: class, weight, body size."""
METHOD_HEAD: Final = struct.Struct(">BHIHH")
"""A method frame's head and method ids: frame type, channel, size, class, method."""
HEADER_HEAD: Final = struct.Struct(">BHIHHQ")
"""A content header frame's head and fixed fields: frame type, channel, size, class, weight,
body size."""
_PUBLISH_CACHE_SIZE: Final = 256
"""Distinct Basic.Publish argument lists remembered per connection (cleared when full)."""
_END: Final = b"\xce"


# Frames are NamedTuples: built once per frame on the hot path, and tuple construction is
# several times cheaper than a frozen dataclass's __init__.


class ProtocolHeader(NamedTuple):
    """The 8-byte protocol header a client sends first."""

    raw: bytes

    @property
    def valid(self) -> bool:
        """True for exactly ``AMQP 0 0 9 1``, the only protocol ringmq speaks."""
        return self.raw == PROTOCOL_HEADER


class MethodFrame(NamedTuple):
    channel: int
    method: Method


class HeaderFrame(NamedTuple):
    """A content header; ``properties_bin`` is flags + property list, undecoded."""

    channel: int
    class_id: int
    body_size: int
    properties_bin: bytes


class BodyFrame(NamedTuple):
    channel: int
    data: bytes


class HeartbeatFrame(NamedTuple):
    channel: int = 0


Frame = ProtocolHeader | MethodFrame | HeaderFrame | BodyFrame | HeartbeatFrame


class RawContent(NamedTuple):
    """A message's content as received: class id, declared size, raw properties and body.

    ``properties_bin`` is re-sent verbatim on Deliver/GetOk/Return; decode it with
    ``ringmq.amqp.properties.decode_properties`` only when a property is needed.
    """

    class_id: int
    body_size: int
    properties_bin: bytes
    body: bytes


# `RawContent(...)` goes through the named tuple's Python-level __new__; `next_publish` (once
# per publish) builds it with tuple.__new__ directly, about twice as fast, the same tuple.
_new_tuple: Final = tuple.__new__


class FrameReader:
    """Incremental frame parser over a growing buffer (see the module docstring).

    Args:
        frame_max: largest whole frame accepted (header + payload + end), 0 for no limit.
            Raise it after Tune-Ok by assigning ``frame_max``.
        expect_protocol_header: return a ``ProtocolHeader`` before any frame.
    """

    __slots__ = (
        "_buf",
        "_need",
        "_parts",
        "_parts_len",
        "_pos",
        "_publishes",
        "_want_header",
        "frame_max",
    )

    def __init__(self, frame_max: int = FRAME_MIN_SIZE, *, expect_protocol_header: bool = False):
        self.frame_max = frame_max
        self._buf = b""
        self._pos = 0
        # A frame spanning reads: the pieces so far (its start first), their length, and the
        # length at which the frame is whole; `_buf` is empty meanwhile.
        self._parts: list[bytes] = []
        self._parts_len = 0
        self._need = 0
        self._want_header = expect_protocol_header
        # Basic.Publish arguments (exchange, routing key, flags) as received -> the decoded,
        # immutable method. A publisher repeats the same few, so decoding is one dict lookup.
        self._publishes: dict[bytes, Method] = {}

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        """Append received bytes (see the module docstring)."""
        if type(data) is not bytes:
            data = bytes(data)
        parts = self._parts
        if parts:  # collecting a frame that spans reads
            parts.append(data)
            self._parts_len += len(data)
            if self._parts_len >= self._need:
                self._buf = b"".join(parts)
                self._pos = 0
                self._parts = []
            return
        buf = self._buf
        pos = self._pos
        if pos < len(buf):
            rest = buf[pos:]
            need = self._frame_need(rest)
            if len(rest) + len(data) < need:
                self._parts = [rest, data]
                self._parts_len = len(rest) + len(data)
                self._need = need
                self._buf = b""
                self._pos = 0
                return
            data = rest + data
        self._buf = data
        self._pos = 0

    def _frame_need(self, rest: bytes) -> int:
        # Bytes the frame starting `rest` needs to be whole; 0 when parsing can go on (or must
        # fail) with what is there: too short to say, or a size that next_frame() refuses.
        if self._want_header or len(rest) < 7:
            return 0
        size = int.from_bytes(rest[3:7], "big")
        if self.frame_max and size > self.frame_max - FRAME_OVERHEAD:
            return 0
        return size + FRAME_OVERHEAD

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as frames."""
        return len(self._buf) - self._pos + (self._parts_len if self._parts else 0)

    def next_publish(self) -> tuple[int, Method, RawContent] | None:
        """Take a whole Basic.Publish command at once, or return ``None`` and take nothing.

        The hot path for publishers: when the buffer holds, at the read position, a well-formed
        Basic.Publish method frame, its basic-class content header and (unless the declared
        size is 0) exactly one body frame of the declared size, all on one channel and within
        ``frame_max``, this returns ``(channel, BasicPublish, RawContent)`` and consumes the
        three frames. Anything else (another frame, a fragmented body, incomplete input, any
        malformation) returns ``None`` without consuming, so ``next_frame()`` then parses and
        reports it exactly as usual. Channel state is the caller's to check. Never raises.
        """
        buf = self._buf
        pos = self._pos
        n = len(buf)
        if n - pos < 30 or self._want_header:
            return None
        ftype, channel, size, class_id, method_id = METHOD_HEAD.unpack_from(buf, pos)
        if ftype != FRAME_METHOD or class_id != 60 or method_id != 40:
            return None
        hpos = pos + 8 + size  # the content header frame
        if hpos + 19 > n or buf[hpos - 1] != FRAME_END:
            return None
        htype, hchannel, hsize, hclass, _weight, body_size = HEADER_HEAD.unpack_from(buf, hpos)
        hend = hpos + 7 + hsize
        if (
            htype != FRAME_HEADER
            or hchannel != channel
            or hclass != 60
            or hsize < 14
            or hend >= n
            or buf[hend] != FRAME_END
        ):
            return None
        limit = self.frame_max - FRAME_OVERHEAD if self.frame_max else -1
        if limit >= 0 and (size > limit or hsize > limit):
            return None
        end = hend
        if body_size:
            bpos = hend + 1
            if bpos + 7 > n:
                return None
            btype, bchannel, bsize = FRAME_HEAD.unpack_from(buf, bpos)
            end = bpos + 7 + bsize
            if (
                btype != FRAME_BODY
                or bchannel != channel
                or bsize != body_size
                or (limit >= 0 and bsize > limit)
                or end >= n
                or buf[end] != FRAME_END
            ):
                return None
            body = buf[bpos + 7 : end]
        else:
            body = b""
        method = self._publishes.get(buf[pos + 11 : hpos - 1])  # the cache hit, in front
        if method is None:
            method = self._publish_method(buf, pos, hpos)
            if method is None:
                return None
        self._pos = end + 1
        props = buf[hpos + 19 : hend]
        return channel, method, _new_tuple(RawContent, (60, body_size, props, body))

    def _publish_method(self, buf: bytes, pos: int, hpos: int) -> Method | None:
        # The Basic.Publish of the method frame at `pos` (its frame end at `hpos - 1`), from
        # the cache of argument lists seen; None when it does not decode (`next_frame`
        # reports it).
        args = buf[pos + 11 : hpos - 1]
        method = self._publishes.get(args)
        if method is None:
            try:
                method = decode_method(buf[pos + 7 : hpos - 1])
            except AMQPError:
                return None
            if len(self._publishes) >= _PUBLISH_CACHE_SIZE:
                self._publishes.clear()
            self._publishes[args] = method
        return method

    def next_publish_run(
        self, channels: Container[int], max_body: int
    ) -> tuple[int, Method, list[bytes], list[bytes]] | None:
        """Take a run of at least two whole Basic.Publish commands at once, as columns, or
        return ``None`` and take nothing.

        The run is the longest sequence at the read position of publishes that
        ``next_publish`` would take one by one, all on one channel of ``channels``, with the
        same method arguments (exchange, routing key, flags: byte for byte) and a body of at
        most ``max_body`` bytes (0: no limit). Returns ``(channel, BasicPublish, property
        lists, bodies)`` and consumes the run; anything else is left to ``next_publish`` and
        ``next_frame`` (one pass over the buffer, no ``RawContent`` per publish). Never raises.
        """
        buf = self._buf
        pos = self._pos
        n = len(buf)
        if n - pos < 60 or self._want_header:
            return None
        ftype, channel, size, class_id, method_id = METHOD_HEAD.unpack_from(buf, pos)
        if ftype != FRAME_METHOD or class_id != 60 or method_id != 40 or channel not in channels:
            return None
        limit = self.frame_max - FRAME_OVERHEAD if self.frame_max else -1
        if limit >= 0 and size > limit:
            return None
        hpos = pos + 8 + size  # the first content header
        if hpos + 19 > n or buf[hpos - 1] != FRAME_END:
            return None
        # Every publish of the run has this method frame, byte for byte (type, channel, size,
        # class and method, arguments, frame end): one comparison each.
        frame = buf[pos:hpos]
        header_at = HEADER_HEAD.unpack_from
        body_head_at = FRAME_HEAD.unpack_from
        props: list[bytes] = []
        bodies: list[bytes] = []
        p = pos
        while True:
            # One publish at `p`, checked as `next_publish` checks it (any doubt: stop here).
            # The checks are repeated here rather than shared as a function: a call per
            # publish in `next_publish` measured +1.8 % instructions a message on
            # `benchmarks/hotpath_bench.py` (callgrind); `tests/unit/amqp/
            # test_publish_run_reader.py` holds the two to the same answers.
            hpos = p + 8 + size
            if hpos + 19 > n or not buf.startswith(frame, p):
                break
            htype, hchannel, hsize, hclass, _weight, body_size = header_at(buf, hpos)
            hend = hpos + 7 + hsize
            if (
                htype != FRAME_HEADER
                or hchannel != channel
                or hclass != 60
                or hsize < 14
                or hend >= n
                or buf[hend] != FRAME_END
                or (limit >= 0 and hsize > limit)
                or (max_body and body_size > max_body)
            ):
                break
            end = hend
            if body_size:
                bpos = hend + 1
                if bpos + 7 > n:
                    break
                btype, bchannel, bsize = body_head_at(buf, bpos)
                end = bpos + 7 + bsize
                if (
                    btype != FRAME_BODY
                    or bchannel != channel
                    or bsize != body_size
                    or (limit >= 0 and bsize > limit)
                    or end >= n
                    or buf[end] != FRAME_END
                ):
                    break
                bodies.append(buf[bpos + 7 : end])
            else:
                bodies.append(b"")
            props.append(buf[hpos + 19 : hend])
            p = end + 1
        if len(bodies) < 2:
            return None
        method = self._publish_method(buf, pos, pos + len(frame))
        if method is None:
            return None
        self._pos = p
        return channel, method, props, bodies

    def next_frame(self) -> Frame | None:
        """Parse and return the next frame, or ``None`` if more data is needed.

        Raises:
            AMQPError: the bytes are not a valid frame (see the module docstring). The reader is
                then unusable; the connection must close.
        """
        buf = self._buf
        pos = self._pos
        avail = len(buf) - pos
        if self._want_header:
            if avail < 8:
                return None
            self._want_header = False
            self._pos = pos + 8
            return ProtocolHeader(buf[pos : pos + 8])
        if avail < 7:
            return None
        ftype, channel, size = FRAME_HEAD.unpack_from(buf, pos)
        if self.frame_max and size > self.frame_max - FRAME_OVERHEAD:
            raise AMQPError(
                ReplyCode.FRAME_ERROR,
                f"frame of {size + FRAME_OVERHEAD} bytes exceeds frame_max {self.frame_max}",
            )
        end = pos + 7 + size
        if end >= len(buf):
            return None
        if buf[end] != FRAME_END:
            raise AMQPError(
                ReplyCode.FRAME_ERROR, f"bad frame end octet 0x{buf[end]:02x} (expected 0xce)"
            )
        self._pos = end + 1
        start = pos + 7
        if ftype == FRAME_METHOD:
            return MethodFrame(channel, decode_method(buf[start:end]))
        if ftype == FRAME_BODY:
            return BodyFrame(channel, buf[start:end])
        if ftype == FRAME_HEADER:
            if size < 14:
                raise AMQPError(
                    ReplyCode.FRAME_ERROR, f"content header frame too short ({size} bytes)"
                )
            class_id, _weight, body_size = CONTENT_HEAD.unpack_from(buf, start)
            return HeaderFrame(channel, class_id, body_size, buf[start + 12 : end])
        if ftype == FRAME_HEARTBEAT:
            if channel != 0 or size != 0:
                raise AMQPError(
                    ReplyCode.FRAME_ERROR,
                    "heartbeat frames must be empty and on channel 0",
                )
            return HeartbeatFrame(channel)
        raise AMQPError(ReplyCode.FRAME_ERROR, f"unknown frame type {ftype}")


# ----------------------------------------------------------------------------------- encoders


def encode_frame(frame_type: int, channel: int, payload: bytes) -> bytes:
    """One frame around ``payload``."""
    return FRAME_HEAD.pack(frame_type, channel, len(payload)) + payload + _END


def encode_method_frame(channel: int, method: Method) -> bytes:
    """A method frame for ``method`` on ``channel``."""
    payload = method.encode()
    return b"".join((FRAME_HEAD.pack(FRAME_METHOD, channel, len(payload)), payload, _END))


def encode_content_frames(
    channel: int,
    method: Method,
    properties_bin: bytes,
    body: bytes,
    frame_max: int,
    class_id: int = 60,
) -> bytes:
    """Method frame, content header and body frames (split to fit ``frame_max``), joined.

    Args:
        channel: channel number.
        method: a content-bearing method (BasicDeliver, BasicGetOk, BasicReturn, BasicPublish).
        properties_bin: encoded flags + property list (``properties.encode_properties``).
        body: the message body; zero body frames are sent when it is empty.
        frame_max: negotiated frame_max (0: unlimited).
        class_id: content class, always 60 (basic) in 0-9-1.
    """
    payload = method.encode()
    parts = [
        FRAME_HEAD.pack(FRAME_METHOD, channel, len(payload)),
        payload,
        _END,
        FRAME_HEAD.pack(FRAME_HEADER, channel, 12 + len(properties_bin)),
        CONTENT_HEAD.pack(class_id, 0, len(body)),
        properties_bin,
        _END,
    ]
    append_body(parts, channel, body, frame_max)
    return b"".join(parts)


def append_body(parts: list[bytes], channel: int, body: bytes, frame_max: int) -> None:
    """Append `body`'s body frames (split at `frame_max`; 0: one frame) to `parts`."""
    size = len(body)
    chunk = frame_max - FRAME_OVERHEAD if frame_max else size
    if frame_max and chunk <= 0:
        raise ValueError(f"frame_max {frame_max} leaves no room for a body frame payload")
    if size <= chunk:
        if size:
            parts += (FRAME_HEAD.pack(FRAME_BODY, channel, size), body, _END)
        return
    view = memoryview(body)
    for off in range(0, size, chunk):
        piece = view[off : off + chunk]
        parts += (FRAME_HEAD.pack(FRAME_BODY, channel, len(piece)), piece.tobytes(), _END)


__all__ = [
    "CONTENT_HEAD",
    "FRAME_BODY",
    "FRAME_END",
    "FRAME_HEAD",
    "FRAME_HEADER",
    "FRAME_HEARTBEAT",
    "FRAME_METHOD",
    "FRAME_MIN_SIZE",
    "FRAME_OVERHEAD",
    "HEADER_HEAD",
    "HEARTBEAT_FRAME",
    "METHOD_HEAD",
    "PROTOCOL_HEADER",
    "BodyFrame",
    "Frame",
    "FrameReader",
    "HeaderFrame",
    "HeartbeatFrame",
    "MethodFrame",
    "ProtocolHeader",
    "RawContent",
    "append_body",
    "encode_content_frames",
    "encode_frame",
    "encode_method_frame",
]
