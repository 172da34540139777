"""Random method sequences: the broker yields effects or AMQPError, never anything else, and
its bookkeeping stays consistent (what queues hold as unacked equals what channels track)."""

from __future__ import annotations

from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from ringmq.amqp import spec
from ringmq.amqp.properties import BasicProperties
from ringmq.amqp.reply_codes import AMQPError
from tests.unit.adapters.amqp091.kit import Kit

_names = st.sampled_from(["q1", "q2", "amq.gen-x", ""])
_xnames = st.sampled_from(["", "x1", "amq.topic", "dlx", "nope"])
_keys = st.sampled_from(["q1", "q2", "a.b", "#", ""])
_args = st.sampled_from(
    [
        {},
        {"x-max-length": 2},
        {"x-max-length": 1, "x-overflow": "reject-publish"},
        {"x-dead-letter-exchange": "dlx"},
        {"x-message-ttl": 5},
        {"x-ring-size": 2},
        {"x-single-active-consumer": True},
    ]
)

_methods = st.one_of(
    st.builds(
        spec.QueueDeclare,
        queue=_names,
        passive=st.booleans(),
        durable=st.booleans(),
        exclusive=st.booleans(),
        auto_delete=st.booleans(),
        arguments=_args,
    ),
    st.builds(spec.QueueDelete, queue=_names, if_unused=st.booleans(), if_empty=st.booleans()),
    st.builds(spec.QueuePurge, queue=_names),
    st.builds(spec.QueueBind, queue=_names, exchange=_xnames, routing_key=_keys),
    st.builds(spec.QueueUnbind, queue=_names, exchange=_xnames, routing_key=_keys),
    st.builds(
        spec.ExchangeDeclare,
        exchange=_xnames,
        type=st.sampled_from(["direct", "fanout", "topic", "headers"]),
        auto_delete=st.booleans(),
    ),
    st.builds(spec.ExchangeDelete, exchange=_xnames, if_unused=st.booleans()),
    st.builds(spec.ExchangeBind, destination=_xnames, source=_xnames, routing_key=_keys),
    st.builds(spec.BasicQos, prefetch_count=st.integers(0, 3), global_=st.booleans()),
    st.builds(
        spec.BasicConsume,
        queue=_names,
        consumer_tag=st.sampled_from(["", "c1", "c2"]),
        no_ack=st.booleans(),
        exclusive=st.booleans(),
    ),
    st.builds(spec.BasicCancel, consumer_tag=st.sampled_from(["c1", "c2", "zz"])),
    st.builds(spec.BasicGet, queue=_names, no_ack=st.booleans()),
    st.builds(spec.BasicAck, delivery_tag=st.integers(0, 6), multiple=st.booleans()),
    st.builds(
        spec.BasicNack,
        delivery_tag=st.integers(0, 6),
        multiple=st.booleans(),
        requeue=st.booleans(),
    ),
    st.builds(spec.BasicReject, delivery_tag=st.integers(0, 6), requeue=st.booleans()),
    st.builds(spec.BasicRecover, requeue=st.just(True)),
    st.just(spec.ConfirmSelect()),
    st.just(spec.TxSelect()),
    st.just(spec.TxCommit()),
    st.just(spec.TxRollback()),
)


class BrokerFuzz(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.kit = Kit()
        self.conns = [self.kit.connect(), self.kit.connect()]
        self.chans: dict[tuple[int, int], bool] = {}
        for c in self.conns:
            for n in (1, 2):
                self.chans[self.kit.channel(c, n)] = True

    def _apply(self, chan: tuple[int, int], method: Any, content: Any = None) -> None:
        try:
            self.kit.call(chan, method, content)
        except AMQPError as exc:
            assert exc.class_id == method.CLASS_ID  # noqa: PT017 - one of many calls
            # what the server does next: close the channel, then the client reopens it
            self.kit.broker.channel_closed(chan[0], chan[1], self.kit.now)
            self.kit.channel(chan[0], chan[1])

    @rule(which=st.integers(0, 3), method=_methods)
    def call(self, which: int, method: Any) -> None:
        self._apply(sorted(self.chans)[which], method)

    @rule(
        which=st.integers(0, 3),
        exchange=_xnames,
        key=_keys,
        mandatory=st.booleans(),
        delay=st.sampled_from([None, 5]),
    )
    def publish(
        self, which: int, exchange: str, key: str, mandatory: bool, delay: int | None
    ) -> None:
        from ringmq.amqp.frames import RawContent
        from ringmq.amqp.properties import encode_properties

        headers = {"x-delay": delay} if delay else None
        pb = encode_properties(BasicProperties(headers=headers))
        method = spec.BasicPublish(exchange=exchange, routing_key=key, mandatory=mandatory)
        self._apply(sorted(self.chans)[which], method, RawContent(60, 1, pb, b"m"))

    @rule(ms=st.integers(0, 10))
    def tick(self, ms: int) -> None:
        self.kit.tick(ms)

    @rule(which=st.integers(0, 1), writable=st.booleans())
    def writable(self, which: int, writable: bool) -> None:
        self.kit.broker.set_writable(self.conns[which], writable, self.kit.now)

    @rule(which=st.integers(0, 1))
    def reconnect(self, which: int) -> None:
        old = self.conns[which]
        self.kit.broker.connection_closed(old, self.kit.now)
        for key in [k for k in self.chans if k[0] == old]:
            del self.chans[key]
        new = self.kit.connect()
        self.conns[which] = new
        for n in (1, 2):
            self.chans[self.kit.channel(new, n)] = True

    @invariant()
    def unacked_agree(self) -> None:
        b = self.kit.broker
        tracked: dict[int, int] = {}
        for conn in b.conns.values():
            for s in conn.sessions.values():
                for e in s.unacked.values():
                    if not e.queue.deleted:
                        tracked[id(e.queue)] = tracked.get(id(e.queue), 0) + 1
                if s.tx is not None:
                    for _kind, entries in s.tx.settles:
                        for e in entries:
                            if not e.queue.deleted:
                                tracked[id(e.queue)] = tracked.get(id(e.queue), 0) + 1
                assert s.global_unacked == sum(
                    1 for e in s.unacked.values() if e.consumer is not None
                )
        for vh in b.vhosts.values():
            for q in vh.queues.values():
                assert q.queue.unacked_count == tracked.get(id(q), 0), q.name
                for c in q.consumers.all:
                    assert c.session.consumers.get(c.tag) is c


TestBrokerFuzz = BrokerFuzz.TestCase
TestBrokerFuzz.settings = settings(TestBrokerFuzz.settings, stateful_step_count=40)
