"""ringmq.amqp: the AMQP 0-9-1 wire codec (spec methods, frames, field tables, properties).

Pure and synchronous: bytes in, values out. See ``frames`` for the reader and encoders,
``spec`` (generated) for the methods, ``tables`` and ``properties`` for the value codecs.
"""

from __future__ import annotations

from ringmq.amqp.frames import FrameReader, RawContent
from ringmq.amqp.properties import BasicProperties, decode_properties, encode_properties
from ringmq.amqp.reply_codes import AMQPError, ReplyCode
from ringmq.amqp.spec import METHODS, Method, decode_method
from ringmq.amqp.tables import decode_table, encode_table

__all__ = [
    "METHODS",
    "AMQPError",
    "BasicProperties",
    "FrameReader",
    "Method",
    "RawContent",
    "ReplyCode",
    "decode_method",
    "decode_properties",
    "decode_table",
    "encode_properties",
    "encode_table",
]
