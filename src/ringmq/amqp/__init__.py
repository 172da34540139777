"""ringmq.amqp: the AMQP 0-9-1 wire codec (spec methods, frames, field tables, properties).

Pure and synchronous: bytes in, values out. See ``frames`` for the reader and encoders,
``spec`` (generated) for the methods, ``tables`` and ``properties`` for the value codecs.

The names below are loaded on first use (PEP 562): importing one value codec (``properties``,
as the Spark connector's worker and source runner do) does not build the generated ``spec``
(about 70 ms of every such process's start).
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ringmq.amqp.frames import FrameReader, RawContent
    from ringmq.amqp.properties import BasicProperties, decode_properties, encode_properties
    from ringmq.amqp.reply_codes import AMQPError, ReplyCode
    from ringmq.amqp.spec import METHODS, Method, decode_method
    from ringmq.amqp.tables import decode_table, encode_table

_HOME = {
    "FrameReader": "frames",
    "RawContent": "frames",
    "BasicProperties": "properties",
    "decode_properties": "properties",
    "encode_properties": "properties",
    "AMQPError": "reply_codes",
    "ReplyCode": "reply_codes",
    "METHODS": "spec",
    "Method": "spec",
    "decode_method": "spec",
    "decode_table": "tables",
    "encode_table": "tables",
}


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"{__name__}.{home}"), name)


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
