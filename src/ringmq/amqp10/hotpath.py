"""The per-message performatives as bytes: Transfer and Disposition without dataclasses.

A receiver link sends one Transfer per message and a receiver settles with Dispositions, so
these are built from precomputed pieces (constant descriptors and booleans, a table of the
small uints) and read field by field, byte for byte what the generic path (``composite.py``)
writes and reads: the tests compare them. ``performatives.py`` wraps them in its dataclasses.
Pure: no I/O, nothing of ringmq outside this package.
"""

from __future__ import annotations

import struct
from typing import Final

from ringmq.amqp10.codec import Buffer

_I: Final = struct.Struct(">I")
_II: Final = struct.Struct(">II")
_TRANSFER_HEAD: Final = b"\x00\x53\x14"
_DISPOSITION_HEAD: Final = b"\x00\x53\x15"
ACCEPTED_CODE: Final = 0x24
RELEASED_CODE: Final = 0x26
ACCEPTED_BYTES: Final = b"\x00\x53\x24\x45"
"""The accepted outcome, encoded (an empty described list)."""
RELEASED_BYTES: Final = b"\x00\x53\x26\x45"
_STATE_CODES: Final = {ACCEPTED_BYTES: ACCEPTED_CODE, RELEASED_BYTES: RELEASED_CODE}


def _uint(v: int) -> bytes:
    if v == 0:
        return b"\x43"
    if v < 256:
        return bytes((0x52, v))
    return b"\x70" + _I.pack(v)


_SMALL_UINTS: Final = tuple(_uint(v) for v in range(256))
_SETTLED_MORE: Final = {
    (False, False): b"\x42",
    (True, False): b"\x41",
    (False, True): b"\x42\x41",
    (True, True): b"\x41\x41",
}


def _list_bytes(head: bytes, count: int, body: bytes) -> bytes:
    n = len(body) + 1
    if n < 256:
        return head + bytes((0xC0, n, count)) + body
    return head + b"\xd0" + _II.pack(n + 3, count) + body


def encode_transfer(
    handle: int,
    delivery_id: int,
    delivery_tag: bytes,
    message_format: int = 0,
    settled: bool = False,
    more: bool = False,
) -> bytes:
    """The encoded body of a first Transfer (what a receiver link sends per message).

    Byte for byte what ``Transfer(handle, delivery_id, delivery_tag, message_format, settled,
    more).described()`` encodes.
    """
    u = _SMALL_UINTS
    n = len(delivery_tag)
    body = b"".join(
        (
            u[handle] if handle < 256 else _uint(handle),
            u[delivery_id] if delivery_id < 256 else _uint(delivery_id),
            bytes((0xA0, n)) if n < 256 else b"\xb0" + _I.pack(n),
            delivery_tag,
            u[message_format] if message_format < 256 else _uint(message_format),
            _SETTLED_MORE[settled, more],
        )
    )
    return _list_bytes(_TRANSFER_HEAD, 6 if more else 5, body)


_FRAME_HEAD: Final = struct.Struct(">BBH")
_TRANSFER_FRAMES: Final = {n: struct.Struct(f">I{n}sIH8s2s") for n in (12, 13)}
"""By the length of the head (handle 0 is one byte, handles 1-255 two)."""
TRANSFER_FRAME_SIZE: Final = _TRANSFER_FRAMES[13].size
"""The most bytes before the payload in `transfer_frame`'s frames."""
_TAG8: Final = 0xA008  # binary of 8 bytes: a core delivery tag
_FORMAT_SETTLED: Final = (b"\x43\x42", b"\x43\x41")  # message-format 0, then settled


def transfer_frame_head(channel: int, handle: int) -> bytes | None:
    """What does not change in the frames of `transfer_frame` for a link: the frame header
    after the size (data offset, type, channel) and the Transfer up to its delivery id, cut
    from `encode_transfer`'s own bytes; None when `handle` is not a small uint."""
    if handle >= 256:
        return None
    body = encode_transfer(handle, 256, bytes(8), 0, False)
    # the delivery id's value (4), the tag (2 + 8), message-format and settled (2) follow
    return _FRAME_HEAD.pack(2, 0, channel) + body[: len(body) - 16]


def transfer_frame(
    head: bytes, delivery_id: int, delivery_tag: bytes, settled: bool, payload: bytes
) -> bytes:
    """One frame holding a whole delivery: byte for byte ``encode_body_frame(channel,
    encode_transfer(handle, delivery_id, delivery_tag, 0, settled), payload)`` where ``head``
    is ``transfer_frame_head(channel, handle)``, for a ``delivery_id`` of 256 or more (the
    4-byte uint form) and an 8-byte ``delivery_tag``; the caller guards both."""
    return transfer_frame_start(head, delivery_id, delivery_tag, settled, len(payload)) + payload


def transfer_frame_start(
    head: bytes, delivery_id: int, delivery_tag: bytes, settled: bool, payload_size: int
) -> bytes:
    """`transfer_frame`'s bytes before the payload (of ``payload_size`` bytes), for a writer
    that queues the payload's parts as they are."""
    frame = _TRANSFER_FRAMES[len(head)]
    return frame.pack(
        frame.size + payload_size, head, delivery_id, _TAG8, delivery_tag, _FORMAT_SETTLED[settled]
    )


