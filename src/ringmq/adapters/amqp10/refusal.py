"""AMQP 1.0's refusal by a follower that does not relay: a close that redirects.

The client's SASL exchange (if any) is answered (any mechanism succeeds: nothing is served),
then the AMQP header, an open and a close whose error is `amqp:connection:redirect` with the
leader's `network-host`, `port` and `hostname` in its info (AMQP 1.0 part 2, 2.8.16: the
fields a client reads to reconnect there). Sans-IO: `receive(bytes) -> (bytes, done)`.
"""

from __future__ import annotations

from ringmq.amqp10.frames import AMQP_HEADER, SASL_HEADER, Frame, FrameReader, encode_frame
from ringmq.amqp10.performatives import Close, Error, Open, SaslMechanisms, SaslOutcome
from ringmq.amqp10.types import Symbol, UInt
from ringmq.core.texts import not_the_leader

REDIRECT = "amqp:connection:redirect"


class Amqp10Refuser:
    """Refuses one AMQP 1.0 connection, naming the leader (see the module docstring)."""

    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.port = port
        self.reader = FrameReader()
        self.done = False

    def receive(self, data: bytes) -> tuple[bytes, bool]:
        self.reader.feed(data)
        out: list[bytes] = []
        while not self.done and (item := self.reader.next_frame()) is not None:
            if isinstance(item, Frame):  # the SASL init (or response): let it in
                out.append(encode_frame(0, SaslOutcome()))
                self.reader.expect_header()
            elif item.raw == SASL_HEADER:
                mechanisms = SaslMechanisms(("PLAIN", "ANONYMOUS", "EXTERNAL"))
                out += [SASL_HEADER, encode_frame(0, mechanisms)]
            else:
                out += [AMQP_HEADER, encode_frame(0, Open("ringmq")), self.close_frame()]
                self.done = True
        return b"".join(out), self.done

    def close_frame(self) -> bytes:
        info = {
            Symbol("network-host"): self.host,
            Symbol("port"): UInt(self.port),
            Symbol("hostname"): self.host,
        }
        text = not_the_leader(self.host, self.port)
        return encode_frame(0, Close(Error(REDIRECT, text, info)))
