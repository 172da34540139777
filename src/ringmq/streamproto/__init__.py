"""The RabbitMQ stream protocol (port 5552), sans-IO: frames (`codec`) and chunks (`chunk`)."""

from __future__ import annotations

from ringmq.streamproto.chunk import chunk, deliver_frame
from ringmq.streamproto.codec import RESPONSE, Code, FrameReader, Key, ProtocolError, decode

__all__ = [
    "RESPONSE",
    "Code",
    "FrameReader",
    "Key",
    "ProtocolError",
    "chunk",
    "decode",
    "deliver_frame",
]
