"""The AMQP 1.0 connection machine, driven by a peer that speaks the codec's frames.

Handshakes (SASL, no SASL, a bad header, open), sessions and links, transfers assembled from
frames (and aborted, and too large), credit and drain, the session windows, idle timeouts,
and the errors each scope answers with; random bytes only ever give events or a close.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ringmq.amqp10 import events as ev
from ringmq.amqp10 import performatives as p
from ringmq.amqp10.connection import Connection, State
from ringmq.amqp10.frames import (
    AMQP_HEADER,
    EMPTY_FRAME,
    SASL_HEADER,
    Frame,
    FrameReader,
    encode_frame,
)


class Peer:
    """A client: frames out through `send`, the broker's frames back through `read`."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.reader = FrameReader(1 << 24)

    def send(self, *frames: bytes, bytewise: bool = False) -> list[Any]:
        data = b"".join(frames)
        if not bytewise:
            return self.conn.receive_data(data)
        out: list[Any] = []
        for i in range(len(data)):
            out += self.conn.receive_data(data[i : i + 1])
        return out

    def read(self) -> list[Any]:
        self.reader.feed(self.conn.data_to_send())
        out: list[Any] = []
        while (frame := self.reader.next_frame()) is not None:
            if isinstance(frame, Frame):
                perf = p.decode_performative(frame.body)[0] if frame.body else None
                out.append(perf)
                if isinstance(perf, p.SaslOutcome):
                    self.reader.expect_header()
            else:
                out.append(frame.raw)
        return out


def machine(**kw: Any) -> Connection:
    args: dict[str, Any] = {
        "container_id": "ringmq",
        "max_frame_size": 4096,
        "channel_max": 7,
        "idle_timeout_ms": 1000,
        "max_message_size": 10_000,
    }
    args.update(kw)
    return Connection(**args)


def opened(**kw: Any) -> Peer:
    """A peer past SASL PLAIN and open, with a session on channel 1."""
    peer = Peer(machine(**kw))
    init = p.SaslInit(mechanism="PLAIN", initial_response=b"\0u\0pw")
    assert peer.send(SASL_HEADER, encode_frame(0, init)) == [
        ev.Authenticate("PLAIN", b"\0u\0pw", None)
    ]
    events = peer.conn.sasl_outcome(True)
    assert events == []
    events = peer.send(
        AMQP_HEADER,
        encode_frame(0, p.Open(container_id="c", hostname="vhost:v", max_frame_size=1024)),
        encode_frame(1, p.Begin(next_outgoing_id=0, incoming_window=100, outgoing_window=100)),
    )
    assert events == [ev.Opened("c", "vhost:v", {}), ev.SessionBegun(1)]
    peer.read()
    return peer


def attach_sender(peer: Peer, handle: int = 0) -> None:
    """The peer attaches a sender (the broker receives) and the broker accepts it."""
    a = p.Attach(name=f"s{handle}", handle=handle, role=p.ROLE_SENDER, target=p.Target("q"))
    (attaching,) = peer.send(encode_frame(1, a))
    assert isinstance(attaching, ev.LinkAttaching)
    peer.conn.attach(1, attaching.attach, source=a.source, target=a.target)


def attach_receiver(peer: Peer, handle: int = 0) -> None:
    a = p.Attach(name=f"r{handle}", handle=handle, role=p.ROLE_RECEIVER, source=p.Source("q"))
    (attaching,) = peer.send(encode_frame(1, a))
    peer.conn.attach(1, attaching.attach, source=a.source, target=a.target)
    peer.read()


def closed_with(peer: Peer, condition: str) -> None:
    close = [f for f in peer.read() if isinstance(f, p.Close)]
    assert close
    assert close[-1].error is not None
    assert close[-1].error.condition == condition


