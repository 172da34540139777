"""The AMQP 1.0 handler on an in-process broker, without sockets: a peer speaking the codec's
frames, the core's effects applied to the handlers they target (as the server does)."""

from __future__ import annotations

from typing import Any

from ringmq.adapters.amqp10.handler import Amqp10Handler
from ringmq.adapters.handler import HandlerContext, HandlerLimits, Peer, make_login
from ringmq.amqp10 import performatives as p
from ringmq.amqp10.frames import AMQP_HEADER, SASL_HEADER, Frame, FrameReader, encode_frame
from ringmq.amqp10.sections import encode_section
from ringmq.core.broker import Broker
from ringmq.core.config import BrokerConfig
from ringmq.core.effects import Block, CloseConnection, Effect, Unblock
from ringmq.core.errors import Condition
from ringmq.core.throttle import LoginGuard

LIMITS = HandlerLimits(max_message_size=1 << 20, frame_max=65536, channel_max=16, heartbeat_s=60)
DATA = 0x75


class Client:
    """One AMQP 1.0 client connection to `broker`, driven by hand."""

    def __init__(self, broker: Broker, conn_id: int):
        peer = Peer("127.0.0.1", 40000 + conn_id, "127.0.0.1", 5672)
        ctx = HandlerContext(
            broker, conn_id, peer, LIMITS, make_login(broker, LoginGuard(), peer, "amqp10")
        )
        self.handler = Amqp10Handler(ctx)
        self.reader = FrameReader(1 << 20)
        self.now = 0

    def send(self, *frames: bytes) -> list[Effect]:
        self.now += 1
        return self.handler.receive_data(b"".join(frames), self.now)

    def read(self) -> list[Any]:
        self.reader.feed(self.handler.data_to_send())
        out: list[Any] = []
        while (frame := self.reader.next_frame()) is not None:
            if isinstance(frame, Frame):
                perf, off = p.decode_performative(frame.body) if frame.body else (None, 0)
                out.append((perf, frame.body[off:]) if isinstance(perf, p.Transfer) else perf)
                if isinstance(perf, p.SaslOutcome):
                    self.reader.expect_header()
            else:
                out.append(frame.raw)
        return out


def route(clients: list[Client], effects: list[Effect]) -> None:
    """Apply effects to the handlers of their connections (the server's job)."""
    by_id = {c.handler.conn_id: c.handler for c in clients}
    for e in effects:
        target = by_id.get(getattr(e, "conn_id", -1))
        if target is not None:
            target.apply(e)


def login(c: Client, hostname: str | None = None, mechanism: str = "PLAIN") -> list[Any]:
    resp = b"\0guest\0guest" if mechanism == "PLAIN" else b""
    c.send(
        SASL_HEADER,
        encode_frame(0, p.SaslInit(mechanism=mechanism, initial_response=resp)),
        AMQP_HEADER,
        encode_frame(0, p.Open(container_id=f"c{c.handler.conn_id}", hostname=hostname)),
    )
    return c.read()


def session(c: Client) -> None:
    c.send(encode_frame(0, p.Begin(next_outgoing_id=0, incoming_window=1000, outgoing_window=9)))
    c.read()


def body(data: bytes) -> bytes:
    return encode_section(DATA, data)


def transfer(i: int, data: bytes, settled: bool = False) -> bytes:
    t = p.Transfer(handle=0, delivery_id=i, delivery_tag=b"%d" % i, settled=settled)
    return encode_frame(0, t, body(data))


def test_login_open_and_info() -> None:
    b = Broker()
    c = Client(b, 1)
    got = login(c, hostname="vhost:/")
    assert isinstance(got[-1], p.Open)
    assert c.handler.opened
    info = c.handler.info()
    assert (info.protocol, info.user, info.vhost, info.auth_mechanism) == (
        "AMQP 1.0",
        "guest",
        "/",
        "PLAIN",
    )
    assert info.client_properties["container_id"] == "c1"


def test_anonymous_can_be_switched_off() -> None:
    b = Broker(BrokerConfig(anonymous_login=None))
    c = Client(b, 1)
    got = login(c, mechanism="ANONYMOUS")
    assert got[-1] == p.SaslOutcome(code=p.SASL_AUTH)
    assert c.handler.closed
    assert not c.handler.opened
    ok = Client(Broker(), 2)
    assert isinstance(login(ok, mechanism="ANONYMOUS")[-1], p.Open)


