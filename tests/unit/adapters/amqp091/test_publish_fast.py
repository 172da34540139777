"""The AMQP 0-9-1 adapter's publish path (in `Amqp091.handle`) against its generic `_handle`.

Two brokers get the same random script of publishes, consumes, acks and ticks; one takes
basic.publish through the adapter's publish path (as `handle` does), the other is forced
through the generic handler table. Both end in the core's one publish pipeline; effects,
errors, counters and queue contents must be identical.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from ringmq.amqp import spec
from ringmq.amqp.frames import RawContent
from ringmq.amqp.properties import BasicProperties, encode_properties
from ringmq.amqp.reply_codes import AMQPError
from ringmq.core import publish as publish_module
from ringmq.core.broker import Broker
from ringmq.core.config import BrokerConfig
from tests.unit.adapters.amqp091.kit import Kit

_QUEUES: dict[str, dict[str, Any]] = {
    "plain": {},
    "ring": {"x-ring-size": 2},
    "drophead": {"x-max-length": 2, "x-dead-letter-exchange": "dlx"},
    "reject": {"x-max-length": 2, "x-overflow": "reject-publish"},
    "rejectdlx": {"x-max-length": 1, "x-overflow": "reject-publish-dlx"},
    "prio": {"x-max-priority": 5},
    "lvq": {"x-last-value-key": "k"},
    "qpid": {"qpid.max_count": 2, "qpid.policy_type": "ring_strict"},
    "dead": {},
    "full.fail": {},  # Artemis address settings (below): FAIL at 2 messages
    "full.block": {},  # BLOCK at 2 messages
}
_KEYS = [*_QUEUES, "missing", "amq.rabbitmq.reply-to.x"]
_PROPS = [
    BasicProperties(),
    BasicProperties(delivery_mode=2),
    BasicProperties(delivery_mode=1, content_type="text/plain"),
    BasicProperties(headers={"k": "a"}),
    BasicProperties(priority=3),
    BasicProperties(expiration="5"),
    BasicProperties(message_id="m1"),
]

# Weighted toward the common case so that short scripts reach deliveries and limits.
_publish = st.tuples(
    st.just("publish"),
    st.sampled_from(["", "", "", "", "fan", "dlx", "amq.direct", "nope"]),
    st.sampled_from(["plain", "plain", "plain", "ring", "ring", "full.fail", *_KEYS]),
    st.sampled_from([0, 0, 1, 1, 1, 2, *range(len(_PROPS))]),
    st.booleans(),  # mandatory
    st.integers(1, 5),  # times, back to back
)
_step = st.one_of(
    _publish,
    _publish,
    _publish,
    st.tuples(st.just("consume"), st.sampled_from(list(_QUEUES))),
    st.tuples(st.just("ack"), st.booleans()),
    st.tuples(st.just("tick"), st.integers(1, 10)),
    st.tuples(st.just("confirm")),
    st.tuples(st.just("batch")),  # the end of a read batch: the server's dispatch_pending
)


def _setup(generic: bool) -> tuple[Kit, tuple[int, int], tuple[int, int]]:
    address_settings = {
        "full.fail": {"address-full-policy": "FAIL", "max-size-messages": 2},
        "full.block": {"address-full-policy": "BLOCK", "max-size-messages": 2},
    }
    kit = Kit(
        BrokerConfig(name_seed=7, delay_persistent_confirms=True, address_settings=address_settings)
    )
    kit.broker.defer_dispatch = True  # as the server runs it: dispatch once per read batch
    if generic:
        amqp = kit.amqp
        amqp.handle = amqp._handle  # type: ignore[method-assign]
    pub = kit.open()
    sub = kit.open()
    kit.call(pub, spec.ExchangeDeclare(exchange="fan", type="fanout"))
    kit.call(pub, spec.ExchangeDeclare(exchange="dlx", type="fanout"))
    for name, args in _QUEUES.items():
        kit.declare(pub, name, arguments=args, durable=name in ("plain", "ring"))
    for name in ("plain", "ring", "lvq"):
        kit.call(pub, spec.QueueBind(queue=name, exchange="fan"))
    kit.call(pub, spec.QueueBind(queue="dead", exchange="dlx"))
    kit.call(pub, spec.QueueBind(queue="plain", exchange="amq.direct", routing_key="plain"))
    kit.call(sub, spec.BasicQos(prefetch_count=2))
    return kit, pub, sub


def _norm(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = dataclasses.fields(value)
        return (type(value).__name__, *(_norm(getattr(value, f.name)) for f in fields))
    if isinstance(value, (list, tuple)):
        return [_norm(v) for v in value]
    return value


def _run(kit: Kit, pub: tuple[int, int], sub: tuple[int, int], script: list[Any]) -> list[Any]:
    trace: list[Any] = []
    tag = 0
    for step in script:
        try:
            if step[0] == "publish":
                _, exchange, rk, p, mandatory, times = step
                pb = encode_properties(_PROPS[p])
                method = spec.BasicPublish(exchange=exchange, routing_key=rk, mandatory=mandatory)
                effects = []
                for _ in range(times):
                    effects += kit.call(pub, method, RawContent(60, 3, pb, b"abc"))
            elif step[0] == "consume":
                effects = kit.consume(sub, step[1])
            elif step[0] == "ack":
                tag += 1
                effects = kit.call(sub, spec.BasicAck(delivery_tag=tag, multiple=step[1]))
            elif step[0] == "confirm":
                effects = kit.call(pub, spec.ConfirmSelect())
            elif step[0] == "batch":
                effects = kit.broker.dispatch_pending(kit.now)
                trace.append(("flow", [(c, q.name) for c, q in kit.broker.take_flow()]))
                trace.append(("unconfirmed", kit.broker.drain_unconfirmed()))
            else:
                effects = kit.tick(step[1])
            trace.append(_norm(effects))
        except AMQPError as exc:
            trace.append(("error", exc.code, exc.reply_text, exc.class_id, exc.method_id))
            # a soft error closes the channel: reopen it as a client would
            chan = pub if step[0] in ("publish", "confirm") else sub
            kit.broker.channel_closed(chan[0], chan[1], kit.now)
            kit.broker.channel_opened(chan[0], chan[1], kit.now)
            if chan is sub:
                kit.call(sub, spec.BasicQos(prefetch_count=2))
                tag = 0
    return trace


def _state(broker: Broker, now_ms: int) -> dict[str, Any]:
    vh = broker.vhosts["/"]
    out: dict[str, Any] = {"stats": dict(broker.stats)}
    for name, q in vh.queues.items():
        waiting = q.queue.browse_many(None, 100, now_ms)
        out[name] = (q.queue.stats(), [(d.seq, bytes(d.message.body)) for d in waiting])
    return out


@settings(max_examples=400, deadline=None)
@given(st.booleans(), st.booleans(), st.lists(_step, min_size=5, max_size=60))
def test_fast_publish_path_matches_the_generic_path(
    confirm: bool, consume: bool, steps: list[Any]
) -> None:
    first = [("confirm",)] if confirm else []
    script = [*first, *([("consume", "plain")] if consume else []), *steps]
    flow_high = publish_module.FLOW_HIGH  # type: ignore[attr-defined]
    publish_module.FLOW_HIGH = 2  # type: ignore[attr-defined]  # publisher flow within a short script
    try:
        fast = _setup(generic=False)
        slow = _setup(generic=True)
        assert _run(*fast, script) == _run(*slow, script)
        assert _state(fast[0].broker, fast[0].now) == _state(slow[0].broker, slow[0].now)
    finally:
        publish_module.FLOW_HIGH = flow_high  # type: ignore[attr-defined]


def test_the_publish_path_skips_the_handler_table_except_where_it_must() -> None:
    kit, pub, _ = _setup(generic=False)
    calls: list[int] = []
    generic = kit.amqp._handle

    def spy(*args: Any) -> Any:
        calls.append(1)
        return generic(*args)

    kit.amqp._handle = spy  # type: ignore[method-assign, assignment]
    kit.publish(pub, "plain")  # the first publish to an exchange checks the write permission
    kit.publish(pub, "", exchange="fan")
    kit.publish(pub, "plain")
    kit.publish(pub, "plain", props=BasicProperties(delivery_mode=2))
    kit.publish(pub, "plain", props=BasicProperties(headers={"a": 1}))
    assert calls == []
    kit.call(pub, spec.TxSelect())
    calls.clear()
    kit.publish(pub, "plain")  # a transactional channel buffers: the generic path
    assert calls == [1]
