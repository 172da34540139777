"""STOMP's refusal by a follower that does not relay: an ERROR frame naming the leader.

Answers the client's first frame (CONNECT or STOMP) with ERROR and closes (STOMP 1.2: the
server closes the connection after an ERROR). Sans-IO: `receive(bytes) -> (bytes, done)`.
"""

from __future__ import annotations

from ringmq.core.texts import not_the_leader
from ringmq.stomp.frames import encode


class StompRefuser:
    """Refuses one STOMP connection, naming the leader (see the module docstring)."""

    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.port = port
        self.head = b""

    def receive(self, data: bytes) -> tuple[bytes, bool]:
        self.head += data
        if b"\n\n" not in self.head.replace(b"\r\n", b"\n"):
            return b"", False
        text = not_the_leader(self.host, self.port)
        body = text.encode()
        headers = {
            "message": text,
            "content-type": "text/plain",
            "content-length": str(len(body)),
        }
        return encode("ERROR", headers, body, "1.2"), True
