"""The AMQP 0-9-1 adapter: 0-9-1 commands as core calls, core effects as 0-9-1 frames.

`connection.Amqp091Handler` is a 0-9-1 connection behind the server's `Handler` seam
(`connection.Amqp091Handlers`, its factory, is the "amqp091" row of `ringmq.node`'s table);
`runs.py` batches a read's publish runs.

Importing it registers the 0-9-1 message form with the core (`message.AMQP091_FORM`).
"""

from __future__ import annotations

from ringmq.adapters.amqp091.adapter import Amqp091, check_login
from ringmq.adapters.amqp091.frames import as_frames, deliver_method, frame_of, reply_code
from ringmq.adapters.amqp091.message import AMQP091_FORM, build

__all__ = [
    "AMQP091_FORM",
    "Amqp091",
    "as_frames",
    "build",
    "check_login",
    "deliver_method",
    "frame_of",
    "reply_code",
]
