"""AMQP 1.0 performatives and the composite types they carry, as frozen slotted dataclasses.

Every composite type of the spec (the frame bodies of part 2, the SASL frames of part 5, the
error, the delivery states and termini of part 3, the transaction types of part 4) with its
fields named as the spec names them, in snake_case, in the spec's order and with its defaults;
``composite.py`` encodes and decodes them from the field kinds given here. `decode_performative`
reads a frame body.

The per-message performatives have fast paths: `Transfer.encode` and `Disposition.encode`
use ``hotpath.py``'s byte builders whenever their fields allow, and `decode_performative` reads
a Transfer or a Disposition in the forms peers send without the generic decoder (the same
values: the tests compare them).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, Final

from ringmq.amqp10.codec import Buffer, decode, encode
from ringmq.amqp10.composite import (
    BY_CODE,
    Composite,
    composite,
    decode_composite,
    from_fields,
)
from ringmq.amqp10.hotpath import (
    ACCEPTED_BYTES,
    ACCEPTED_CODE,
    RELEASED_BYTES,
    RELEASED_CODE,
    disposition_body,
    disposition_fields,
    flow_body,
    flow_fields,
)
from ringmq.amqp10.hotpath import encode_transfer as encode_transfer
from ringmq.amqp10.types import DecodeError

# Spec constants.
ROLE_SENDER: Final = False
ROLE_RECEIVER: Final = True
SND_UNSETTLED: Final = 0
SND_SETTLED: Final = 1
SND_MIXED: Final = 2
RCV_FIRST: Final = 0
RCV_SECOND: Final = 1
SASL_OK: Final = 0
SASL_AUTH: Final = 1
SASL_SYS: Final = 2
SASL_SYS_PERM: Final = 3
SASL_SYS_TEMP: Final = 4
UINT_MAX: Final = 4294967295
MIN_MAX_FRAME_SIZE: Final = 512
"""The max-frame-size every peer must accept (part 2, 2.7.1)."""

# ---------------------------------------------------------------------------------------------
# Part 2: the connection, session and link performatives.


@composite(
    0x10,
    "amqp:open:list",
    ("string!", "string", "uint", "ushort", "uint") + ("symbols",) * 4 + ("map",),
)
@dataclass(frozen=True, slots=True)
class Open(Composite):
    """Negotiate connection parameters (part 2, 2.7.1)."""

    container_id: str = ""
    hostname: str | None = None
    max_frame_size: int = UINT_MAX
    channel_max: int = 65535
    idle_time_out: int | None = None
    outgoing_locales: tuple[str, ...] | None = None
    incoming_locales: tuple[str, ...] | None = None
    offered_capabilities: tuple[str, ...] | None = None
    desired_capabilities: tuple[str, ...] | None = None
    properties: dict[Any, Any] | None = None


@composite(
    0x11,
    "amqp:begin:list",
    ("ushort", "uint!", "uint!", "uint!", "uint", "symbols", "symbols", "map"),
)
@dataclass(frozen=True, slots=True)
class Begin(Composite):
    """Begin a session on a channel (2.7.2)."""

    remote_channel: int | None = None
    next_outgoing_id: int = 0
    incoming_window: int = 0
    outgoing_window: int = 0
    handle_max: int = UINT_MAX
    offered_capabilities: tuple[str, ...] | None = None
    desired_capabilities: tuple[str, ...] | None = None
    properties: dict[Any, Any] | None = None


@composite(
    0x12,
    "amqp:attach:list",
    (
        "string!",
        "uint!",
        "bool!",
        "ubyte",
        "ubyte",
        "source",
        "target",
        "map",
        "bool",
        "uint",
        "ulong",
        "symbols",
        "symbols",
        "map",
    ),
)
@dataclass(frozen=True, slots=True)
class Attach(Composite):
    """Attach a link to a session (2.7.3); ``role`` False: sender, True: receiver."""

    name: str = ""
    handle: int = 0
    role: bool = ROLE_SENDER
    snd_settle_mode: int = SND_MIXED
    rcv_settle_mode: int = RCV_FIRST
    source: Source | None = None
    target: Target | Coordinator | None = None
    unsettled: dict[Any, Any] | None = None
    incomplete_unsettled: bool = False
    initial_delivery_count: int | None = None
    max_message_size: int | None = None
    offered_capabilities: tuple[str, ...] | None = None
    desired_capabilities: tuple[str, ...] | None = None
    properties: dict[Any, Any] | None = None


@composite(
    0x13,
    "amqp:flow:list",
    ("uint", "uint!", "uint!", "uint!", "uint", "uint", "uint", "uint", "bool", "bool", "map"),
)
@dataclass(frozen=True, slots=True)
class Flow(Composite):
    """Update session and link flow state (2.7.4)."""

    next_incoming_id: int | None = None
    incoming_window: int = 0
    next_outgoing_id: int = 0
    outgoing_window: int = 0
    handle: int | None = None
    delivery_count: int | None = None
    link_credit: int | None = None
    available: int | None = None
    drain: bool = False
    echo: bool = False
    properties: dict[Any, Any] | None = None

    def encode(self) -> bytes:
        """The encoded flow (without properties: ``hotpath.flow_body``)."""
        if self.properties is None:
            return flow_body(
                self.next_incoming_id,
                self.incoming_window,
                self.next_outgoing_id,
                self.outgoing_window,
                self.handle,
                self.delivery_count,
                self.link_credit,
                self.available,
                self.drain,
                self.echo,
            )
        return encode(self.described())


@composite(
    0x14,
    "amqp:transfer:list",
    ("uint!", "uint", "binary", "uint", "bool", "bool", "ubyte", "state", "bool", "bool", "bool"),
)
@dataclass(slots=True)
class Transfer(Composite):
    """Transfer (part of) a message over a link (2.7.5); the payload follows it.

    The receiving hot path builds one per frame, so it is a plain slotted class (a frozen
    dataclass's __init__ sets each of its eleven fields through object.__setattr__, five times
    slower; `core.effects.Deliver` does the same); treat it as immutable like the others."""

    handle: int = 0
    delivery_id: int | None = None
    delivery_tag: bytes | None = None
    message_format: int | None = None
    settled: bool | None = None
    more: bool = False
    rcv_settle_mode: int | None = None
    state: DeliveryState | None = None
    resume: bool = False
    aborted: bool = False
    batchable: bool = False

    def encode(self) -> bytes:
        """The encoded transfer (the receiver-side hot path: see `encode_transfer`)."""
        if (
            self.rcv_settle_mode is None
            and self.state is None
            and not (self.resume or self.aborted or self.batchable)
            and self.delivery_id is not None
            and self.delivery_tag is not None
            and self.message_format is not None
            and self.settled is not None
        ):
            return encode_transfer(
                self.handle,
                self.delivery_id,
                self.delivery_tag,
                self.message_format,
                self.settled,
                self.more,
            )
        return encode(self.described())


@composite(0x15, "amqp:disposition:list", ("bool!", "uint!", "uint", "bool", "state", "bool"))
@dataclass(frozen=True, slots=True)
class Disposition(Composite):
    """Inform the peer of delivery state changes (2.7.6)."""

    role: bool = ROLE_SENDER
    first: int = 0
    last: int | None = None
    settled: bool = False
    state: DeliveryState | None = None
    batchable: bool = False

    def encode(self) -> bytes:
        """The encoded disposition (hot path: `encode_disposition` for the plain outcomes)."""
        if not self.batchable and (self.state is None or type(self.state) in _PLAIN_STATES):
            return encode_disposition(self.role, self.first, self.last, self.settled, self.state)
        return encode(self.described())


@composite(0x16, "amqp:detach:list", ("uint!", "bool", "error"))
@dataclass(frozen=True, slots=True)
class Detach(Composite):
    """Detach a link endpoint from the session (2.7.7)."""

    handle: int = 0
    closed: bool = False
    error: Error | None = None


@composite(0x17, "amqp:end:list", ("error",))
@dataclass(frozen=True, slots=True)
class End(Composite):
    """End the session (2.7.8)."""

    error: Error | None = None


@composite(0x18, "amqp:close:list", ("error",))
@dataclass(frozen=True, slots=True)
class Close(Composite):
    """Signal a connection close (2.7.9)."""

    error: Error | None = None


@composite(0x1D, "amqp:error:list", ("symbol!", "string", "map"))
@dataclass(frozen=True, slots=True)
class Error(Composite):
    """Details of an error (2.8.14): a condition symbol such as ``amqp:not-found``."""

    condition: str = ""
    description: str | None = None
    info: dict[Any, Any] | None = None


# ---------------------------------------------------------------------------------------------
# Part 5: SASL.


@composite(0x40, "amqp:sasl-mechanisms:list", ("symbols!",))
@dataclass(frozen=True, slots=True)
class SaslMechanisms(Composite):
    """The server's supported SASL mechanisms (part 5, 5.3.3.1)."""

    sasl_server_mechanisms: tuple[str, ...] = ()


