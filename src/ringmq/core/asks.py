"""Definition changes a shard asks shard 0 to make (docs/dev/shards.md, metadata step 3).

Theory of operation
-------------------
On a shard that follows shard 0's definitions (`Broker.defer_definitions`: `State.asks` is
set), a client's step that would change a definition does not change it here. The owner of
the step makes every check it makes before it mutates (permissions, arguments, equivalence
with what exists, exclusivity) and then, instead of the change, calls `State.elsewhere`, which
raises `DefinitionElsewhere` with a `DefinitionRequest`: nothing has changed. The adapter parks
the client's command, and every later one of its connection, and asks
(`Broker.ask_definition`): the request is noted under an id (`Asks`), the server drains it
(`drain_definition_asks`) and sends it on the link to shard 0, which makes the change with the
same step (`Broker.run_definition_request`: shard 0's rules and placement) and answers with
the feed sequence of the change. Once this shard has applied its feed up to that sequence,
the server calls `definition_answered(rid, None)` (or with shard 0's refusal), and the core
answers the parked command with a `DefinitionAnswered` effect. The adapter then runs the
command again: it is local now (the queue or exchange exists and is equivalent, the binding
is there), so it answers as it always does; or it answers shard 0's refusal.

What stays local (no request): every step that changes nothing (an equivalent redeclare, a
bind that exists), an exclusive, auto-delete or server-named queue and what binds to it or
deletes it (its connection is here; shard 0 does not know it yet: a gap, docs/dev/shards.md),
and the management API's and the configuration's declarations.

Requests are plain values (`op`, the vhost, the step's fields as given: arguments as AMQP
field values); the shard link carries them as JSON (`ringmq.shardlink.codec`). Owns the asks
waiting for their answers. Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from ringmq.core.effects import DefinitionAnswered
from ringmq.core.errors import Condition

if TYPE_CHECKING:
    from ringmq.core.entities import QueueEntity

__all__ = [
    "OPS",
    "Asks",
    "DefinitionElsewhere",
    "DefinitionRequest",
    "stays_local",
]

OPS: Final = frozenset(
    {
        "queue.declare",
        "queue.delete",
        "queue.bind",
        "queue.unbind",
        "exchange.declare",
        "exchange.delete",
        "exchange.bind",
        "exchange.unbind",
    }
)
"""The steps a shard asks shard 0 to make."""


@dataclass(frozen=True, slots=True)
class DefinitionRequest:
    """One client step to make on shard 0: `op` (one of `OPS`) in `vhost` with its fields."""

    op: str
    vhost: str
    fields: Mapping[str, Any] = field(default_factory=dict)


class DefinitionElsewhere(Exception):  # noqa: N818 (a signal to the adapter, not an error)
    """The step checked and did not change anything: shard 0 makes it (`request`)."""

    def __init__(self, request: DefinitionRequest) -> None:
        super().__init__(f"{request.op} in vhost {request.vhost!r} is made on shard 0")
        self.request = request


def stays_local(q: QueueEntity) -> bool:
    """Steps on `q` are this shard's alone (module docstring): an exclusive, auto-delete or
    server-named queue of this shard."""
    return q.owner is None and (
        q.exclusive_owner is not None or q.auto_delete or q.name.startswith("amq.gen-")
    )


@dataclass(slots=True)
class _Ask:
    conn_id: int
    channel: int
    request: DefinitionRequest


class Asks:
    """The requests of this shard's parked commands (see the module docstring)."""

    def __init__(self) -> None:
        self._next = 1
        self._waiting: dict[int, _Ask] = {}
        self._new: list[tuple[int, DefinitionRequest]] = []

    def ask(self, conn_id: int, channel: int, request: DefinitionRequest) -> int:
        """Note `request` for the command parked on `conn_id`'s `channel`; its id."""
        if request.op not in OPS:
            raise ValueError(f"no such definition step: {request.op!r}")
        rid = self._next
        self._next += 1
        self._waiting[rid] = _Ask(conn_id, channel, request)
        self._new.append((rid, request))
        return rid

    def drain(self) -> list[tuple[int, DefinitionRequest]]:
        """The requests noted since the last drain, in order, to send to shard 0."""
        out = self._new
        self._new = []
        return out

    def answered(
        self, rid: int, condition: Condition | None, text: str = ""
    ) -> DefinitionAnswered | None:
        """Shard 0's answer to `rid` (None: made, and applied here): the parked command's
        effect (None when its connection is gone)."""
        ask = self._waiting.pop(rid, None)
        if ask is None:
            return None
        return DefinitionAnswered(ask.conn_id, ask.channel, rid, condition, text)

    def forget(self, conn_id: int) -> None:
        """`conn_id` closed: its answers go nowhere (what shard 0 makes stays made)."""
        for rid in [r for r, a in self._waiting.items() if a.conn_id == conn_id]:
            del self._waiting[rid]