# ---------------------------------------------------------------------------- handshakes
@pytest.mark.parametrize("bytewise", [False, True])
def test_sasl_then_open_pipelined_behind_the_init(bytewise: bool) -> None:
    peer = Peer(machine())
    init = p.SaslInit(mechanism="ANONYMOUS")
    open_ = p.Open(container_id="c")
    events = peer.send(
        SASL_HEADER, encode_frame(0, init), AMQP_HEADER, encode_frame(0, open_), bytewise=bytewise
    )
    assert events == [ev.Authenticate("ANONYMOUS", b"", None)]
    got = peer.read()
    assert got[0] == SASL_HEADER
    assert set(got[1].sasl_server_mechanisms) == {"PLAIN", "ANONYMOUS"}
    # the header and open behind the init wait for the login's outcome
    assert peer.conn.sasl_outcome(True) == [ev.Opened("c", None, {})]
    outcome, header, server_open = peer.read()
    assert outcome == p.SaslOutcome(code=p.SASL_OK)
    assert header == AMQP_HEADER
    assert server_open.container_id == "ringmq"
    assert server_open.max_frame_size == 4096
    assert server_open.channel_max == 7
    assert server_open.idle_time_out == 1000
    assert server_open.offered_capabilities == ("ANONYMOUS-RELAY",)
    assert peer.conn.opened


def test_failed_login_closes_after_the_outcome() -> None:
    peer = Peer(machine())
    peer.send(SASL_HEADER, encode_frame(0, p.SaslInit(mechanism="PLAIN", initial_response=b"x")))
    assert peer.conn.sasl_outcome(False) == []
    assert peer.read()[-1] == p.SaslOutcome(code=p.SASL_AUTH)
    assert peer.conn.closed


def test_unknown_mechanism_is_refused() -> None:
    peer = Peer(machine())
    assert peer.send(SASL_HEADER, encode_frame(0, p.SaslInit(mechanism="GSSAPI"))) == []
    assert peer.read()[-1] == p.SaslOutcome(code=p.SASL_AUTH)
    assert peer.conn.closed


def test_no_sasl_is_an_anonymous_login() -> None:
    peer = Peer(machine())
    events = peer.send(AMQP_HEADER, encode_frame(0, p.Open(container_id="c")))
    assert events == [ev.Authenticate("ANONYMOUS", b"", None, sasl=False)]
    assert peer.conn.sasl_outcome(True) == [ev.Opened("c", None, {})]
    assert peer.read()[0] == AMQP_HEADER


@pytest.mark.parametrize("bytewise", [False, True])
def test_a_refused_login_without_sasl_is_an_open_then_a_close(bytewise: bool) -> None:
    peer = Peer(machine())
    events = peer.send(AMQP_HEADER, encode_frame(0, p.Open(container_id="c")), bytewise=bytewise)
    assert events == [ev.Authenticate("ANONYMOUS", b"", None, sasl=False)]
    assert peer.conn.sasl_outcome(False, "anonymous logins are off") == []
    header, opened, closed = peer.read()
    assert (header, opened.container_id) == (AMQP_HEADER, "ringmq")
    assert closed == p.Close(error=p.Error("amqp:unauthorized-access", "anonymous logins are off"))
    assert not peer.conn.closed  # the peer's open was dropped; its close ends the connection
    assert peer.send(encode_frame(0, p.Begin())) == []
    peer.send(encode_frame(0, p.Close()))
    assert peer.read() == []
    assert peer.conn.closed


def test_an_unknown_header_is_answered_with_ours_and_closed() -> None:
    peer = Peer(machine())
    assert peer.send(b"AMQP\x00\x00\x09\x01") == []
    assert peer.read() == [SASL_HEADER]
    assert peer.conn.closed


def test_a_frame_before_open_is_illegal() -> None:
    peer = Peer(machine())
    peer.send(AMQP_HEADER)
    peer.conn.sasl_outcome(True)
    peer.send(encode_frame(0, p.Begin()))
    closed_with(peer, "amqp:illegal-state")


# ---------------------------------------------------------------------------- sessions
def test_begin_end_and_channel_max() -> None:
    peer = opened()
    assert peer.send(encode_frame(1, p.End())) == [ev.SessionEnded(1, None)]
    assert peer.read() == [p.End()]
    peer.send(encode_frame(8, p.Begin()))
    closed_with(peer, "amqp:connection:framing-error")


def test_the_peers_close_is_answered() -> None:
    peer = opened()
    assert peer.send(encode_frame(0, p.Close())) == [ev.SessionEnded(1, None)]
    assert peer.read() == [p.Close()]
    assert peer.conn.closed


