"""The stream protocol's refusal by a follower that does not relay: a Close naming the leader.

The client's first frame (`rstream` sends PeerProperties) is answered with the server's Close
command, code STREAM_NOT_AVAILABLE and the reason `not the leader: connect to HOST:PORT` (the
leader's stream port), and the connection is closed; `rstream` raises it as `ServerError("Server
closed, reason: ...")` from the request it was waiting on. Sans-IO: `receive(bytes) -> (bytes,
done)`.
"""

from __future__ import annotations

import struct

from ringmq.core.texts import not_the_leader
from ringmq.streamproto.codec import Code, Key, Writer

_SIZE = struct.Struct(">I")


class StreamRefuser:
    """Refuses one stream protocol connection, naming the leader (see the module docstring)."""

    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.port = port
        self.head = b""

    def receive(self, data: bytes) -> tuple[bytes, bool]:
        self.head += data
        # answer once the first frame is whole (rstream's PeerProperties; it reads nothing
        # before); a frame larger than the refusal's input cap is cut off by the connection
        whole = len(self.head) >= _SIZE.size and (
            len(self.head) >= _SIZE.size + _SIZE.unpack_from(self.head)[0]
        )
        if not whole:
            return b"", False
        reason = not_the_leader(self.host, self.port)
        close = Writer().u32(0).u16(Code.STREAM_NOT_AVAILABLE).string(reason[:255])
        return close.frame(Key.CLOSE), True
