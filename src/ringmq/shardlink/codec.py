"""The shard link's frames: bytes in, frames out (sans-IO).

Frames are `ringmq.lenframes` frames (`[u32 length][u8 type][payload]`, big endian). A link
joins an *origin* shard (where a client's connection lives) to an *owner* shard (where the
queues it uses live); the origin connects. In the order a link uses them:

* `Hello` (origin): version, the origin's shard index, a random nonce and
  `HMAC-SHA256(secret, ...)` over them (the shards of one broker share a secret).
  `Welcome` (owner: its shard index) or `Refuse` (either side: why the link ends).
* Publishes: `Forward` (origin): the link sequence of its first entry, then entries, each a
  vhost, the owner's queues of that vhost a message goes to, and the message
  (`storage.records.encode_message`, the journal's layout). On the wire a frame lists each
  distinct (vhost, queues) *route* of its entries once and an entry names its route by index,
  so a batch to one queue carries the names once, not per message. Sequences run on without
  gaps for the link's life.
  `Outcome` (owner): every sequence up to `upto` is resolved, the listed ones rejected (with
  a code), the others accepted: stored as the owner stores that message (persistent ones
  fsynced), so the origin may confirm.
* Consumers: `Subscribe` (origin: a consumer id it chose, the vhost and queue, the credit it
  grants, pre-settled and exclusive flags, the consumer's arguments as an AMQP 0-9-1 field
  table, `x-priority` and the others a client's consume carries), `Subscribed` or
  `SubscribeRefused` (owner: a code and a text), `Credit` (origin: more credit),
  `Deliveries` (owner: the consumer id, the tag of the first, then entries with the
  redelivered flag, the delivery count as the owner's queue counts it (this delivery
  included: 1 on the first) and the message; tags run on per consumer),
  `Settle` (origin: an outcome and ranges of tags), `Cancel` (origin) and `Cancelled` (owner:
  why, and whether it still holds the consumer's unsettled deliveries: yes when it answers a
  `Cancel`, no when the queue went).
* Definitions (docs/dev/shards.md): `Follow` (origin: send me the definitions feed; the link
  to shard 0), then `Definitions` (owner: a snapshot first, every definition as a put, then
  the changes as they are made; each change a sequence number, its kind, key and JSON value,
  or none when deleted: `core.deffeed.DefinitionChange`).
* Asks (the link to shard 0): `Ask` (origin: an id it chose, a client's definition step,
  `core.asks.DefinitionRequest`, its fields as tagged JSON) and `Answer` (owner: the id, the
  feed sequence of the change made, or a refusal's code and text).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import struct
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, Final, TypeAlias

from ringmq import lenframes
from ringmq.amqp.tables import decode_table, encode_table
from ringmq.core.asks import DefinitionRequest
from ringmq.core.deffeed import DefinitionChange
from ringmq.core.defsync import args_back, args_json
from ringmq.core.message import Message
from ringmq.lenframes import U16, U32, Cursor, ProtocolError, blob, text
from ringmq.storage.records import decode_entry, encode_message

__all__ = ["FrameReader", "ProtocolError", "decode", "encode"]

VERSION: Final = 2
MAX_FRAME: Final = 1024 * 1024 * 1024 + 4096
"""Largest frame accepted: one message is never split (up to 512 MiB, RabbitMQ's largest
`max_message_size`), and a batch of small ones stays near `BATCH_BYTES`."""
BATCH_BYTES: Final = 256 * 1024
"""A `Forward` or `Deliveries` frame is closed once its entries pass this size."""
MAX_ENTRIES: Final = 0xFFFF
"""At most this many entries in a `Forward` (so its routes, at most one per entry, fit their
u16 count and index)."""

_U64: Final = struct.Struct(">Q")
_U64U32: Final = struct.Struct(">QI")
_SEQ_CODE: Final = struct.Struct(">QH")
_RANGE: Final = struct.Struct(">QQ")
_SUB: Final = struct.Struct(">IIB")
_SETTLED: Final = 1  # `Subscribe` flags
_EXCLUSIVE: Final = 2
_CID: Final = U32
_CID_N: Final = struct.Struct(">II")
_CID_TAG_N: Final = struct.Struct(">IQI")
_DELIVERY: Final = struct.Struct(">BI")
_CODE_TEXT: Final = struct.Struct(">IH")
_NO_ARGUMENTS: Final = encode_table(None)


class Outcome(IntEnum):
    """What a consumer's client did with deliveries (values are part of the protocol)."""

    ACK = 1
    REQUEUE = 2
    REJECT = 3  # not requeued: dead-lettered where the queue says so, else dropped