def test_after_the_brokers_close_only_the_peers_close_counts() -> None:
    peer = opened()
    peer.conn.close("amqp:connection:forced", "bye")
    closed_with(peer, "amqp:connection:forced")
    assert peer.send(encode_frame(1, p.End())) == []
    assert peer.read() == []
    peer.send(encode_frame(0, p.Close()))
    assert peer.conn.closed


def test_an_unattached_handle_ends_the_session() -> None:
    peer = opened()
    events = peer.send(encode_frame(1, p.Flow(handle=5, link_credit=1)))
    assert events == [ev.SessionEnded(1, None)]
    (end,) = peer.read()
    assert isinstance(end, p.End)
    assert end.error is not None
    assert end.error.condition == "amqp:session:unattached-handle"
    assert peer.send(encode_frame(1, p.End())) == []  # the answer to the broker's end


# ---------------------------------------------------------------------------- links in
def test_frames_behind_an_attach_wait_for_its_answer() -> None:
    peer = opened()
    a = p.Attach(name="s", handle=0, role=p.ROLE_SENDER, target=p.Target("q"))
    t = p.Transfer(handle=0, delivery_id=0, delivery_tag=b"t")
    events = peer.send(encode_frame(1, a), encode_frame(1, t, b"body"))
    assert [type(e) for e in events] == [ev.LinkAttaching]
    peer.conn.attach(1, a, source=None, target=a.target)
    events = peer.conn.receive_data(b"")
    assert [type(e) for e in events] == [ev.MessageReceived]
    attach, flow = peer.read()
    assert attach.role == p.ROLE_RECEIVER
    assert attach.max_message_size == 10_000
    assert flow.handle == 0
    assert flow.link_credit == 1000


def test_a_message_in_three_frames_and_an_aborted_one() -> None:
    peer = opened()
    attach_sender(peer)
    first = p.Transfer(handle=0, delivery_id=0, delivery_tag=b"t", more=True)
    more = p.Transfer(handle=0, more=True)
    last = p.Transfer(handle=0)
    events = peer.send(
        encode_frame(1, first, b"a"), encode_frame(1, more, b"b"), encode_frame(1, last, b"c")
    )
    assert events == [ev.MessageReceived(1, 0, 0, b"t", False, b"abc", None, 0)]
    aborted = p.Transfer(handle=0, aborted=True)
    first1 = p.Transfer(handle=0, delivery_id=1, delivery_tag=b"u", more=True)
    assert peer.send(encode_frame(1, first1, b"x"), encode_frame(1, aborted)) == []
    settled = p.Transfer(handle=0, delivery_id=2, delivery_tag=b"v", settled=True)
    (msg,) = peer.send(encode_frame(1, settled, b"y"))
    assert msg.settled
    assert msg.payload == b"y"


def test_a_message_over_the_size_limit_detaches_its_link() -> None:
    peer = opened(max_message_size=5)
    attach_sender(peer)
    peer.read()
    t = p.Transfer(handle=0, delivery_id=0, delivery_tag=b"t")
    assert peer.send(encode_frame(1, t, b"123456")) == [ev.LinkDetached(1, 0, True, None)]
    (detach,) = peer.read()
    assert isinstance(detach, p.Detach)
    assert detach.error is not None
    assert detach.error.condition == "amqp:link:message-size-exceeded"
    assert peer.send(encode_frame(1, p.Detach(handle=0, closed=True))) == []


def test_credit_is_topped_up_once_half_is_spent() -> None:
    peer = opened()
    attach_sender(peer)
    peer.read()
    frames = [
        encode_frame(1, p.Transfer(handle=0, delivery_id=i, delivery_tag=b"t", settled=True), b"")
        for i in range(501)
    ]
    assert len(peer.send(*frames)) == 501
    (flow,) = peer.read()
    assert (flow.delivery_count, flow.link_credit) == (501, 1000)


def test_paused_links_get_no_more_credit() -> None:
    peer = opened()
    attach_sender(peer)
    peer.read()
    peer.conn.pause_incoming(True)
    frames = [
        encode_frame(1, p.Transfer(handle=0, delivery_id=i, delivery_tag=b"t", settled=True), b"")
        for i in range(600)
    ]
    peer.send(*frames)
    assert [f for f in peer.read() if isinstance(f, p.Flow) and f.handle is not None] == []
    peer.conn.pause_incoming(False)
    (flow,) = peer.read()
    assert flow.link_credit == 1000