@composite(0x41, "amqp:sasl-init:list", ("symbol!", "binary", "string"))
@dataclass(frozen=True, slots=True)
class SaslInit(Composite):
    """The client's chosen mechanism and initial response (5.3.3.2)."""

    mechanism: str = ""
    initial_response: bytes | None = None
    hostname: str | None = None


@composite(0x42, "amqp:sasl-challenge:list", ("binary!",))
@dataclass(frozen=True, slots=True)
class SaslChallenge(Composite):
    """A security challenge (5.3.3.3)."""

    challenge: bytes = b""


@composite(0x43, "amqp:sasl-response:list", ("binary!",))
@dataclass(frozen=True, slots=True)
class SaslResponse(Composite):
    """A security response (5.3.3.4)."""

    response: bytes = b""


@composite(0x44, "amqp:sasl-outcome:list", ("ubyte!", "binary"))
@dataclass(frozen=True, slots=True)
class SaslOutcome(Composite):
    """The SASL outcome (5.3.3.5); ``code`` 0 is ok."""

    code: int = SASL_OK
    additional_data: bytes | None = None


# ---------------------------------------------------------------------------------------------
# Part 3: delivery states and termini.


@composite(0x23, "amqp:received:list", ("uint!", "ulong!"))
@dataclass(frozen=True, slots=True)
class Received(Composite):
    """The delivery state of a partly received message (part 3, 3.4.1)."""

    section_number: int = 0
    section_offset: int = 0