@dataclass(frozen=True, slots=True)
class Hello:
    shard: int
    nonce: bytes
    mac: bytes
    version: int = VERSION


@dataclass(frozen=True, slots=True)
class Welcome:
    shard: int


@dataclass(frozen=True, slots=True)
class Refuse:
    reason: str


@dataclass(frozen=True, slots=True)
class Entry:
    """One forwarded message and the owner's queues (of `vhost`) it goes to."""

    vhost: str
    queues: tuple[str, ...]
    message: Message


@dataclass(frozen=True, slots=True)
class Forward:
    first: int
    entries: tuple[Entry, ...]


@dataclass(frozen=True, slots=True)
class OutcomeFrame:
    upto: int
    rejected: tuple[tuple[int, int], ...]
    """(sequence, code) of the rejected ones among those up to `upto`."""


@dataclass(frozen=True, slots=True)
class Subscribe:
    cid: int
    vhost: str
    queue: str
    credit: int
    settled: bool
    exclusive: bool = False
    arguments: dict[str, Any] = field(default_factory=dict)
    """The consumer's arguments (`x-priority`...), as a client's consume gives them."""


@dataclass(frozen=True, slots=True)
class Subscribed:
    cid: int


@dataclass(frozen=True, slots=True)
class SubscribeRefused:
    cid: int
    code: int
    text: str


@dataclass(frozen=True, slots=True)
class Credit:
    cid: int
    add: int


@dataclass(frozen=True, slots=True)
class Delivery:
    redelivered: bool
    delivery_count: int
    """Deliveries of the message so far, this one included (1 on its first), as the owner's
    queue counts them."""
    message: Message


@dataclass(frozen=True, slots=True)
class Deliveries:
    cid: int
    first_tag: int
    entries: tuple[Delivery, ...]


@dataclass(frozen=True, slots=True)
class Settle:
    cid: int
    outcome: Outcome
    ranges: tuple[tuple[int, int], ...]
    """Inclusive (first, last) tag ranges."""


@dataclass(frozen=True, slots=True)
class Cancel:
    cid: int


@dataclass(frozen=True, slots=True)
class Cancelled:
    cid: int
    reason: str
    kept: bool
    """The owner still holds the consumer's unsettled deliveries (an answer to `Cancel`), or
    not (its queue went: they are gone)."""


@dataclass(frozen=True, slots=True)
class Follow:
    """The origin asks for the definitions feed (a snapshot, then the changes)."""


@dataclass(frozen=True, slots=True)
class Definitions:
    snapshot: bool
    """`changes` are every definition as a put: what the origin holds that they do not
    name is gone."""
    changes: tuple[DefinitionChange, ...]


@dataclass(frozen=True, slots=True)
class Ask:
    rid: int
    request: DefinitionRequest


@dataclass(frozen=True, slots=True)
class Answer:
    rid: int
    seq: int
    """The feed sequence of the change made (0 when refused)."""
    code: int = 0
    """0: made; else the refusal's AMQP reply code (`shardlink.codes`)."""
    text: str = ""


Frame: TypeAlias = (
    Hello
    | Welcome
    | Refuse
    | Forward
    | OutcomeFrame
    | Subscribe
    | Subscribed
    | SubscribeRefused
    | Credit
    | Deliveries
    | Settle
    | Cancel
    | Cancelled
    | Follow
    | Definitions
    | Ask
    | Answer
)

_TYPES: Final[dict[type, int]] = {
    Hello: 1,
    Welcome: 2,
    Refuse: 3,
    Forward: 4,
    OutcomeFrame: 5,
    Subscribe: 6,
    Subscribed: 7,
    SubscribeRefused: 8,
    Credit: 9,
    Deliveries: 10,
    Settle: 11,
    Cancel: 12,
    Cancelled: 13,
    Follow: 14,
    Definitions: 15,
    Ask: 16,
    Answer: 17,
}


def hello_mac(secret: bytes, shard: int, nonce: bytes) -> bytes:
    """The MAC a `Hello` carries (HMAC-SHA256 of its fields under the broker's secret)."""
    msg = b"ringmq-shardlink-1\x00" + U32.pack(shard) + nonce
    return hmac.new(secret, msg, hashlib.sha256).digest()


def message_bytes(message: Message) -> bytes:
    """A message as the link carries it: the journal's entry layout, body embedded."""
    return encode_message("", 0, message)


def _message(c: Cursor) -> Message:
    raw = c.take(U32.unpack(c.take(4))[0])
    try:
        return decode_entry(raw).message
    except Exception as exc:  # any refusal of these bytes (a field table's AMQPError too)
        raise ProtocolError(f"bad message: {exc}") from exc


