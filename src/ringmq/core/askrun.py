"""Shard 0 makes the definition step another shard's client asked for (core/asks.py).

Theory of operation: the request names a client step (`DefinitionRequest.op`) and its fields;
`run_request` makes it with the same owner step a client of shard 0 would call, on the
session of the link from the asking shard (whose grant allows everything: the asking shard
checked its client's permissions, with the same users and permissions, before it asked).
So every rule that needs the one place is shard 0's: equivalence with what exists,
exclusivity, limits, and placement: for the step's duration `State.connection_shard` is the
asking shard, so a client-local queue is placed there (made on that shard from the feed,
copied here). A refusal is the step's `BrokerError`, answered to the asking shard. Pure: no
I/O, no clock.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ringmq.core.asks import DefinitionRequest

if TYPE_CHECKING:
    from ringmq.core.exchanges import Exchanges
    from ringmq.core.session import Session
    from ringmq.core.topology import Topology

__all__ = ["run_request"]


def run_request(
    topology: Topology,
    exchanges: Exchanges,
    s: Session,
    request: DefinitionRequest,
    origin: int,
    now_ms: int,
) -> None:
    """Make `request` of shard `origin`'s client on session `s` (module docstring); raises
    the step's `BrokerError` when shard 0 refuses it (KeyError for a request without its
    fields, ValueError for an unknown step)."""
    state = topology.state
    f: dict[str, Any] = dict(request.fields)
    state.connection_shard = origin
    try:
        match request.op:
            case "queue.declare":
                topology.declare_queue(
                    s,
                    str(f["name"]),
                    durable=bool(f["durable"]),
                    exclusive=False,
                    auto_delete=bool(f["auto_delete"]),
                    arguments=f["arguments"],
                    now_ms=now_ms,
                )
            case "queue.delete":
                name, _count = topology.delete_for(
                    s, str(f["queue"]), if_unused=bool(f["if_unused"]), if_empty=bool(f["if_empty"])
                )
                if name:
                    topology.delete_named(s, name, now_ms)
            case "queue.bind" | "queue.unbind":
                step = topology.bind_queue if request.op == "queue.bind" else topology.unbind_queue
                step(s, str(f["queue"]), str(f["exchange"]), str(f["routing_key"]), f["arguments"])
            case "exchange.declare":
                exchanges.declare_exchange(
                    s.vhost,
                    str(f["name"]),
                    str(f["type"]),
                    durable=bool(f["durable"]),
                    auto_delete=bool(f["auto_delete"]),
                    internal=bool(f["internal"]),
                    arguments=f["arguments"],
                    grant=s,
                )
            case "exchange.delete":
                exchanges.delete_exchange(
                    s.vhost, str(f["name"]), if_unused=bool(f["if_unused"]), grant=s
                )
            case "exchange.bind" | "exchange.unbind":
                op = (
                    exchanges.bind_exchange
                    if request.op == "exchange.bind"
                    else exchanges.unbind_exchange
                )
                op(
                    s.vhost,
                    str(f["source"]),
                    str(f["destination"]),
                    str(f["routing_key"]),
                    f["arguments"],
                    grant=s,
                )
            case _:
                raise ValueError(f"no such definition step: {request.op!r}")
    finally:
        state.connection_shard = 0
