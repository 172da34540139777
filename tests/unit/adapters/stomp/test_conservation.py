"""Against a model: whatever a STOMP consumer does (ACK, NACK, transactions, reconnecting), every
message sent is acknowledged once, dropped once, or still held by the consumer; none is lost or
acknowledged twice. Each ack mode is its own run (`client` is cumulative)."""

from __future__ import annotations

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from ringmq.adapters.stomp import StompHandler
from tests.unit.adapters.stomp.kit import Kit


class ConsumerMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.kit = Kit()
        self.producer = self.kit.connect()
        self.consumer: StompHandler | None = None
        self.mode = "client"
        self.sent: list[str] = []
        self.acked: list[str] = []
        self.dropped: list[str] = []
        self.outstanding: list[tuple[str, str]] = []  # (body, ack id), in delivery order
        self.tx: list[tuple[str, str]] | None = None  # (command, ack id) held by a transaction
        self.tx_name = 0

    @initialize(mode=st.sampled_from(["client", "client-individual"]))
    def subscribe(self, mode: str) -> None:
        self.mode = mode
        self._connect()

    def _connect(self) -> None:
        self.consumer = h = self.kit.connect()
        self.kit.frame(h, "SUBSCRIBE", destination="/queue/q", id="s", ack=self.mode)
        self._collect()

    def _collect(self) -> None:
        assert self.consumer is not None
        for f in self.kit.read(self.consumer):
            assert f.command == "MESSAGE", (f.command, f.headers, f.body)
            body = f.body.decode()
            assert body not in self.acked
            assert body not in self.dropped
            assert body not in [b for b, _ in self.outstanding]
            self.outstanding.append((body, f.headers["ack"]))

    def _covered(self, ack_id: str) -> list[tuple[str, str]]:
        # What an ACK/NACK of `ack_id` settles among what is still outstanding.
        ids = [a for _, a in self.outstanding]
        if ack_id not in ids:
            return []
        i = ids.index(ack_id)
        return self.outstanding[: i + 1] if self.mode == "client" else [self.outstanding[i]]

    def _settle(self, covered: list[tuple[str, str]], into: list[str] | None) -> None:
        for item in covered:
            self.outstanding.remove(item)
            if into is not None:
                into.append(item[0])

    @rule()
    def send(self) -> None:
        body = str(len(self.sent))
        self.sent.append(body)
        self.kit.frame(self.producer, "SEND", body.encode(), destination="/queue/q")
        self._collect()

    @precondition(lambda self: self.outstanding)
    @rule(pick=st.integers(0, 1000), requeue=st.sampled_from([None, True, False]))
    def settle(self, pick: int, requeue: bool | None) -> None:
        assert self.consumer is not None
        _, ack_id = self.outstanding[pick % len(self.outstanding)]
        covered = self._covered(ack_id)
        if requeue is None:
            self.kit.frame(self.consumer, "ACK", id=ack_id)
            self._settle(covered, self.acked)
        else:
            self.kit.frame(self.consumer, "NACK", id=ack_id, requeue=str(requeue).lower())
            self._settle(covered, None if requeue else self.dropped)
        self._collect()

    @precondition(lambda self: self.tx is None)
    @rule()
    def begin(self) -> None:
        assert self.consumer is not None
        self.tx_name += 1
        self.tx = []
        self.kit.frame(self.consumer, "BEGIN", transaction=f"t{self.tx_name}")

    @precondition(lambda self: self.tx is not None and self.outstanding)
    @rule(pick=st.integers(0, 1000))
    def ack_in_tx(self, pick: int) -> None:
        assert self.consumer is not None
        assert self.tx is not None
        _, ack_id = self.outstanding[pick % len(self.outstanding)]
        self.kit.frame(self.consumer, "ACK", id=ack_id, transaction=f"t{self.tx_name}")
        self.tx.append(("ACK", ack_id))

    @precondition(lambda self: self.tx is not None)
    @rule(commit=st.booleans())
    def end_tx(self, commit: bool) -> None:
        assert self.consumer is not None
        assert self.tx is not None
        held, self.tx = self.tx, None
        name = f"t{self.tx_name}"
        if commit:
            self.kit.frame(self.consumer, "COMMIT", transaction=name)
            for _, ack_id in held:
                self._settle(self._covered(ack_id), self.acked)
        else:
            self.kit.frame(self.consumer, "ABORT", transaction=name)
            for _, ack_id in reversed(held):
                self._settle(self._covered(ack_id), None)  # back to the queue, redelivered
        self._collect()

    @rule()
    def reconnect(self) -> None:
        assert self.consumer is not None
        self.kit.lose(self.consumer)
        self.outstanding.clear()  # everything held comes back
        self.tx = None
        self._connect()

    @invariant()
    def conserved(self) -> None:
        held = [b for b, _ in self.outstanding]
        everything = self.acked + self.dropped + held
        assert sorted(everything, key=int) == self.sent
        q = self.kit.broker.vhosts["/"].queues.get("q")
        assert q is None or q.queue.ready_count == 0  # unlimited prefetch: nothing waits


TestConsumer = ConsumerMachine.TestCase