@composite(0x24, "amqp:accepted:list", ())
@dataclass(frozen=True, slots=True)
class Accepted(Composite):
    """The accepted outcome (3.4.2)."""


@composite(0x25, "amqp:rejected:list", ("error",))
@dataclass(frozen=True, slots=True)
class Rejected(Composite):
    """The rejected outcome (3.4.3), with the reason."""

    error: Error | None = None


@composite(0x26, "amqp:released:list", ())
@dataclass(frozen=True, slots=True)
class Released(Composite):
    """The released outcome (3.4.4): not processed, may be redelivered."""


@composite(0x27, "amqp:modified:list", ("bool", "bool", "map"))
@dataclass(frozen=True, slots=True)
class Modified(Composite):
    """The modified outcome (3.4.5)."""

    delivery_failed: bool | None = None
    undeliverable_here: bool | None = None
    message_annotations: dict[Any, Any] | None = None


@composite(
    0x28,
    "amqp:source:list",
    (
        "string",
        "uint",
        "symbol",
        "uint",
        "bool",
        "map",
        "symbol",
        "map",
        "outcome",
        "symbols",
        "symbols",
    ),
)
@dataclass(frozen=True, slots=True)
class Source(Composite):
    """The source terminus of a link (3.5.3)."""

    address: str | None = None
    durable: int = 0
    expiry_policy: str = "session-end"
    timeout: int = 0
    dynamic: bool = False
    dynamic_node_properties: dict[Any, Any] | None = None
    distribution_mode: str | None = None
    filter: dict[Any, Any] | None = None
    default_outcome: Outcome | None = None
    outcomes: tuple[str, ...] | None = None
    capabilities: tuple[str, ...] | None = None


@composite(0x29, "amqp:target:list", ("string", "uint", "symbol", "uint", "bool", "map", "symbols"))
@dataclass(frozen=True, slots=True)
class Target(Composite):
    """The target terminus of a link (3.5.4)."""

    address: str | None = None
    durable: int = 0
    expiry_policy: str = "session-end"
    timeout: int = 0
    dynamic: bool = False
    dynamic_node_properties: dict[Any, Any] | None = None
    capabilities: tuple[str, ...] | None = None


# ---------------------------------------------------------------------------------------------
# Part 4: transactions.


@composite(0x30, "amqp:coordinator:list", ("symbols",))
@dataclass(frozen=True, slots=True)
class Coordinator(Composite):
    """The target of a transaction controller's link (part 4, 4.5.1)."""

    capabilities: tuple[str, ...] | None = None


@composite(0x31, "amqp:declare:list", ("any",))
@dataclass(frozen=True, slots=True)
class Declare(Composite):
    """Declare a transaction (4.5.2)."""

    global_id: Any = None


@composite(0x32, "amqp:discharge:list", ("binary!", "bool"))
@dataclass(frozen=True, slots=True)
class Discharge(Composite):
    """Commit (``fail`` false) or roll back a transaction (4.5.3)."""

    txn_id: bytes = b""
    fail: bool | None = None


@composite(0x33, "amqp:declared:list", ("binary!",))
@dataclass(frozen=True, slots=True)
class Declared(Composite):
    """The outcome of a successful Declare (4.5.4): the transaction id."""

    txn_id: bytes = b""


@composite(0x34, "amqp:transactional-state:list", ("binary!", "outcome"))
@dataclass(frozen=True, slots=True)
class TransactionalState(Composite):
    """The state of a delivery within a transaction (4.5.5)."""

    txn_id: bytes = b""
    outcome: Outcome | None = None


