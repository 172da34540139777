"""The receiving fast path: whole-message transfers read in place, as runs per link.

Theory of operation
-------------------
A publisher's connection is mostly Transfer frames, each holding a whole message. `take`
reads such frames straight from the frame reader's bytes (`FrameReader.unread`), without a
`Frame`, a `Transfer` or an event per message: it takes the handle, the delivery id and
`settled` from the bytes, does the session's window and the link's credit arithmetic inline
(the same steps as `Session.transfer`, whose `top_up` widens them again) and collects the
payloads of consecutive messages on one link (consecutive delivery ids, all pre-settled or
all not) into one `MessagesReceived` event.

It is a guard in front of the general path (`Connection._frame`): it stops, leaving the
frame to the general path, at the first frame it does not recognise, i.e. anything but an
AMQP frame on a begun session whose body is a Transfer in the common form (a list8 of at
most the eleven fields, handle and delivery id uint constructors, the tag binary or null,
message-format 0, `more`, `aborted`, `resume` and `rcv-settle-mode` absent or false, no
delivery state) on an attached receiving link between messages, within the window and the
message size limit, and whole in the buffer. So a multi-frame or aborted delivery, a
transactional one, an unknown handle, an exhausted window, a frame over max-frame-size or a
malformed one goes the general way unchanged, and the general path raises the errors.
Pure: no I/O, no clock.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Final

from ringmq.amqp10.events import Event, MessagesReceived
from ringmq.amqp10.session import HALF_CREDIT, HALF_WINDOW, SERIAL

if TYPE_CHECKING:
    from ringmq.amqp10.session import Link, Session

_HEAD: Final = struct.Struct(">IHHIBB")
"""size, data offset and type, channel; the Transfer's descriptor and list8 header (its
size and count)."""
_DOFF_AMQP: Final = 0x0200  # data offset 2, type 0 (AMQP)
_TRANSFER_LIST8: Final = 0x005314C0  # descriptor 0x14 (smallulong), list8
_U32: Final = struct.Struct(">I")
_MIN_SIZE: Final = _HEAD.size + 2
"""The frame and Transfer heads, a handle and a delivery id."""
_FALSE_OR_NULL: Final = (0x40, 0x42)
_BOOLEAN_OR_NULL: Final = (0x40, 0x41, 0x42)
_TAIL: Final = (
    (0x40,),  # rcv-settle-mode: absent
    (0x40,),  # state: absent (a transactional delivery goes the general way)
    _FALSE_OR_NULL,  # resume
    _FALSE_OR_NULL,  # aborted
    _BOOLEAN_OR_NULL,  # batchable (a hint)
)
"""The constructors taken for the fields after `more` (fields 6 to 10)."""


def take(
    sessions: dict[int, Session],
    buf: bytes,
    pos: int,
    max_frame_size: int,
    events: list[Event],
) -> int:
    """Read the whole-message transfers at `pos` of `buf` (see the module docstring), append
    their runs to `events`; return the position of the first frame left unread."""
    n = len(buf)
    payloads: list[bytes] = []
    settled_run = False
    last_id = -2
    channel_at = handle_at = -1
    s: Session | None = None
    link: Link | None = None
    taken = 0
    """Messages of the current link not yet counted in its window and credit."""
    left = credit = max_size = 0
    unpack = _HEAD.unpack_from
    try:
        while n - pos >= _MIN_SIZE:
            size, doff, channel, head, list_size, count = unpack(buf, pos)
            end = pos + size
            o = pos + 14
            body_end = o - 1 + list_size
            if (
                head != _TRANSFER_LIST8
                or doff != _DOFF_AMQP
                or end > n
                or size > max_frame_size
                or body_end > end
                or count < 2
                or count > 11
            ):
                break
            # handle, delivery-id: uint
            code = buf[o]
            if code == 0x43:
                handle = 0
                o += 1
            elif code == 0x52:
                handle = buf[o + 1]
                o += 2
            elif code == 0x70:
                handle = _U32.unpack_from(buf, o + 1)[0]
                o += 5
            else:
                break
            code = buf[o]
            if code == 0x70:
                did = _U32.unpack_from(buf, o + 1)[0]
                o += 5
            elif code == 0x52:
                did = buf[o + 1]
                o += 2
            elif code == 0x43:
                did = 0
                o += 1
            else:
                break
            settled = False
            if count > 2:  # delivery-tag: binary or null
                code = buf[o]
                if code == 0xA0:
                    o += 2 + buf[o + 1]
                elif code == 0x40:
                    o += 1
                else:
                    break
                if count > 3:  # message-format: 0
                    code = buf[o]
                    if code == 0x43 or code == 0x40:
                        o += 1
                    elif code == 0x52 and buf[o + 1] == 0:
                        o += 2
                    else:
                        break
                    if count > 4:  # settled
                        code = buf[o]
                        if code == 0x41:
                            settled = True
                        elif code != 0x42 and code != 0x40:
                            break
                        o += 1
                        if count > 5:  # more: false; the rest as _TAIL takes them
                            if buf[o] not in _FALSE_OR_NULL:
                                break
                            o += 1
                            i = 0
                            while i < count - 6 and o < body_end and buf[o] in _TAIL[i]:
                                o += 1
                                i += 1
                            if i < count - 6:
                                break
            if o != body_end:
                break
            if handle != handle_at or channel != channel_at:  # a run on another link
                if taken:
                    _count(s, link, taken)  # type: ignore[arg-type]
                    taken = 0
                s = sessions.get(channel)
                if s is None or s.ending:
                    break
                link = s.links.get(handle)
                if link is None or not link.receiving or link.detaching or link.first:
                    break
                channel_at, handle_at = channel, handle
                left = s.incoming_left
                credit = link.credit
                max_size = link.max_message_size
                last_id = -2
            if left < 1 or end - o > max_size:
                break
            # the window and the credit, as Session.transfer counts them (written back below)
            left -= 1
            credit -= 1
            taken += 1
            if did == last_id + 1 and settled is settled_run:
                payloads.append(buf[o:end])
            else:
                payloads = [buf[o:end]]
                settled_run = settled
                events.append(MessagesReceived(channel, handle, did, settled, payloads))
            last_id = did
            pos = end
            if left < HALF_WINDOW or credit < HALF_CREDIT:
                assert s is not None
                assert link is not None
                _count(s, link, taken)
                taken = 0
                s.top_up(link)
                left = s.incoming_left
                credit = link.credit
    except (IndexError, struct.error):
        pass  # a body cut short: the general path says why
    if taken:
        _count(s, link, taken)  # type: ignore[arg-type]
    return pos


def _count(s: Session, link: Link, taken: int) -> None:
    # `taken` transfers on `link`: the session's window and the link's credit, as
    # Session.transfer counts each
    s.incoming_left -= taken
    s.next_incoming_id = (s.next_incoming_id + taken) % SERIAL
    link.delivery_count = (link.delivery_count + taken) % SERIAL
    link.credit -= taken
