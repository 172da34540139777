"""A scripted AMQP client for driving a ServerConnection in tests (no sockets)."""

from __future__ import annotations

from ringmq.amqp import spec
from ringmq.amqp.frames import (
    PROTOCOL_HEADER,
    Frame,
    FrameReader,
    MethodFrame,
    encode_content_frames,
    encode_method_frame,
)
from ringmq.amqp.properties import BasicProperties, encode_properties
from ringmq.amqp.tables import encode_table
from ringmq.protocol import ConnectionState, ServerConnection
from ringmq.protocol.events import Event, LoginRequested, OpenRequested

CLIENT_PROPERTIES = {
    "product": "test-client",
    "capabilities": {"connection.blocked": True, "authentication_failure_close": True},
}


def m(channel: int, method: spec.Method) -> bytes:
    return encode_method_frame(channel, method)


def publish(channel: int, body: bytes, *, routing_key: str = "q", frame_max: int = 4096) -> bytes:
    props = encode_properties(BasicProperties(delivery_mode=2))
    method = spec.BasicPublish(routing_key=routing_key)
    return encode_content_frames(channel, method, props, body, frame_max)


def plain(user: str = "guest", password: str = "guest") -> bytes:
    return b"\x00" + user.encode() + b"\x00" + password.encode()


def amqplain(user: str = "guest", password: str = "guest") -> bytes:
    return encode_table({"LOGIN": user, "PASSWORD": password})[4:]


class Client:
    """Feeds bytes to a ServerConnection and parses what it sends back."""

    def __init__(self, conn: ServerConnection | None = None) -> None:
        self.conn = conn or ServerConnection()
        self._reader = FrameReader(0)

    def state(self) -> ConnectionState:
        """The connection state (a call, so type checkers do not narrow it across steps)."""
        return self.conn.state

    def send(self, data: bytes, now_ms: int | None = None) -> list[Event]:
        return self.conn.receive_data(data, now_ms)

    def received(self) -> list[Frame]:
        """Frames the server queued since the last call."""
        self._reader.feed(self.conn.data_to_send())
        frames: list[Frame] = []
        while (frame := self._reader.next_frame()) is not None:
            frames.append(frame)
        return frames

    def methods(self) -> list[tuple[int, spec.Method]]:
        return [(f.channel, f.method) for f in self.received() if isinstance(f, MethodFrame)]

    def handshake(self, *, heartbeat: int = 60, frame_max: int = 131072) -> None:
        """Bring the connection to OPEN with the defaults; drains the output."""
        assert self.send(PROTOCOL_HEADER) == []
        events = self.send(
            m(0, spec.ConnectionStartOk(CLIENT_PROPERTIES, "PLAIN", plain(), "en_US"))
        )
        assert isinstance(events[0], LoginRequested)
        assert self.conn.accept_login() == []
        events = self.send(
            m(0, spec.ConnectionTuneOk(2047, frame_max, heartbeat)) + m(0, spec.ConnectionOpen("/"))
        )
        assert events == [OpenRequested("/")]
        assert self.conn.accept_open() == []
        self.received()

    def open_channel(self, channel: int = 1) -> None:
        self.send(m(channel, spec.ChannelOpen()))
        assert self.methods() == [(channel, spec.ChannelOpenOk())]