def _arguments(c: Cursor) -> dict[str, Any]:
    # a field table in place: its own u32 length bounds it within the payload
    try:
        table, c.at = decode_table(c.view, c.at)
    except Exception as exc:  # the table codec's AMQPError (truncated, a bad type letter)
        raise ProtocolError(f"bad consumer arguments: {exc}") from exc
    return table


def _forward(frame: Forward) -> bytes:
    # each distinct (vhost, queues) once, in a table the entries index: a batch to one queue
    # carries its names once instead of once per message (fewer bytes, and less to encode
    # and decode per message)
    if len(frame.entries) > MAX_ENTRIES:
        raise ValueError(f"a Forward carries at most {MAX_ENTRIES} entries")
    routes: dict[tuple[str, tuple[str, ...]], int] = {}
    entries: list[bytes] = []
    for e in frame.entries:
        key = (e.vhost, e.queues)
        at = routes.get(key)
        if at is None:
            at = routes[key] = len(routes)
        entries += (U16.pack(at), blob(message_bytes(e.message)))
    parts = [_U64.pack(frame.first), U16.pack(len(routes))]
    for vhost, queues in routes:
        parts += (text(vhost), U16.pack(len(queues)))
        parts += (text(q) for q in queues)
    parts.append(U32.pack(len(frame.entries)))
    return b"".join(parts + entries)


def _decode_forward(c: Cursor) -> Forward:
    (first,) = c.unpack(_U64)
    (n,) = c.unpack(U16)
    routes = []
    for _ in range(n):
        vhost = c.text()
        (nq,) = c.unpack(U16)
        routes.append((vhost, tuple(c.text() for _ in range(nq))))
    (n,) = c.unpack(U32)
    entries = []
    for _ in range(n):
        (at,) = c.unpack(U16)
        if at >= len(routes):
            raise ProtocolError(f"forward entry names route {at} of {len(routes)}")
        vhost, queues = routes[at]
        entries.append(Entry(vhost, queues, _message(c)))
    return Forward(first, tuple(entries))


def _definitions(frame: Definitions) -> bytes:
    parts = [bytes((frame.snapshot,)), U32.pack(len(frame.changes))]
    for c in frame.changes:
        value = b"" if c.value is None else json.dumps(c.value, separators=(",", ":")).encode()
        parts += (
            _U64.pack(c.seq),
            text(c.kind),
            blob(c.key.encode()),
            bytes((c.value is not None,)),
        )
        parts.append(blob(value))
    return b"".join(parts)


def _decode_definitions(c: Cursor) -> Definitions:
    snapshot = bool(c.take(1)[0])
    (n,) = c.unpack(U32)
    changes = []
    for _ in range(n):
        (seq,) = c.unpack(_U64)
        kind, key, present, raw = c.text(), bytes(c.blob()), c.take(1)[0], c.blob()
        try:
            value = json.loads(bytes(raw)) if present else None
            changes.append(DefinitionChange(seq, kind, key.decode(), value))
        except ValueError as exc:  # JSON, or the key's UTF-8
            raise ProtocolError(f"bad definition change {seq}: {exc}") from exc
        if value is not None and not isinstance(value, dict):
            raise ProtocolError(f"definition change {seq} is not an object")
    return Definitions(snapshot, tuple(changes))


_RID_SEQ_CODE: Final = struct.Struct(">QQH")


def _decode_ask(c: Cursor) -> Ask:
    (rid,) = c.unpack(_U64)
    op, vhost, raw = c.text(), c.text(), c.blob()
    try:
        fields = json.loads(raw)
    except ValueError as exc:
        raise ProtocolError(f"bad ask {rid}: {exc}") from exc
    if not isinstance(fields, dict):
        raise ProtocolError(f"ask {rid}: its fields are not an object")
    return Ask(rid, DefinitionRequest(op, vhost, args_back(fields)))


