"""Publishing runs (`runs.publish_run`, the receiving fast path) against publishing message by
message (the machine without `message_runs`): the same frames give the same dispositions, the
same queue contents and the same counters, on every kind of sender link (a queue, an
exchange whose routing key is each message's subject, the anonymous relay) and for refused
messages (over the size limit, malformed, a queue that rejects publishes when full)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from ringmq.amqp10 import performatives as p
from ringmq.amqp10 import sections as sec
from ringmq.amqp10.frames import encode_frame
from ringmq.amqp10.sections import encode_section
from ringmq.core.broker import Broker
from ringmq.core.effects import Confirm, Deliver
from tests.unit.adapters.amqp10.test_handler import Client, login, route, session

DATA = 0x75
PROPERTIES = 0x73
HEADER = 0x70
LINKS = {
    0: p.Target("/queues/q"),
    1: p.Target("/exchanges/amq.topic"),  # the subject is the routing key
    2: None,  # anonymous relay: each message's `to`
    3: p.Target("/queues/full"),  # x-max-length 2, reject-publish
}


def _payload(kind: int, n: int) -> bytes:
    data = encode_section(DATA, b"m%d" % n)
    match kind:
        case 0:
            return data
        case 1:  # durable header, a long data section
            return sec.Header(durable=True).encode() + encode_section(DATA, bytes(300))
        case 2:  # properties: to and subject
            return sec.Properties(to="/queues/q", subject="q").encode() + data
        case 3:
            return b"\x00\x53\x75\xa0\x09short"  # malformed: a data section cut short
        case _:
            return encode_section(DATA, bytes(500))  # over the size limit


def _world(runs: bool) -> tuple[Broker, Client]:
    b = Broker()
    b.publisher.max_message_size = 400
    c = Client(b, 1)
    c.handler.conn.message_runs = runs
    login(c)
    session(c)
    s = b.session(1, 0)
    assert s is not None
    for name, args in (("q", None), ("full", {"x-max-length": 2, "x-overflow": "reject-publish"})):
        b.topology.declare_queue(
            s, name, durable=True, exclusive=False, auto_delete=False, arguments=args, now_ms=0
        )
    b.topology.bind_queue(s, "q", "amq.topic", "q", None)
    for handle, target in LINKS.items():
        a = p.Attach(name=f"s{handle}", handle=handle, role=p.ROLE_SENDER, target=target)
        c.send(encode_frame(0, a))
    c.read()
    return b, c


def _frames(spec: list[tuple[int, int, bool]]) -> list[bytes]:
    return [
        encode_frame(
            0,
            p.Transfer(handle=handle, delivery_id=i, delivery_tag=b"t", settled=settled),
            _payload(kind, i),
        )
        for i, (handle, kind, settled) in enumerate(spec)
    ]


def _run(runs: bool, frames: list[bytes], reads: list[int]) -> Any:
    b, c = _world(runs)
    dispositions: list[Any] = []
    effects = []
    start = 0
    for stop in [*sorted(reads), len(frames)]:
        out = c.send(*frames[start:stop])
        effects += [type(e).__name__ for e in out if not isinstance(e, Deliver | Confirm)]
        route([c], out)
        dispositions += [
            (d.first, d.last or d.first, d.settled, d.state)
            for d in c.read()
            if isinstance(d, p.Disposition)
        ]
        start = stop
    queues = {
        name: [
            (d.message.routing_key, d.message.properties_bin, d.message.body, d.message.persistent)
            for d in q.queue.browse_many(None, 100, 0)
        ]
        for name, q in b.vhosts["/"].queues.items()
    }
    return dispositions, effects, queues, dict(b.stats)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(list(LINKS)), st.sampled_from([0, 0, 0, 1, 2, 3, 4]), st.booleans()
        ),
        min_size=1,
        max_size=30,
    ),
    st.lists(st.integers(0, 30), max_size=3),
)
def test_runs_publish_as_messages_one_by_one_do(
    spec: list[tuple[int, int, bool]], reads: list[int]
) -> None:
    frames = _frames(spec)
    assert _run(True, frames, reads) == _run(False, frames, reads)


def test_a_run_is_settled_in_order_and_refusals_rejected() -> None:
    spec = [(0, 0, False), (0, 4, False), (0, 3, False), (0, 1, False), (3, 0, False)]
    spec += [(3, 0, False), (3, 0, False)]
    dispositions, _effects, queues, _stats = _run(True, _frames(spec), [])
    states = {}
    for first, last, settled, state in dispositions:
        assert settled
        for i in range(first, last + 1):
            states[i] = type(state).__name__
    assert states == {
        0: "Accepted",
        1: "Rejected",  # over the size limit
        2: "Rejected",  # malformed
        3: "Accepted",
        4: "Accepted",
        5: "Accepted",
        6: "Rejected",  # the full queue refused it
    }
    assert len(queues["q"]) == 2
    assert len(queues["full"]) == 2