def disposition_body(
    role: bool, first: int, last: int | None, settled: bool, state: bytes | None
) -> bytes:
    """The encoded body of a Disposition whose state (if any) is already encoded: byte for
    byte what the generic path writes."""
    u = _SMALL_UINTS
    body = (b"\x41" if role else b"\x42") + (u[first] if first < 256 else _uint(first))
    count = 2
    if last is not None or settled or state is not None:
        body += b"\x40" if last is None else (u[last] if last < 256 else _uint(last))
        count = 3
    if settled or state is not None:
        body += b"\x41" if settled else b"\x40"
        count = 4
    if state is not None:
        body += state
        count = 5
    return _list_bytes(_DISPOSITION_HEAD, count, body)


def disposition_fields(
    body: Buffer,
) -> tuple[bool, int, int | None, bool, int | None, int] | None:
    """``(role, first, last, settled, state code, end)`` of a Disposition in the forms
    receivers send (a list8 of role, first, last, settled and an accepted or released state,
    each a plain constructor or null; the state as its descriptor code), None for any other
    form: the generic decoder reads it, or says why it is malformed."""
    if len(body) < 6 or body[0] != 0 or body[1] != 0x53 or body[2] != 0x15 or body[3] != 0xC0:
        return None
    end = 5 + body[4]
    count = body[5]
    if count > 5 or end > len(body):
        return None
    fields: list[int | bool | None] = [None] * 5
    off = 6
    try:
        for i in range(count):
            code = body[off]
            if code == 0x40:
                off += 1
            elif i == 0 or i == 3:  # role, settled: boolean
                if code != 0x41 and code != 0x42:
                    return None
                fields[i] = code == 0x41
                off += 1
            elif i == 4:  # state: accepted or released, the constant forms
                state = _STATE_CODES.get(bytes(body[off : off + 4]))
                if state is None:
                    return None
                fields[4] = state
                off += 4
            elif code == 0x43:  # first, last: uint
                fields[i] = 0
                off += 1
            elif code == 0x52:
                fields[i] = body[off + 1]
                off += 2
            elif code == 0x70:
                fields[i] = _I.unpack_from(body, off + 1)[0]
                off += 5
            else:
                return None
    except (IndexError, struct.error):
        return None
    role, first, last, settled, state_code = fields
    if off != end or role is None or first is None:
        return None
    return (
        bool(role),
        int(first),
        last if last is None else int(last),
        bool(settled),
        (None if state_code is None else int(state_code)),
        end,
    )


_FLOW_HEAD: Final = b"\x00\x53\x13"
_UINT_FIELDS: Final = 8  # next-incoming-id ... available; then drain, echo, properties


def flow_body(
    next_incoming_id: int | None,
    incoming_window: int,
    next_outgoing_id: int,
    outgoing_window: int,
    handle: int | None,
    delivery_count: int | None,
    link_credit: int | None,
    available: int | None,
    drain: bool,
    echo: bool,
) -> bytes:
    """The encoded body of a Flow without properties: byte for byte what the generic path
    writes (null for an absent field and for a false drain or echo, trailing nulls left out)."""
    u = _SMALL_UINTS
    parts = [
        b"\x40" if v is None else (u[v] if v < 256 else _uint(v))
        for v in (
            next_incoming_id,
            incoming_window,
            next_outgoing_id,
            outgoing_window,
            handle,
            delivery_count,
            link_credit,
            available,
        )
    ]
    parts += (b"\x41" if drain else b"\x40", b"\x41" if echo else b"\x40")
    count = 10
    while count > 4 and parts[count - 1] == b"\x40":
        count -= 1
    return _list_bytes(_FLOW_HEAD, count, b"".join(parts[:count]))


def flow_fields(body: Buffer) -> tuple[list[int | bool | None], int] | None:
    """The ten fields before properties of a Flow in the form peers send (a list8 of uint,
    boolean or null constructors, no properties), with the offset after it; None for any
    other form: the generic decoder reads it, or says why it is malformed."""
    if len(body) < 6 or body[0] != 0 or body[1] != 0x53 or body[2] != 0x13 or body[3] != 0xC0:
        return None
    end = 5 + body[4]
    count = body[5]
    if count > 10 or end > len(body):
        return None
    fields: list[int | bool | None] = [None] * 10
    off = 6
    try:
        for i in range(count):
            code = body[off]
            if code == 0x40:
                off += 1
            elif i >= _UINT_FIELDS:  # drain, echo: boolean
                if code != 0x41 and code != 0x42:
                    return None
                fields[i] = code == 0x41
                off += 1
            elif code == 0x43:
                fields[i] = 0
                off += 1
            elif code == 0x52:
                fields[i] = body[off + 1]
                off += 2
            elif code == 0x70:
                fields[i] = _I.unpack_from(body, off + 1)[0]
                off += 5
            else:
                return None
    except (IndexError, struct.error):
        return None
    if off != end or fields[1] is None or fields[2] is None or fields[3] is None:
        return None  # a mandatory window or id missing: the generic path says so
    return fields, end