def encode(frame: Frame) -> bytes:
    """One frame's bytes."""
    match frame:
        case Hello():
            body = U16.pack(frame.version) + U32.pack(frame.shard) + blob(frame.nonce)
            body += blob(frame.mac)
        case Welcome():
            body = U32.pack(frame.shard)
        case Refuse():
            body = text(frame.reason[:1000])
        case Forward():
            body = _forward(frame)
        case OutcomeFrame():
            parts = [_U64U32.pack(frame.upto, len(frame.rejected))]
            parts += (_SEQ_CODE.pack(seq, code) for seq, code in frame.rejected)
            body = b"".join(parts)
        case Subscribe():
            flags = (_SETTLED if frame.settled else 0) | (_EXCLUSIVE if frame.exclusive else 0)
            body = _SUB.pack(frame.cid, frame.credit, flags) + text(frame.vhost)
            body += text(frame.queue)
            body += encode_table(frame.arguments) if frame.arguments else _NO_ARGUMENTS
        case Subscribed() | Cancel():
            body = _CID.pack(frame.cid)
        case SubscribeRefused():
            body = _CODE_TEXT.pack(frame.cid, frame.code) + text(frame.text[:1000])
        case Credit():
            body = _CID_N.pack(frame.cid, frame.add)
        case Deliveries():
            parts = [_CID_TAG_N.pack(frame.cid, frame.first_tag, len(frame.entries))]
            for d in frame.entries:
                parts += (
                    _DELIVERY.pack(d.redelivered, d.delivery_count),
                    blob(message_bytes(d.message)),
                )
            body = b"".join(parts)
        case Settle():
            parts = [_CID_N.pack(frame.cid, len(frame.ranges)), bytes((frame.outcome,))]
            parts += (_RANGE.pack(a, b) for a, b in frame.ranges)
            body = b"".join(parts)
        case Cancelled():
            body = _CID.pack(frame.cid) + bytes((frame.kept,)) + text(frame.reason[:1000])
        case Follow():
            body = b""
        case Definitions():
            body = _definitions(frame)
        case Ask():
            r = frame.request
            fields = json.dumps(args_json(r.fields), separators=(",", ":")).encode()
            body = _U64.pack(frame.rid) + text(r.op) + text(r.vhost) + blob(fields)
        case Answer():
            body = _RID_SEQ_CODE.pack(frame.rid, frame.seq, frame.code) + text(frame.text[:1000])
    return lenframes.frame(_TYPES[type(frame)], body)


def decode(ftype: int, payload: memoryview) -> Frame:
    """The frame of type `ftype` with `payload` (raises `ProtocolError`)."""
    c = Cursor(payload)
    frame: Frame
    match ftype:
        case 1:
            (version,) = c.unpack(U16)
            (shard,) = c.unpack(U32)
            frame = Hello(shard, c.blob(), c.blob(), version)
        case 2:
            frame = Welcome(*c.unpack(U32))
        case 3:
            frame = Refuse(c.text())
        case 4:
            frame = _decode_forward(c)
        case 5:
            upto, n = c.unpack(_U64U32)
            frame = OutcomeFrame(upto, tuple(c.unpack(_SEQ_CODE) for _ in range(n)))  # type: ignore[misc]
        case 6:
            cid, credit, flags = c.unpack(_SUB)
            if flags & ~(_SETTLED | _EXCLUSIVE):
                raise ProtocolError(f"unknown subscribe flags {flags:#x}")
            vhost, queue = c.text(), c.text()
            settled, exclusive = bool(flags & _SETTLED), bool(flags & _EXCLUSIVE)
            frame = Subscribe(cid, vhost, queue, credit, settled, exclusive, _arguments(c))
        case 7:
            frame = Subscribed(*c.unpack(_CID))
        case 8:
            cid, code = c.unpack(_CODE_TEXT)
            frame = SubscribeRefused(cid, code, c.text())
        case 9:
            frame = Credit(*c.unpack(_CID_N))
        case 10:
            cid, first_tag, n = c.unpack(_CID_TAG_N)
            deliveries = []
            for _ in range(n):
                redelivered, count = c.unpack(_DELIVERY)
                deliveries.append(Delivery(bool(redelivered), count, _message(c)))
            frame = Deliveries(cid, first_tag, tuple(deliveries))
        case 11:
            cid, n = c.unpack(_CID_N)
            try:
                outcome = Outcome(c.take(1)[0])
            except ValueError as exc:
                raise ProtocolError("unknown settlement outcome") from exc
            frame = Settle(cid, outcome, tuple(c.unpack(_RANGE) for _ in range(n)))  # type: ignore[misc]
        case 12:
            frame = Cancel(*c.unpack(_CID))
        case 13:
            (cid,) = c.unpack(_CID)
            kept = bool(c.take(1)[0])
            frame = Cancelled(cid, c.text(), kept)
        case 14:
            frame = Follow()
        case 15:
            frame = _decode_definitions(c)
        case 16:
            frame = _decode_ask(c)
        case 17:
            rid, seq, code = c.unpack(_RID_SEQ_CODE)
            frame = Answer(rid, seq, code, c.text())
        case _:
            raise ProtocolError(f"unknown frame type {ftype}")
    c.end()
    return frame


class FrameReader(lenframes.FrameReader[Frame]):
    """Bytes in, link frames out: `feed(data)`, then `next_frame()` until None."""

    def __init__(self) -> None:
        super().__init__(decode, MAX_FRAME)