def test_an_unknown_vhost_closes_with_not_allowed() -> None:
    c = Client(Broker(), 1)
    close = login(c, hostname="vhost:nope")[-1]
    assert isinstance(close, p.Close)
    assert close.error is not None
    assert close.error.condition == "amqp:not-allowed"


def test_publish_deliver_settle_and_detach_returns_unsettled() -> None:
    b = Broker()
    pub, sub = Client(b, 1), Client(b, 2)
    clients = [pub, sub]
    for c in clients:
        login(c)
        session(c)
    pub.send(
        encode_frame(0, p.Attach(name="s", handle=0, role=p.ROLE_SENDER, target=p.Target("q")))
    )
    pub.read()
    frames = [transfer(i, b"m%d" % i) for i in range(3)]
    route(clients, pub.send(*frames))
    settled = [
        (d.first, d.last or d.first, d.settled, d.state)
        for d in pub.read()
        if isinstance(d, p.Disposition)
    ]
    assert {i for first, last, _, _ in settled for i in range(first, last + 1)} == {0, 1, 2}
    assert {(ok, state) for _, _, ok, state in settled} == {(True, p.Accepted())}
    sub.send(
        encode_frame(0, p.Attach(name="r", handle=0, role=p.ROLE_RECEIVER, source=p.Source("q")))
    )
    sub.read()
    flow = p.Flow(
        next_incoming_id=0, incoming_window=100, handle=0, delivery_count=0, link_credit=2
    )
    route(clients, sub.send(encode_frame(0, flow)))
    transfers = [f for f in sub.read() if isinstance(f, tuple)]
    assert [t.delivery_id for t, _ in transfers] == [0, 1]
    assert [payload for _, payload in transfers] == [body(b"m0"), body(b"m1")]
    accept = p.Disposition(role=p.ROLE_RECEIVER, first=0, settled=True, state=p.Accepted())
    route(clients, sub.send(encode_frame(0, accept)))
    q = b.vhosts["/"].queues["q"]
    core = b.session(2, 0)
    assert core is not None
    assert (q.queue.ready_count, len(core.unacked)) == (1, 1)
    route(clients, sub.send(encode_frame(0, p.Detach(handle=0, closed=True))))
    assert q.queue.ready_count == 2  # m1 came back to the head
    assert len(q.consumers) == 0


def test_block_withholds_credit_and_close_effect_closes() -> None:
    b = Broker()
    c = Client(b, 1)
    login(c)
    session(c)
    c.send(encode_frame(0, p.Attach(name="s", handle=0, role=p.ROLE_SENDER, target=p.Target("q"))))
    c.read()
    c.handler.apply(Block(1, "memory"))
    frames = [transfer(i, b"x", settled=True) for i in range(600)]
    c.send(*frames)
    assert not [f for f in c.read() if isinstance(f, p.Flow) and f.handle is not None]
    c.handler.apply(Unblock(1))
    assert [f.link_credit for f in c.read() if isinstance(f, p.Flow)] == [1000]
    c.handler.apply(CloseConnection(1, Condition.CONNECTION_FORCED, "operator"))
    close = c.read()[-1]
    assert close.error.condition == "amqp:connection:forced"
    c.send(encode_frame(0, p.Close()))
    assert c.handler.closed
    assert c.handler.connection_lost(9) == []
    assert 1 not in b.conns


def test_a_session_is_one_core_session_whatever_its_transfers_settle_mode() -> None:
    # AMQP 1.0 picks the settle mode per transfer: the core session under the same number
    # takes both kinds (no helper session in confirm mode); only the unsettled transfers get
    # an outcome, each its own, in order.
    b = Broker()
    pub = Client(b, 1)
    login(pub)
    session(pub)
    pub.send(
        encode_frame(0, p.Attach(name="s", handle=0, role=p.ROLE_SENDER, target=p.Target("q")))
    )
    pub.read()
    frames = [transfer(i, b"m%d" % i, settled=i % 2 == 1) for i in range(5)]
    route([pub], pub.send(*frames))
    outcomes = [
        (d.first, d.last or d.first, d.state) for d in pub.read() if isinstance(d, p.Disposition)
    ]
    assert {i for first, last, _ in outcomes for i in range(first, last + 1)} == {0, 2, 4}
    assert {state for _, _, state in outcomes} == {p.Accepted()}
    assert b.vhosts["/"].queues["q"].queue.ready_count == 5
    conn = b.conns[1]
    assert list(conn.sessions) == [0]
    assert conn.sessions[0].publish_seq == 3  # only the unsettled ones are numbered
