"""The AMQP 1.0 attach features on an in-process broker (the handler's test peer): receiver
priority from the attach's properties, dynamic targets, `copy` on a multicast source, the
capabilities the attach offers."""

from __future__ import annotations

from typing import Any

from ringmq.amqp10 import performatives as p
from ringmq.amqp10.frames import encode_frame
from ringmq.amqp10.types import Int, Symbol
from ringmq.core.broker import Broker
from tests.unit.adapters.amqp10.test_handler import Client, login, session


def _client() -> tuple[Broker, Client]:
    b = Broker()
    c = Client(b, 1)
    login(c)
    session(c)
    return b, c


def _attach(c: Client, attach: p.Attach) -> list[Any]:
    c.send(encode_frame(0, attach))
    return [f for f in c.read() if isinstance(f, (p.Attach, p.Detach))]


def _receiver(handle: int, source: p.Source, properties: Any = None) -> p.Attach:
    return p.Attach(
        name=f"r{handle}", handle=handle, role=p.ROLE_RECEIVER, source=source,
        properties=properties,
    )  # fmt: skip


def test_the_priority_properties_are_the_consumers_priority() -> None:
    b, c = _client()
    _attach(c, _receiver(0, p.Source("q"), {Symbol("priority"): Int(7)}))
    _attach(c, _receiver(1, p.Source("q"), {Symbol("rabbitmq:priority"): Int(-2)}))
    _attach(c, _receiver(2, p.Source("q")))
    consumers = b.vhosts["/"].queues["q"].consumers.all
    assert [(x.priority, x.arguments) for x in consumers] == [
        (7, {"x-priority": 7}),
        (-2, {"x-priority": -2}),
        (0, {}),
    ]


def test_a_priority_that_is_not_an_integer_refuses_before_any_queue_is_made() -> None:
    b, c = _client()
    frames = _attach(c, _receiver(0, p.Source("new-q"), {Symbol("priority"): "high"}))
    detach = frames[-1]
    assert isinstance(detach, p.Detach)
    assert detach.error is not None
    assert detach.error.condition == "amqp:invalid-field"
    assert "new-q" not in b.vhosts["/"].queues


def test_a_dynamic_target_is_answered_with_its_queue_and_goes_with_the_link() -> None:
    b, c = _client()
    sender = p.Attach(
        name="tmp", handle=0, role=p.ROLE_SENDER, source=p.Source(),
        target=p.Target(dynamic=True, capabilities=(Symbol("temporary-queue"),)),
    )  # fmt: skip
    reply = _attach(c, sender)[0]
    assert isinstance(reply, p.Attach)
    target = reply.target
    assert isinstance(target, p.Target)
    assert target.dynamic
    address = target.address
    assert address is not None
    q = b.vhosts["/"].queues[address]
    assert (q.exclusive_owner, q.durable, q.auto_delete) == (1, False, False)
    c.send(encode_frame(0, p.Detach(handle=0, closed=False)))
    assert address not in b.vhosts["/"].queues


def test_a_dynamic_target_goes_when_its_session_ends_without_a_detach() -> None:
    b, c = _client()
    sender = p.Attach(
        name="tmp", handle=0, role=p.ROLE_SENDER, source=p.Source(), target=p.Target(dynamic=True)
    )
    reply = _attach(c, sender)[0]
    assert isinstance(reply, p.Attach)
    assert isinstance(reply.target, p.Target)
    address = reply.target.address
    assert address in b.vhosts["/"].queues
    c.send(encode_frame(0, p.End()))
    ended = [f for f in c.read() if isinstance(f, p.End)]
    assert ended
    assert address not in b.vhosts["/"].queues


def test_copy_on_a_multicast_source_consumes() -> None:
    b, c = _client()
    topic = p.Source("topic://news", distribution_mode=Symbol("copy"))
    _attach(c, _receiver(0, topic))
    browsing = p.Source("q", distribution_mode=Symbol("copy"))
    _attach(c, _receiver(1, browsing))
    queues = b.vhosts["/"].queues
    subscription = next(q for name, q in queues.items() if name.startswith("amq.gen"))
    assert [x.browse for x in subscription.consumers.all] == [False]
    assert [x.browse for x in queues["q"].consumers.all] == [True]


def test_the_attach_offers_what_qpid_jms_checks() -> None:
    _b, c = _client()
    sender = p.Attach(name="s", handle=0, role=p.ROLE_SENDER, target=p.Target("q"))
    assert _attach(c, sender)[0].offered_capabilities == ("DELAYED_DELIVERY",)
    assert _attach(c, _receiver(1, p.Source("q")))[0].offered_capabilities == ("SHARED-SUBS",)
