"""AMQP 1.0 framing: protocol headers, a sans-IO frame reader and the frame encoder.

Theory of operation
-------------------
A connection starts with an 8-byte protocol header each way (``AMQP 3 1 0 0`` for the SASL
layer, then ``AMQP 0 1 0 0`` for AMQP itself), then frames: ``size`` (4 bytes, the whole frame),
``doff`` (data offset in 4-byte words, at least 2), ``type`` (0 AMQP, 1 SASL), ``channel``
(2 bytes; AMQP frames only), optional extended header bytes, then the body: a performative
followed, for a Transfer, by its payload. A frame of exactly 8 bytes has no body: the empty
frame peers send as heartbeats.

``FrameReader`` owns the received-but-unparsed bytes as one immutable ``bytes`` object and a
read position. ``feed(data)`` takes the new read as the buffer when the last one was used up
(the common case: no copy), else keeps the parts in a list and joins them once they can hold
the frame they wait for (so a frame trickling in costs linear, not quadratic, copying).
``next_frame()`` returns a `ProtocolHeader` when one is expected (at the start, and again after
``expect_header()``: the AMQP header after the SASL outcome), else the next whole `Frame`, or
None when more bytes are needed. It raises `FramingError` (``amqp:connection:framing-error``)
for a frame larger than ``max_frame_size`` (settable: the value this side announced in its
Open; before that `INITIAL_MAX_FRAME_SIZE`), a size below 8 or below its data offset, a data
offset below 2, or an unknown frame type. The body is returned undecoded (``bytes``):
``performatives.decode_performative`` reads it. No I/O, no clock.

``encode_frame`` builds one frame; ``encode_transfer_frames`` splits a message too large for
the peer's max-frame-size over several Transfers (``more`` on all but the last).
"""

from __future__ import annotations

import struct
from typing import Final, NamedTuple

from ringmq.amqp10.composite import Composite
from ringmq.amqp10.performatives import SASL_BODIES, Transfer, encode_transfer

AMQP_HEADER: Final = b"AMQP\x00\x01\x00\x00"
SASL_HEADER: Final = b"AMQP\x03\x01\x00\x00"
TLS_HEADER: Final = b"AMQP\x02\x01\x00\x00"
FRAME_AMQP: Final = 0x00
FRAME_SASL: Final = 0x01
FRAME_HEADER_SIZE: Final = 8
EMPTY_FRAME: Final = b"\x00\x00\x00\x08\x02\x00\x00\x00"
"""An AMQP frame with no body on channel 0: the heartbeat."""
INITIAL_MAX_FRAME_SIZE: Final = 65536
"""The largest frame read before Open's max-frame-size applies. The spec only obliges a peer to
accept 512 bytes then; SASL and Open frames from real clients (long PLAIN responses, Open
properties) may be larger, and a bound is all that matters here."""

_HEAD: Final = struct.Struct(">IBBH")


class FramingError(ValueError):
    """A frame that breaks the framing rules (``amqp:connection:framing-error``)."""


class ProtocolHeader(NamedTuple):
    """The 8-byte protocol header a peer sends first (and again after SASL)."""

    raw: bytes

    @property
    def is_amqp(self) -> bool:
        """``AMQP 0 1 0 0``."""
        return self.raw == AMQP_HEADER

    @property
    def is_sasl(self) -> bool:
        """``AMQP 3 1 0 0``."""
        return self.raw == SASL_HEADER


class Frame(NamedTuple):
    """One frame: its type (`FRAME_AMQP` or `FRAME_SASL`), channel and undecoded body (empty
    for a heartbeat)."""

    type: int
    channel: int
    body: bytes


