"""Stateful test: random client and server channel operations against a tiny model."""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from ringmq.amqp import spec
from ringmq.amqp.frames import RawContent
from ringmq.amqp.properties import BasicProperties, encode_properties
from ringmq.protocol import ChannelState, ConnectionState
from ringmq.protocol.events import (
    ChannelClosed,
    ChannelOpened,
    Command,
    ConnectionClosed,
    Event,
    ProtocolError,
)
from tests.unit.protocol.client import Client, m, publish

CHANNELS = st.integers(1, 4)
PROPS = encode_properties(BasicProperties(delivery_mode=2))


class ChannelMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self._fresh()

    def _fresh(self) -> None:
        self.client = Client()
        self.client.handshake(frame_max=4096)
        #: model: channel -> "open" | "closing"; absent channels are not in it
        self.model: dict[int, str] = {}
        self.broken = False  # a connection error happened: the run is over

    def _send(self, data: bytes) -> list[Event]:
        events = self.client.send(data)
        self.client.received()
        return events

    def _expect_connection_error(self, events: list[Event], code: int) -> None:
        assert [(e.channel, e.reply_code) for e in events if isinstance(e, ProtocolError)] == [
            (0, code)
        ]
        assert self.client.state() is ConnectionState.CLOSING
        self.broken = True

    @precondition(lambda self: not self.broken)
    @rule(n=CHANNELS)
    def client_opens(self, n: int) -> None:
        events = self._send(m(n, spec.ChannelOpen()))
        if self.model.get(n) == "closing":
            assert events == []  # dropped until Close-Ok, as RabbitMQ does
        elif n in self.model:
            self._expect_connection_error(events, 504)
        else:
            assert events == [ChannelOpened(n)]
            self.model[n] = "open"

    @precondition(lambda self: not self.broken)
    @rule(n=CHANNELS)
    def client_closes(self, n: int) -> None:
        events = self._send(m(n, spec.ChannelClose(200, "", 0, 0)))
        if n in self.model:
            assert events == [ChannelClosed(n)]
            del self.model[n]
        else:
            self._expect_connection_error(events, 504)

    @precondition(lambda self: not self.broken)
    @rule(n=CHANNELS, code=st.sampled_from([404, 405, 406]))
    def server_closes(self, n: int, code: int) -> None:
        self.client.conn.close_channel(n, code, "from the broker")
        frames = self.client.methods()
        if self.model.get(n) == "open":
            [(channel, close)] = frames
            assert channel == n
            assert isinstance(close, spec.ChannelClose)
            assert (close.reply_code, close.class_id, close.method_id) == (code, 0, 0)
            self.model[n] = "closing"
        else:
            assert frames == []

    @precondition(lambda self: not self.broken)
    @rule(n=CHANNELS)
    def client_close_ok(self, n: int) -> None:
        events = self._send(m(n, spec.ChannelCloseOk()))
        if self.model.get(n) == "closing":
            assert events == [ChannelClosed(n)]
            del self.model[n]
        else:
            assert events == []

    @precondition(lambda self: not self.broken)
    @rule(n=CHANNELS, body=st.binary(max_size=9000))
    def client_publishes(self, n: int, body: bytes) -> None:
        events = self._send(publish(n, body))
        state = self.model.get(n)
        if state == "open":
            content = RawContent(60, len(body), PROPS, body)
            assert events == [Command(n, spec.BasicPublish(routing_key="q"), content)]
        elif state == "closing":
            assert events == []
        else:
            self._expect_connection_error(events, 504)

    @precondition(lambda self: not self.broken)
    @rule(n=CHANNELS, tag=st.integers(0, 2**64 - 1))
    def server_delivers(self, n: int, tag: int) -> None:
        sent = self.client.conn.send_deliver(n, "c", tag, False, "", "q", PROPS, b"m")
        assert sent == (self.model.get(n) == "open")
        self.client.received()

    @precondition(lambda self: self.broken)
    @rule()
    def finish_and_reconnect(self) -> None:
        # after a connection error only Close-Ok matters; then a new connection starts
        assert self._send(m(1, spec.ChannelOpen())) == []
        events = self.client.send(m(0, spec.ConnectionCloseOk()))
        assert isinstance(events[-1], ConnectionClosed)
        assert self.client.conn.closed
        self._fresh()

    @invariant()
    def agree(self) -> None:
        if self.broken:
            return
        conn = self.client.conn
        assert sorted(conn.open_channels) == sorted(k for k, v in self.model.items() if v == "open")
        for n in range(1, 5):
            want = {"open": ChannelState.OPEN, "closing": ChannelState.CLOSING}.get(
                self.model.get(n, "")
            )
            assert conn.channel_state(n) is want


TestChannelMachine = ChannelMachine.TestCase
# Bounded whatever the profile: this suite's budget is tight on shared CI cores.
TestChannelMachine.settings = settings(
    settings.default, max_examples=60, stateful_step_count=40, deadline=None
)