def test_settling_a_peers_deliveries() -> None:
    peer = opened()
    peer.conn.settle(1, 3, 5, p.Accepted())
    (d,) = peer.read()
    assert d == p.Disposition(
        role=p.ROLE_RECEIVER, first=3, last=5, settled=True, state=p.Accepted()
    )


# ---------------------------------------------------------------------------- links out
def test_credit_drain_and_echo() -> None:
    peer = opened()
    attach_receiver(peer)
    flow = p.Flow(next_incoming_id=0, incoming_window=100, handle=0, delivery_count=0,
                  link_credit=3)  # fmt: skip
    assert peer.send(encode_frame(1, flow)) == [ev.CreditGranted(1, 0, 3, False)]
    assert peer.conn.send_transfer(1, 0, b"t", b"m", False) == 0
    (t,) = peer.read()
    assert (t.delivery_id, t.settled) == (0, False)
    # the peer's view: delivery count 0 + credit 3; it has seen one: count 1, credit 2, drain
    drain = p.Flow(next_incoming_id=1, incoming_window=100, handle=0, delivery_count=1,
                   link_credit=2, drain=True)  # fmt: skip
    assert peer.send(encode_frame(1, drain)) == [ev.CreditGranted(1, 0, 2, True)]
    peer.conn.drained(1, 0)
    (echo,) = peer.read()
    assert (echo.delivery_count, echo.link_credit, echo.drain) == (3, 0, True)


def test_a_large_delivery_is_split_to_the_peers_frame_size() -> None:
    peer = opened()
    attach_receiver(peer)
    payload = bytes(range(256)) * 10
    peer.conn.send_transfer(1, 0, b"t", payload, True)
    frames = peer.read()
    assert len(frames) == 3  # the peer's max-frame-size is 1024
    assert [f.more for f in frames] == [True, True, False]
    assert frames[0].delivery_id == 0


def test_deliveries_past_id_255_from_the_links_pre_encoded_head() -> None:
    # ids 0..255 take the generic encoder, later ones the link's head (hotpath.transfer_frame);
    # a big one and a link whose handle is no small uint take the generic path again
    peer = opened()
    attach_receiver(peer)
    attach_receiver(peer, handle=300)
    peer.send(encode_frame(1, p.Flow(next_incoming_id=0, incoming_window=10_000,
                                     next_outgoing_id=0, outgoing_window=9)))  # fmt: skip
    for i in range(260):
        peer.conn.send_transfer(1, 0, i.to_bytes(8, "big"), b"m%d" % i, i % 2 == 0)
    peer.conn.send_transfer(1, 300, bytes(8), b"h", False)
    peer.conn.send_transfer(1, 0, b"short", b"s", True)
    peer.conn.send_transfer(1, 0, bytes(8), bytes(2000), True)
    frames = [f for f in peer.read() if isinstance(f, p.Transfer)]
    assert [(f.handle, f.delivery_id, f.settled) for f in frames[:260]] == [
        (0, i, i % 2 == 0) for i in range(260)
    ]
    assert [f.delivery_tag for f in frames[:260]] == [i.to_bytes(8, "big") for i in range(260)]
    assert [(f.handle, f.delivery_id) for f in frames[260:]] == [
        (300, 260), (0, 261), (0, 262), (0, None), (0, None)
    ]  # fmt: skip
    assert [f.more for f in frames[-3:]] == [True, True, False]


def test_transfers_wait_for_the_peers_window() -> None:
    peer = Peer(machine())
    peer.send(AMQP_HEADER, encode_frame(0, p.Open(container_id="c")))
    peer.conn.sasl_outcome(True)
    peer.send(encode_frame(1, p.Begin(next_outgoing_id=0, incoming_window=1, outgoing_window=9)))
    attach_receiver(peer)
    peer.conn.send_transfer(1, 0, b"a", b"1", True)
    peer.conn.send_transfer(1, 0, b"b", b"2", True)
    assert [f.delivery_tag for f in peer.read()] == [b"a"]
    peer.send(encode_frame(1, p.Flow(next_incoming_id=1, incoming_window=5, next_outgoing_id=0)))
    assert [f.delivery_tag for f in peer.read()] == [b"b"]


