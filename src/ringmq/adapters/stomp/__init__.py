"""The STOMP adapter: STOMP 1.0 / 1.1 / 1.2 connections on the protocol-neutral core.

`stomp_handler` is the `HandlerFactory` the server's STOMP listener uses (registered in
`ringmq.node.PROTOCOL_HANDLERS` under "stomp").
"""

from __future__ import annotations

from ringmq.adapters.handler import HandlerContext
from ringmq.adapters.stomp.destinations import ANYCAST, MULTICAST, Destination, Dialects, Kind
from ringmq.adapters.stomp.handler import StompHandler, handler_factory

__all__ = [
    "ANYCAST",
    "MULTICAST",
    "Destination",
    "Dialects",
    "Kind",
    "StompHandler",
    "handler_factory",
    "stomp_handler",
]


def stomp_handler(ctx: HandlerContext) -> StompHandler:
    """The handler of one accepted STOMP socket (default dialects)."""
    return StompHandler(ctx)
