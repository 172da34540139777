"""A broker with MQTT handlers driven directly: bytes in, effects routed, packets out."""

from __future__ import annotations

from typing import Any

from ringmq.adapters.handler import HandlerContext, HandlerLimits, Peer, make_login
from ringmq.adapters.mqtt import MqttHandler, mqtt_handler
from ringmq.core.broker import Broker
from ringmq.core.effects import Effect
from ringmq.core.throttle import LoginGuard
from ringmq.mqtt import V311, PacketReader, decode, encode
from ringmq.mqtt.packets import ConnAck, Connect, Packet, Will
from ringmq.mqtt.properties import Properties

LIMITS = HandlerLimits(max_message_size=1 << 20, frame_max=131072, channel_max=16, heartbeat_s=60)


class Client:
    """One MQTT client on a handler: encode what it sends, decode what it receives."""

    def __init__(self, net: Net, handler: MqttHandler, version: int) -> None:
        self.net = net
        self.handler = handler
        self.version = version
        self.reader = PacketReader()
        self.inbox: list[Packet] = []

    def send(self, *packets: Any) -> list[Packet]:
        """Send packets (or raw bytes); return what the client received since the last read."""
        data = b"".join(p if isinstance(p, bytes) else encode(p, self.version) for p in packets)
        self.net.route(self.handler.receive_data(data, self.net.now_ms))
        return self.read()

    def read(self) -> list[Packet]:
        self.reader.feed(self.handler.data_to_send())
        while (got := self.reader.next_packet()) is not None:
            self.inbox.append(decode(got[0], got[1], self.version))
        out, self.inbox = self.inbox, []
        return out

    def lose(self) -> None:
        """The socket goes away."""
        self.net.route(self.handler.connection_lost(self.net.now_ms))
        self.net.handlers.pop(self.handler.conn_id, None)


class Net:
    """The server's part: handlers by connection id, effects applied to their targets."""

    def __init__(self, broker: Broker | None = None) -> None:
        self.broker = broker or Broker()
        self.guard = LoginGuard()
        self.handlers: dict[int, MqttHandler] = {}
        self.next_id = 1
        self.now_ms = 1_000_000

    def route(self, effects: list[Effect]) -> None:
        for e in effects:
            h = self.handlers.get(e.conn_id)
            if h is not None:
                h.apply(e)
        # What the server's immediate deadline does after a batch that left queues dirty.
        while more := self.broker.dispatch_pending(self.now_ms):
            for e in more:
                h = self.handlers.get(e.conn_id)
                if h is not None:
                    h.apply(e)

    def tick(self, ms: int = 0) -> None:
        self.now_ms += ms
        for h in list(self.handlers.values()):
            self.route(h.tick(self.now_ms, self.now_ms))

    def open(self, version: int = V311) -> Client:
        conn_id = self.next_id
        self.next_id += 1
        peer = Peer("127.0.0.1", 40000 + conn_id, "127.0.0.1", 1883)
        ctx = HandlerContext(
            self.broker, conn_id, peer, LIMITS, make_login(self.broker, self.guard, peer, "mqtt")
        )
        h = mqtt_handler(ctx)
        self.handlers[conn_id] = h
        return Client(self, h, version)

    def connect(
        self,
        client_id: str = "c1",
        version: int = V311,
        *,
        clean: bool = True,
        will: Will | None = None,
        props: Properties | None = None,
        user: str = "guest",
        password: bytes = b"guest",
        keep_alive: int = 60,
    ) -> tuple[Client, ConnAck]:
        c = self.open(version)
        got = c.send(Connect(version, client_id, clean, keep_alive, user, password, will, props))
        assert isinstance(got[0], ConnAck), got
        c.inbox = got[1:]  # deliveries of a resumed session follow the CONNACK
        return c, got[0]
