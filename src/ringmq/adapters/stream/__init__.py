"""The stream protocol adapter: RabbitMQ stream clients (`rstream`, `rbfly`) on the core.

`stream_handler` is the `HandlerFactory` of the stream listener (`--stream-port`, registered in
`ringmq.node.PROTOCOL_HANDLERS` under "stream").
"""

from __future__ import annotations

from ringmq.adapters.handler import HandlerContext
from ringmq.adapters.stream.handler import StreamHandler

__all__ = ["StreamHandler", "stream_handler"]


def stream_handler(ctx: HandlerContext) -> StreamHandler:
    """The handler of one accepted stream protocol socket."""
    return StreamHandler(ctx)