Outcome = Accepted | Rejected | Released | Modified | Declared
DeliveryState = Received | Outcome | TransactionalState
Performative = Open | Begin | Attach | Flow | Transfer | Disposition | Detach | End | Close
SaslPerformative = SaslMechanisms | SaslInit | SaslChallenge | SaslResponse | SaslOutcome

_OUTCOMES: Final = (Accepted, Rejected, Released, Modified, Declared)
_STATES: Final = (Received, *_OUTCOMES, TransactionalState)
FRAME_BODIES: Final = (Open, Begin, Attach, Flow, Transfer, Disposition, Detach, End, Close)
SASL_BODIES: Final = (SaslMechanisms, SaslInit, SaslChallenge, SaslResponse, SaslOutcome)
ALL_COMPOSITES: Final = tuple(BY_CODE.values())


def decode_performative(body: Buffer) -> tuple[Performative | SaslPerformative, int]:
    """Decode a frame body: the performative and the offset where its payload starts.

    Raises:
        DecodeError: as ``composite.decode_composite``, or a composite that is no frame body.
    """
    if len(body) > 3 and body[0] == 0 and body[1] == 0x53:
        if body[2] == 0x14:  # a Transfer: the receiving hot path
            fast = _transfer(body)
            if fast is not None:
                return fast
        elif body[2] == 0x15:  # a Disposition: how receivers settle, one per batch or message
            settle = _disposition(body)
            if settle is not None:
                return settle
        elif body[2] == 0x13:  # a Flow: credit, every few messages per receiver
            flow = flow_fields(body)
            if flow is not None:
                f, end = flow
                f[8] = bool(f[8])  # drain and echo: null means false
                f[9] = bool(f[9])
                return Flow(*f), end  # type: ignore[arg-type]
        # The common form (descriptor as a small ulong): no Described built on the way.
        cls = _BODIES_BY_CODE.get(body[2])
        if cls is not None:
            items, end = decode(body, 3)
            return from_fields(cls, items), end  # type: ignore[return-value]
    got, end = decode_composite(body)
    if not isinstance(got, FRAME_BODIES + SASL_BODIES):
        raise DecodeError(f"{type(got).__name__} is not a frame body")
    return got, end


def _transfer(body: Buffer) -> tuple[Transfer, int] | None:
    """A Transfer in the forms senders use (a list8 of at most its first six fields, each a
    uint, binary or boolean constructor or null), read without the generic decoder; None for
    any other form (the generic path decodes it, or says why it is malformed)."""
    if len(body) < 6 or body[3] != 0xC0:
        return None
    end = 5 + body[4]
    count = body[5]
    if count > 6 or end > len(body):
        return None
    fields: list[Any] = [None] * 6
    off = 6
    try:
        for i in range(count):
            code = body[off]
            if code == 0x40:
                off += 1
            elif i == 2:  # delivery-tag: binary
                if code != 0xA0:
                    return None
                n = body[off + 1]
                fields[2] = bytes(body[off + 2 : off + 2 + n])
                off += 2 + n
            elif i >= 4:  # settled, more: boolean
                if code == 0x41 or code == 0x42:
                    fields[i] = code == 0x41
                    off += 1
                else:
                    return None
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
    if off != end or fields[0] is None:
        return None
    handle, did, tag, fmt, settled, more = fields
    return Transfer(handle, did, tag, fmt, settled, bool(more)), end


_STATE_OF: Final[dict[int, DeliveryState]] = {ACCEPTED_CODE: Accepted(), RELEASED_CODE: Released()}
_STATE_BYTES: Final[dict[type, bytes]] = {Accepted: ACCEPTED_BYTES, Released: RELEASED_BYTES}
_PLAIN_STATES: Final = (Accepted, Released)


def _disposition(body: Buffer) -> tuple[Disposition, int] | None:
    # `hotpath.disposition_fields` reads the forms receivers send; None: the generic path.
    got = disposition_fields(body)
    if got is None:
        return None
    role, first, last, settled, code, end = got
    return Disposition(role, first, last, settled, None if code is None else _STATE_OF[code]), end


def encode_disposition(
    role: bool, first: int, last: int | None, settled: bool, state: DeliveryState | None
) -> bytes:
    """The encoded body of a Disposition, built by ``hotpath.disposition_body`` (states other
    than accepted and released are encoded by the generic encoder first)."""
    raw = None
    if state is not None:
        raw = _STATE_BYTES.get(type(state))
        if raw is None:
            raw = encode(state.described())
    return disposition_body(role, first, last, settled, raw)


_BODIES_BY_CODE: Final[dict[int, type[Composite]]] = {
    cls.DESCRIPTOR: cls for cls in FRAME_BODIES + SASL_BODIES
}

_I: Final = struct.Struct(">I")