class FrameReader:
    """Incremental frame parser (see the module docstring).

    Args:
        max_frame_size: the largest whole frame accepted (assign it again after Open).
        expect_header: return a `ProtocolHeader` before the first frame.
    """

    __slots__ = ("_buf", "_need", "_parts", "_parts_len", "_pos", "_want_header", "max_frame_size")

    def __init__(
        self, max_frame_size: int = INITIAL_MAX_FRAME_SIZE, *, expect_header: bool = True
    ) -> None:
        self.max_frame_size = max_frame_size
        self._buf = b""
        self._pos = 0
        self._parts: list[bytes] = []
        self._parts_len = 0
        self._need = FRAME_HEADER_SIZE
        self._want_header = expect_header

    def expect_header(self) -> None:
        """Read a protocol header next (the AMQP header that follows a SASL outcome)."""
        self._want_header = True

    @property
    def buffered(self) -> int:
        """Bytes received and not yet returned in a frame."""
        return len(self._buf) - self._pos + self._parts_len

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        """Append received bytes."""
        if not data:
            return
        if not self._parts:
            if self._pos >= len(self._buf):
                self._buf = bytes(data)
                self._pos = 0
                return
            rest = self._buf[self._pos :]
            self._buf, self._pos = b"", 0
            self._parts = [rest]
            self._parts_len = len(rest)
        chunk = bytes(data)
        self._parts.append(chunk)
        self._parts_len += len(chunk)
        if self._parts_len >= self._need:
            self._buf = b"".join(self._parts)
            self._parts = []
            self._parts_len = 0

    def unread(self) -> tuple[bytes, int] | None:
        """The buffered bytes and the position of the next frame in them, for a reader of
        whole frames in place (`transfers.take`); None while a protocol header is expected
        or received parts wait to be joined. `advance` says how far it read."""
        if self._parts or self._want_header:
            return None
        return self._buf, self._pos

    def advance(self, pos: int) -> None:
        """Whole frames up to `pos` of `unread`'s bytes were read in place."""
        self._pos = pos

    def next_frame(self) -> ProtocolHeader | Frame | None:
        """The next protocol header or frame, None when more bytes are needed.

        Raises:
            FramingError: see the module docstring.
        """
        if self._parts:
            return None
        buf, pos = self._buf, self._pos
        avail = len(buf) - pos
        if avail < FRAME_HEADER_SIZE:
            self._need = FRAME_HEADER_SIZE
            return None
        if self._want_header:
            self._want_header = False
            self._pos = pos + 8
            return ProtocolHeader(buf[pos : pos + 8])
        size, doff, ftype, channel = _HEAD.unpack_from(buf, pos)
        if size > self.max_frame_size:
            raise FramingError(
                f"frame of {size} bytes exceeds max-frame-size {self.max_frame_size}"
            )
        if doff < 2 or size < doff * 4:
            raise FramingError(f"frame size {size} with data offset {doff}")
        if ftype > FRAME_SASL:
            raise FramingError(f"unknown frame type {ftype}")
        if avail < size:
            self._need = size
            return None
        self._pos = pos + size
        self._need = FRAME_HEADER_SIZE
        # tuple.__new__: the NamedTuple's own __new__ is Python code, one call per frame
        return _new_tuple(Frame, (ftype, channel, buf[pos + doff * 4 : pos + size]))


_new_tuple: Final = tuple.__new__


def encode_frame(channel: int, performative: Composite | None, payload: bytes = b"") -> bytes:
    """One frame: ``performative`` (and a Transfer's payload) on ``channel``.

    A SASL performative makes a SASL frame; None makes the empty frame (a heartbeat).
    """
    if performative is None:
        return _HEAD.pack(8, 2, FRAME_AMQP, channel)
    body = performative.encode()
    ftype = FRAME_SASL if isinstance(performative, SASL_BODIES) else FRAME_AMQP
    return _HEAD.pack(8 + len(body) + len(payload), 2, ftype, channel) + body + payload


def encode_body_frame(channel: int, body: bytes, payload: bytes = b"") -> bytes:
    """One AMQP frame around an already encoded performative ``body`` (e.g. `encode_transfer`'s)."""
    return _HEAD.pack(8 + len(body) + len(payload), 2, FRAME_AMQP, channel) + body + payload


def encode_transfer_frames(
    channel: int,
    handle: int,
    delivery_id: int,
    delivery_tag: bytes,
    payload: bytes,
    *,
    settled: bool,
    max_frame_size: int,
    message_format: int = 0,
) -> bytes:
    """The frames of one delivery: one Transfer when it fits ``max_frame_size``, else a first
    Transfer with every field and continuation Transfers (handle and ``more`` only), each as
    full as the limit allows.
    """
    body = encode_transfer(handle, delivery_id, delivery_tag, message_format, settled)
    if 8 + len(body) + len(payload) <= max_frame_size:
        return _HEAD.pack(8 + len(body) + len(payload), 2, FRAME_AMQP, channel) + body + payload
    first = encode_transfer(handle, delivery_id, delivery_tag, message_format, settled, True)
    out: list[bytes] = []
    room = max_frame_size - 8 - len(first)
    if room <= 0:
        raise ValueError(f"max-frame-size {max_frame_size} cannot hold a transfer")
    out.append(encode_body_frame(channel, first, payload[:room]))
    pos = room
    more_body = Transfer(handle, more=True).encode()
    last_body = Transfer(handle).encode()
    room = max_frame_size - 8 - len(more_body)
    while True:  # at least one continuation: the last frame says more=false
        chunk = payload[pos : pos + room]
        pos += len(chunk)
        last = pos >= len(payload)
        out.append(encode_body_frame(channel, last_body if last else more_body, chunk))
        if last:
            return b"".join(out)
