"""STOMP 1.0 / 1.1 / 1.2, sans-IO: the frame codec and the connection machine.

Bytes in, frames out (`StompConnection.receive_data` / `next_frame`); frames queued, bytes out
(`data_to_send`). No sockets, no clock, no broker: `ringmq.adapters.stomp` turns frames into
core calls.
"""

from __future__ import annotations

from ringmq.stomp.connection import MIN_HEARTBEAT_MS, REQUIRED, Phase, StompConnection, negotiate
from ringmq.stomp.frames import (
    V1_0,
    V1_1,
    V1_2,
    VERSIONS,
    Command,
    Frame,
    FrameError,
    FrameLimits,
    FrameReader,
    encode,
    escape,
    unescape,
)

__all__ = [
    "MIN_HEARTBEAT_MS",
    "REQUIRED",
    "V1_0",
    "V1_1",
    "V1_2",
    "VERSIONS",
    "Command",
    "Frame",
    "FrameError",
    "FrameLimits",
    "FrameReader",
    "Phase",
    "StompConnection",
    "encode",
    "escape",
    "negotiate",
    "unescape",
]