def test_the_peers_disposition() -> None:
    peer = opened()
    d = p.Disposition(role=p.ROLE_RECEIVER, first=2, last=4, settled=True, state=p.Released())
    assert peer.send(encode_frame(1, d)) == [ev.Settled(1, 2, 4, True, p.Released())]


def test_the_peers_detach_is_answered() -> None:
    peer = opened()
    attach_receiver(peer)
    assert peer.send(encode_frame(1, p.Detach(handle=0, closed=True))) == [
        ev.LinkDetached(1, 0, True, None)
    ]
    assert peer.read() == [p.Detach(handle=0, closed=True)]
    peer.conn.detach(1, 0, "amqp:resource-deleted", "gone")  # no link: nothing
    assert peer.read() == []


# ---------------------------------------------------------------------------- time
def test_idle_timeouts() -> None:
    peer = Peer(machine(idle_timeout_ms=1000))
    peer.send(AMQP_HEADER, encode_frame(0, p.Open(container_id="c", idle_time_out=400)))
    peer.conn.sasl_outcome(True)
    peer.read()
    conn = peer.conn
    conn.tick(0)
    conn.tick(100)
    assert conn.data_to_send() == b""
    conn.tick(250)  # half the peer's idle timeout without output: an empty frame
    assert conn.data_to_send() == EMPTY_FRAME
    peer.send(EMPTY_FRAME)
    conn.tick(1500)
    conn.data_to_send()
    conn.tick(3400)
    assert not [f for f in peer.read() if isinstance(f, p.Close)]
    conn.tick(3600)  # silent since 1500: more than twice the broker's idle timeout
    closed_with(peer, "amqp:resource-limit-exceeded")
    conn.tick(3700)
    conn.tick(5800)  # no close from the peer: the broker stops waiting
    assert conn.closed


# ---------------------------------------------------------------------------- robustness
def test_a_decode_error_closes_with_its_condition() -> None:
    peer = opened()
    peer.send(b"\x00\x00\x00\x0c\x02\x00\x00\x01\x00\x53\x13\xff")
    closed_with(peer, "amqp:decode-error")
    assert peer.conn.state is State.CLOSE_SENT


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes_give_events_or_a_close(data: bytes) -> None:
    peer = opened()
    attach_sender(peer)
    events = peer.send(data)
    assert all(isinstance(e, ev.Event.__args__) for e in events)
    peer.read()  # whatever the broker answered decodes


def test_a_refused_attach_waits_for_the_peers_detach() -> None:
    peer = opened()
    a = p.Attach(name="r", handle=0, role=p.ROLE_RECEIVER, source=p.Source("nope"))
    peer.send(encode_frame(1, a))
    peer.conn.refuse_attach(1, a, "amqp:not-found", "no queue")
    attach, detach = peer.read()
    assert attach.source is None
    assert detach.error is not None
    assert detach.error.condition == "amqp:not-found"
    assert peer.send(encode_frame(1, p.Detach(handle=0, closed=True))) == []
    assert peer.read() == []  # the session goes on
    attach_receiver(peer)  # and the handle is free again


def test_the_window_counts_in_serial_numbers() -> None:
    peer = opened()
    attach_receiver(peer)
    # a flow whose ids are behind the broker's (in flight) or wrapped around 2**32
    peer.send(encode_frame(1, p.Flow(next_incoming_id=2**32 - 1, incoming_window=2)))
    peer.conn.send_transfer(1, 0, b"a", b"1", True)  # room: (2**32 - 1 + 2 - 0) mod 2**32 = 1
    peer.conn.send_transfer(1, 0, b"b", b"2", True)
    assert [f.delivery_tag for f in peer.read()] == [b"a"]
    peer.send(encode_frame(1, p.Flow(next_incoming_id=1, incoming_window=0)))  # closed
    assert peer.read() == []
    peer.send(encode_frame(1, p.Flow(next_incoming_id=1, incoming_window=1)))
    assert [f.delivery_tag for f in peer.read()] == [b"b"]
