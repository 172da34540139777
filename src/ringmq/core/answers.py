"""The calls that bring asynchronous answers into the core: the store's and other shards'.

Theory of operation: the broker holds some confirms, and some persistent messages, until an
answer comes from outside the loop's call: the group commit's fsync (or its failure), the OS
taking a stream's writes, and, with several shards, the owners of the queues a publish was
forwarded to (core/forwarding.py), and the deliveries of the queues whose consumers are here
(core/remotes.py). The server drains what waits after each batch
(`drain_unconfirmed`, `drain_unwritten`, `drain_forwards`, `drain_remote_ops`) and brings each
answer back as one whole call (`confirm_stored`, `stored`, `unstored`, `fail_unconfirmed`,
`forwards_resolved`, `remote_delivered`, `remote_gone`),
whose effects it applies as any call's. The definitions travel the same way: shard 0's
changes are drained (`drain_definitions`, after `feed_definitions` turned its feed on) and
every other shard applies them as one call (`apply_definitions`; core/deffeed.py,
core/defcopies.py).
A shard that follows shard 0 asks it for the definition steps of its clients
(`defer_definitions`, `ask_definition`, `drain_definition_asks`, `definition_answered`;
shard 0 makes them with `run_definition_request`; core/asks.py, core/askrun.py).
`Answers` is a part of `Broker` (its base class): the owners it calls are the broker's.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from ringmq.core.askrun import run_request
from ringmq.core.asks import Asks, DefinitionRequest
from ringmq.core.defcopies import DefinitionCopies
from ringmq.core.deffeed import DefinitionChange, DefinitionFeed
from ringmq.core.effects import Effect
from ringmq.core.errors import Condition
from ringmq.core.forwarding import ForwardPublish
from ringmq.core.message import Message
from ringmq.core.remotes import RemoteOp
from ringmq.core.topology import cancel_consumers

if TYPE_CHECKING:
    from ringmq.core.call import CallScope
    from ringmq.core.exchanges import Exchanges
    from ringmq.core.forwarding import Forwards
    from ringmq.core.remotes import Remotes
    from ringmq.core.restore import Restore
    from ringmq.core.state import State
    from ringmq.core.topology import Topology
    from ringmq.core.transactions import Confirms


class Answers:
    """The answer calls of `Broker` (see the module docstring)."""

    if TYPE_CHECKING:
        state: State
        confirms: Confirms
        forwards: Forwards
        remotes: Remotes
        restore: Restore
        exchanges: Exchanges
        topology: Topology

        def call(self, now_ms: int, *, publish: bool = False) -> CallScope: ...

    # ================================================================== the store's
    def drain_unconfirmed(self) -> list[tuple[int, int, int]]:
        """Storage hook: (conn_id, channel, publish seq) of confirms held since the last call.

        With `BrokerConfig.delay_persistent_confirms`, a persistent message that reached a
        durable queue is not confirmed at once. The server drains this list after each batch,
        waits for the group-commit fsync covering that batch, then calls `confirm_stored`.
        """
        return self.confirms.drain_unconfirmed()

    def drain_unwritten(self) -> list[tuple[int, int, int]]:
        """Storage hook: confirms held until written to the OS, not fsynced (streams under
        `BrokerConfig.stream_confirm` `written`), released with `confirm_stored`."""
        return self.confirms.drain_unwritten()

    def confirm_stored(self, conn_id: int, channel: int, seqs: Iterable[int]) -> list[Effect]:
        """Storage hook: the publishes `seqs` of a confirm session are durable; confirm them."""
        with self.call(self.state.now_ms) as out:
            self.confirms.confirm_stored(conn_id, channel, seqs)
        return out

    def holding(self) -> bool:
        """Storage hook: some persistent message waits for an fsync before consumers may have
        it (the group commit then starts one at once, as for a held confirm)."""
        return self.state.durability is not None and self.state.durability.holding

    def stored(self, durable: int, *, healthy: bool = True) -> list[Effect]:
        """Storage hook: an fsync covered every store write up to position `durable`; hand
        out the persistent messages that waited for it (`core/queue/hold.py`). `healthy`:
        the store's writes work (False while a later write is still failing)."""
        state = self.state
        with self.call(state.now_ms) as out:
            if self.state.durability is not None:
                for q in self.state.durability.stored(durable, healthy=healthy):
                    state.mark(q)
            if state.unshown:  # streams whose readers may see more now (committed reads)
                unshown, state.unshown = state.unshown, {}
                for q in unshown.values():
                    if not q.deleted:
                        state.mark(q)
        return out

    def unstored(self, after: int) -> list[Effect]:
        """Storage hook: the store writes after position `after` failed and their publishes
        are refused (`fail_unconfirmed`); their messages leave their queues unseen."""
        state = self.state
        with self.call(state.now_ms) as out:
            if self.state.durability is not None:
                for q in self.state.durability.unstored(after):
                    state.mark(q)
        return out

    def fail_unconfirmed(self, conn_id: int, channel: int, seqs: Iterable[int]) -> list[Effect]:
        """Storage hook: the store could not make publishes `seqs` durable; refuse them."""
        with self.call(self.state.now_ms) as out:
            self.confirms.fail_unconfirmed(conn_id, channel, seqs)
        return out

    # ================================================================== other shards'
    def drain_forwards(self) -> list[ForwardPublish]:
        """Shard hook: the publishes and dead letters for other shards' queues noted since
        the last call, in order; the server sends them on the shard link to each owner."""
        return self.forwards.drain()

    def forwards_resolved(
        self, answers: Iterable[tuple[int, int, int, str | None]]
    ) -> list[Effect]:
        """Shard hook: the owners of queues confirmed publishes were forwarded to stored them
        or refused them: (conn_id, channel, publish seq, why refused: its queue's overflow,
        the link lost; None when stored), as one call."""
        with self.call(self.state.now_ms) as out:
            self.confirms.forwards_resolved(answers)
        return out

    def drain_remote_ops(self) -> list[RemoteOp]:
        """Shard hook: the subscriptions to open and cancel, and the settlements to send, of
        copies of other shards' queues (core/remotes.py), noted since the last call."""
        return self.remotes.drain()

    def remote_delivered(
        self, sub: int, first_tag: int, entries: list[tuple[Message, bool, int]]
    ) -> list[Effect]:
        """Shard hook: the owner delivered `entries` (message, redelivered, delivery count)
        to subscription `sub` as tags `first_tag`...: they go to the copy's consumers."""
        state = self.state
        with self.call(state.now_ms) as out:
            q = self.remotes.delivered(sub, first_tag, entries, state.now_ms)
            if q is not None:
                state.mark(q)
        return out

    def remote_gone(self, sub: int, *, kept: bool = False) -> list[Effect]:
        """Shard hook: the owner ended subscription `sub`: answering its cancel (`kept`: the
        unacked deliveries stay settleable), or on its own (its queue went, it refused the
        consumer, the link was lost), when the copy's consumers are cancelled."""
        state = self.state
        with self.call(state.now_ms) as out:
            for q in self.remotes.gone(sub, state.now_ms, kept=kept):
                cancel_consumers(state, q)
        return out

    # ================================================================== the shards' definitions
    def feed_definitions(self) -> None:
        """Shard hook: this shard (0) feeds the other shards' copies of its definitions from
        now on (core/deffeed.py): what exists already is the first changes drained."""
        state = self.state
        if state.feed is None:
            state.feed = DefinitionFeed(state)

    def drain_definitions(self) -> list[DefinitionChange]:
        """Shard hook: the definition changes made since the last drain, in order (none
        while the feed is off)."""
        feed = self.state.feed
        return [] if feed is None else feed.drain()

    def set_shards(self, count: int) -> None:
        """Shard hook: the broker runs `count` shards (placement's `balanced` spreads queues
        over them)."""
        if count < 1:
            raise ValueError("a broker runs at least one shard")
        self.state.shards = count

    def definitions_seq(self) -> int:
        """Shard hook: the sequence of the feed's last change (0 while the feed is off)."""
        feed = self.state.feed
        return 0 if feed is None else feed.seq

    def definitions_snapshot(self) -> list[DefinitionChange]:
        """Shard hook: every definition of the feed as a put, numbered with the feed's last
        change (for a shard that starts or fell behind)."""
        feed = self.state.feed
        assert feed is not None, "feed_definitions first"
        return feed.changes_snapshot()

    def apply_definitions(
        self,
        changes: Iterable[DefinitionChange],
        *,
        shard: int,
        now_ms: int,
        snapshot: bool = False,
    ) -> list[Effect]:
        """Shard hook: shard 0's definition `changes` applied here, shard `shard`, as one
        call (its queues are made here, the others' as copies; core/defcopies.py). A
        `snapshot` (every definition) replaces what is here: what it does not name goes,
        but for this shard's own queues."""
        copies = DefinitionCopies(self.state, self.restore, self.topology, shard)
        with self.call(now_ms) as out:
            if snapshot:
                copies.replace(list(changes), now_ms)
            else:
                copies.apply(changes, now_ms)
        return out

    # ================================================================== asking shard 0
    def defer_definitions(self) -> None:
        """Shard hook: this shard follows shard 0, which makes its clients' definition steps
        from now on (core/asks.py)."""
        if self.state.asks is None:
            self.state.asks = Asks()

    def ask_definition(self, conn_id: int, channel: int, request: DefinitionRequest) -> int:
        """Adapter hook: the command on `conn_id`'s `channel` raised `DefinitionElsewhere`
        and is parked: note `request` for shard 0; its id (the answer's `rid`)."""
        asks = self.state.asks
        assert asks is not None, "only a shard that defers its definitions asks"
        return asks.ask(conn_id, channel, request)

    def drain_definition_asks(self) -> list[tuple[int, DefinitionRequest]]:
        """Shard hook: the requests noted since the last drain, to send to shard 0."""
        asks = self.state.asks
        return [] if asks is None else asks.drain()

    def definition_answered(
        self, rid: int, condition: Condition | None, text: str = ""
    ) -> list[Effect]:
        """Shard hook: shard 0 made request `rid` and this shard applied it (`condition`
        None), or refused it: the parked command's `DefinitionAnswered`."""
        asks = self.state.asks
        answer = None if asks is None else asks.answered(rid, condition, text)
        return [] if answer is None else [answer]

    def run_definition_request(
        self, conn_id: int, channel: int, request: DefinitionRequest, *, origin: int, now_ms: int
    ) -> list[Effect]:
        """Shard hook (shard 0): make shard `origin`'s client's `request` on the session
        `conn_id`/`channel` (the link's, in the request's vhost), as one call; raises the
        step's `BrokerError` when refused (core/askrun.py)."""
        session = self.state.conns[conn_id].sessions[channel]
        with self.call(now_ms) as out:
            run_request(self.topology, self.exchanges, session, request, origin, now_ms)
        return out
