"""AMQP 0-9-1's refusal by a follower that does not relay: connection.close 530.

After the protocol header the client gets connection.start, after its start-ok
connection.tune, and after its connection.open a connection.close 530 NOT_ALLOWED whose text
names the leader: where RabbitMQ refuses a vhost, so clients report a refused access with the
broker's text (pika: `ProbableAccessDeniedError` carrying "(530) NOT_ALLOWED - not the
leader: ..."), not a failed login (what a close right after start-ok reads as).
Sans-IO: `receive(bytes) -> (bytes, done)`.
"""

from __future__ import annotations

from ringmq.amqp.frames import FrameReader, MethodFrame, ProtocolHeader, encode_method_frame
from ringmq.amqp.reply_codes import ReplyCode
from ringmq.amqp.spec import (
    ConnectionClose,
    ConnectionOpen,
    ConnectionStart,
    ConnectionStartOk,
    ConnectionTune,
)
from ringmq.core.texts import not_the_leader


class Amqp091Refuser:
    """Refuses one AMQP 0-9-1 connection, naming the leader (see the module docstring)."""

    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.port = port
        self.reader = FrameReader(expect_protocol_header=True)
        self.done = False

    def receive(self, data: bytes) -> tuple[bytes, bool]:
        self.reader.feed(data)
        out: list[bytes] = []
        while not self.done and (frame := self.reader.next_frame()) is not None:
            if isinstance(frame, ProtocolHeader):
                start = ConnectionStart(server_properties={"product": "ringmq"})
                out.append(encode_method_frame(0, start))
            elif not isinstance(frame, MethodFrame):
                continue
            elif isinstance(frame.method, ConnectionStartOk):
                out.append(encode_method_frame(0, ConnectionTune(0, 131072, 0)))
            elif isinstance(frame.method, ConnectionOpen):
                text = f"NOT_ALLOWED - {not_the_leader(self.host, self.port)}"
                out.append(encode_method_frame(0, ConnectionClose(ReplyCode.NOT_ALLOWED, text)))
                self.done = True
        return b"".join(out), self.done
