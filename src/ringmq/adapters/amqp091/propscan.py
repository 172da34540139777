"""Publish fast path: delivery_mode and message_id read straight from raw property bytes.

Theory of operation
-------------------
The AMQP 0-9-1 adapter keeps a message's basic properties raw (STYLE §4) and decodes them only when
routing, TTL or priority needs a field. Most publishers set a few plain fields on every message
(delivery_mode, content_type, message_id, correlation_id, timestamp, app_id...) and none of
headers, priority, expiration or reply_to. For such a property list the core needs only
delivery_mode (persistence) and message_id (de-duplication), and building a whole
`BasicProperties` for them costs about as much as the rest of the publish.

`scan_simple(pb)` walks the property list once without building anything. It answers
`(delivery_mode, message_id)` only when the list is *simple* (no headers, priority, expiration,
reply_to, continuation or unknown flag) *and* well-formed exactly as `decode_properties` would
accept it (every shortstr in bounds and valid UTF-8, no trailing byte); for anything else it
answers None and the caller decodes fully, which also reports the malformation. So the fast path
never accepts what the full decode rejects, and agrees with it on what it accepts (a
differential Hypothesis test holds it to that). Pure functions; imports only the flag constants.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from ringmq.amqp.properties import (
    FLAG_APP_ID,
    FLAG_CLUSTER_ID,
    FLAG_CONTENT_ENCODING,
    FLAG_CONTENT_TYPE,
    FLAG_CORRELATION_ID,
    FLAG_DELIVERY_MODE,
    FLAG_EXPIRATION,
    FLAG_HEADERS,
    FLAG_MESSAGE_ID,
    FLAG_PRIORITY,
    FLAG_REPLY_TO,
    FLAG_TIMESTAMP,
    FLAG_TYPE,
    FLAG_USER_ID,
    FLAGS_INVALID,
)

_NOT_SIMPLE: Final = FLAG_HEADERS | FLAG_PRIORITY | FLAG_EXPIRATION | FLAG_REPLY_TO | FLAGS_INVALID
"""Flags that need the full decode (plus the continuation and unknown bits)."""

# The simple fields in wire order: (flag, width) with width 0 = shortstr, else a fixed width.
_FIELDS: Final = (
    (FLAG_CONTENT_TYPE, 0),
    (FLAG_CONTENT_ENCODING, 0),
    (FLAG_DELIVERY_MODE, 1),
    (FLAG_CORRELATION_ID, 0),
    (FLAG_MESSAGE_ID, 0),
    (FLAG_TIMESTAMP, 8),
    (FLAG_TYPE, 0),
    (FLAG_USER_ID, 0),
    (FLAG_APP_ID, 0),
    (FLAG_CLUSTER_ID, 0),
)
_MID_ONLY: Final = FLAG_MESSAGE_ID
_MID_HI: Final = _MID_ONLY >> 8
_MID_LO: Final = _MID_ONLY & 0xFF
_DM_MID: Final = FLAG_DELIVERY_MODE | FLAG_MESSAGE_ID


def scan_simple(pb: bytes) -> tuple[int | None, str | None] | None:
    """(delivery_mode, message_id) of a simple, well-formed property list, else None.

    Either value is None when the property is absent. See the module docstring for "simple".
    """
    n = len(pb)
    if n < 2:
        return None
    flags = (pb[0] << 8) | pb[1]
    if flags & _NOT_SIMPLE:
        return None
    try:
        # The Spark writer's list (message_id only), and with delivery_mode: no loop.
        if flags == _MID_ONLY:
            if n < 3 or n != pb[2] + 3:
                return None
            return None, str(pb[3:], "utf-8")
        if flags == _DM_MID:
            if n < 4 or n != pb[3] + 4:
                return None
            return pb[2], str(pb[4:], "utf-8")
        off = 2
        mode: int | None = None
        mid: str | None = None
        for flag, width in _FIELDS:
            if not flags & flag:
                continue
            if width:
                if off + width > n:
                    return None
                if flag == FLAG_DELIVERY_MODE:
                    mode = pb[off]
                off += width
                continue
            if off >= n:
                return None
            end = off + 1 + pb[off]
            if end > n:
                return None
            text = str(pb[off + 1 : end], "utf-8")  # decoding validates every shortstr
            if flag == FLAG_MESSAGE_ID:
                mid = text
            off = end
    except UnicodeDecodeError:
        return None
    if off != n:
        return None
    return mode, mid


def scan_many(props: Sequence[bytes], stop: int) -> tuple[bytearray, list[str | None]]:
    """`scan_simple` of `props[:stop]` in order, up to the first that is not simple: (one
    byte per list, 1 when its delivery_mode is 2; the message ids). The length of the ids
    says how many lists were simple."""
    persistent = bytearray()
    ids: list[str | None] = []
    keep = persistent.append
    add = ids.append
    for k in range(stop):
        pb = props[k]
        n = len(pb)
        # The Spark writer's list (message_id only, as in `scan_simple`), without a call.
        if n >= 3 and pb[0] == _MID_HI and pb[1] == _MID_LO and n == pb[2] + 3:
            try:
                add(str(pb[3:], "utf-8"))
            except UnicodeDecodeError:
                break
            keep(0)
            continue
        simple = scan_simple(pb)
        if simple is None:
            break
        keep(simple[0] == 2)
        add(simple[1])
    return persistent, ids


__all__ = ["scan_many", "scan_simple"]
