"""AMQP 0-9-1 messages in the core's container: building them at publish, and the 0-9-1 form.

Theory of operation: a 0-9-1 publish carries its basic properties as the raw property list of
its content header. `build` makes the core's `Message` from it, keeping the list raw
(`properties_bin`, re-sent verbatim to 0-9-1 consumers) and filling the neutral fields the
engine reads only from what the property flags say is present, by the cheapest path that is
exact: no property the core needs -> nothing decoded; only delivery_mode (and content_type) ->
one byte read; a few plain fields and a message id -> `propscan.scan_simple`; anything else
(headers, priority, expiration, reply_to) -> the full decode, which also refuses a malformed
list. A publisher's `reply_to` of `amq.rabbitmq.reply-to` is rewritten to its session's
direct reply-to address, as RabbitMQ does.

`AMQP091_FORM` is the `core.message.Form` of this encoding (registered when this module is
imported): the core asks it for a copy with other headers (dead-lettering's `x-death`,
sender-selected BCC removal) and for the original expiration text.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, fields
from typing import Any, Final

from ringmq.adapters.amqp091.propscan import scan_many, scan_simple
from ringmq.amqp.properties import (
    FLAG_CONTENT_TYPE,
    FLAG_DELIVERY_MODE,
    FLAG_EXPIRATION,
    FLAG_HEADERS,
    FLAG_MESSAGE_ID,
    FLAG_PRIORITY,
    FLAG_REPLY_TO,
    FLAGS_INVALID,
    BasicProperties,
    decode_properties,
    encode_properties,
)
from ringmq.core.delivery import REPLY_TO_PREFIX, REPLY_TO_QUEUE
from ringmq.core.errors import BrokerError, Condition
from ringmq.core.message import FORM_AMQP091, Message, register_form
from ringmq.core.queue.ports import RunColumns
from ringmq.core.session import Session

_NEEDS_DECODE: Final = (
    FLAG_HEADERS | FLAG_DELIVERY_MODE | FLAG_PRIORITY | FLAG_EXPIRATION | FLAG_MESSAGE_ID
)
DECODE_ANY: Final = _NEEDS_DECODE | FLAG_REPLY_TO | FLAGS_INVALID
"""Flags that send a publish's property list past the fast paths. The invalid bits are there
so that every publish path refuses such a header as the decode does (never stored, then
unread)."""
_FLAGS_CT_DM: Final = FLAG_CONTENT_TYPE | FLAG_DELIVERY_MODE
PROPERTY_NAMES: Final = frozenset(f.name for f in fields(BasicProperties))

EXPIRATION_MAX_MS: Final = 4_294_967_295
"""The largest per-message TTL RabbitMQ accepts (its MAX_EXPIRY_TIMER, 2^32 - 1 ms)."""


def only_delivery_mode(pb: bytes) -> int | None:
    """The delivery mode of a property list holding only delivery_mode (and content_type).

    None for any other property list (or a malformed one): the caller then decodes it fully,
    which also reports malformations.
    """
    n = len(pb)
    if n == 3 and pb[0] == 0x10 and pb[1] == 0:  # flags == FLAG_DELIVERY_MODE
        return pb[2]
    if n >= 4 and ((pb[0] << 8) | pb[1]) == _FLAGS_CT_DM and n == pb[2] + 4:
        try:
            str(pb[3:-1], "utf-8")  # content_type must be valid UTF-8, as decoding checks
        except UnicodeDecodeError:
            return None
        return pb[-1]
    return None


def parse_expiration(text: str) -> int:
    """The TTL in ms an `expiration` property sets, read as RabbitMQ reads it.

    RabbitMQ's rabbit_basic:parse_expiration: an optional sign and ASCII digits with nothing
    after (Erlang's string:to_integer, so no other Unicode digit, space or `_` that Python's
    `int` would take), then 0 to `EXPIRATION_MAX_MS`. Anything else is 406 PRECONDITION_FAILED
    with RabbitMQ's text: "invalid expiration '<text>': <reason>".
    """
    if text.isascii() and text.isdigit():  # the common case
        n = int(text)
        if n <= EXPIRATION_MAX_MS:
            return n
    start = 1 if text[:1] in ("+", "-") else 0
    end = start
    while end < len(text) and "0" <= text[end] <= "9":
        end += 1
    if end == start:
        reason = "no_integer"
    elif end < len(text):
        reason = f'{{leftover_string,"{text[end:]}"}}'
    else:
        n = int(text)
        if 0 <= n <= EXPIRATION_MAX_MS:
            return n
        reason = f"{{value_negative,{n}}}" if n < 0 else f"{{value_too_big,{n}}}"
    raise BrokerError(Condition.PRECONDITION_FAILED, f"invalid expiration '{text}': {reason}")


def decoded(exchange: str, routing_key: str, pb: bytes, body: bytes, now_ms: int) -> Message:
    """The message of a property list decoded in full (no reply-to rewrite)."""
    props = decode_properties(pb)
    return _from_props(exchange, routing_key, pb, body, props, now_ms)


def _from_props(
    exchange: str, routing_key: str, pb: bytes, body: bytes, props: BasicProperties, now_ms: int
) -> Message:
    msg = Message(exchange, routing_key, pb, body, timestamp_ms=now_ms)
    msg.headers = props.headers
    msg.priority = props.priority or 0
    msg.persistent = props.delivery_mode == 2
    msg.message_id = props.message_id
    if props.expiration is not None:
        msg.expiration_ms = parse_expiration(props.expiration)
    return msg


def build(
    s: Session | None, exchange: str, routing_key: str, pb: bytes, body: bytes, now_ms: int
) -> Message:
    """The message of one publish on session `s` (see the module docstring)."""
    if len(pb) >= 2 and not ((pb[0] << 8) | pb[1]) & DECODE_ANY:
        # Hot path: no property the core needs; keep the header raw (STYLE: re-send as is).
        return Message(exchange, routing_key, pb, body, timestamp_ms=now_ms)
    if (mode := only_delivery_mode(pb)) is not None:
        # Nearly as hot: clients set delivery_mode (and often content_type) on every publish.
        msg = Message(exchange, routing_key, pb, body, timestamp_ms=now_ms)
        msg.persistent = mode == 2
        return msg
    if (simple := scan_simple(pb)) is not None:
        # message_id (and a few plain fields) without headers, priority, TTL or reply_to:
        # read what the core needs from the raw bytes (propscan.py).
        msg = Message(exchange, routing_key, pb, body, timestamp_ms=now_ms)
        msg.persistent = simple[0] == 2
        msg.message_id = simple[1]
        return msg
    props = decode_properties(pb)
    msg = _from_props(exchange, routing_key, pb, body, props, now_ms)
    if props.reply_to == REPLY_TO_QUEUE and s is not None:
        if s.reply_to_token is None:
            raise BrokerError(Condition.PRECONDITION_FAILED, "fast reply consumer does not exist")
        props.reply_to = REPLY_TO_PREFIX + s.reply_to_token
        msg.properties_bin = encode_properties(props)
    return msg


def columns_of(
    exchange: str,
    messages: Sequence[tuple[str, bytes, bytes]],
    start: int,
    stop: int,
    max_size: int,
    now_ms: int,
) -> tuple[RunColumns | None, int]:
    """The publishes `messages[start:stop]` ((routing key, raw properties, body) each) as
    columns for the core's columnar ingest, as far as they go: `run_columns` of the longest
    prefix with the first one's routing key. Returns (the columns, or None; the index after
    them): the caller builds the rest one at a time."""
    if stop - start < 2:
        return None, start
    rks, props, bodies = zip(*messages[start:stop], strict=True)
    rk = rks[0]
    k = len(rks)
    if rks.count(rk) != k:
        k = next(i for i, other in enumerate(rks) if other != rk)
    columns = run_columns(exchange, rk, props[:k], bodies[:k], max_size, now_ms)
    return columns, start + (0 if columns is None else len(columns))


def run_columns(
    exchange: str,
    routing_key: str,
    props: Sequence[bytes],
    bodies: Sequence[bytes],
    max_size: int,
    now_ms: int,
) -> RunColumns | None:
    """Publishes to `exchange` with `routing_key` (raw property lists and bodies) as columns,
    as far as they go: bodies within `max_size` (0: no limit) and property lists that
    `scan_simple` reads (no headers, priority, expiration or reply_to: `build` makes exactly
    the message the columns stand for). None when fewer than two publishes qualify; the
    caller builds the rest one at a time (which reports what is wrong with the first)."""
    n = len(bodies)
    if max_size and n and max(map(len, bodies)) > max_size:
        n = next(i for i, body in enumerate(bodies) if len(body) > max_size)
    persistent, ids = scan_many(props, n)
    n = len(ids)
    if n < 2:
        return None
    if n < len(bodies):
        props, bodies = props[:n], bodies[:n]
    return RunColumns(exchange, routing_key, now_ms, props, bodies, ids, bytes(persistent))


def from_properties(
    exchange: str, routing_key: str, properties: Mapping[str, Any], body: bytes, now_ms: int
) -> Message:
    """A message from named basic properties (the management API's publish): ValueError for
    an unknown or ill-typed property."""
    try:
        props = BasicProperties(**dict(properties))
    except TypeError as exc:
        raise ValueError(f"bad message properties: {exc}") from None
    pb = encode_properties(props)
    if not ((pb[0] << 8) | pb[1]) & DECODE_ANY:
        return Message(exchange, routing_key, pb, body, timestamp_ms=now_ms)
    return decoded(exchange, routing_key, pb, body, now_ms)


class Amqp091Form:
    """The `core.message.Form` of AMQP 0-9-1 basic properties."""

    def reheadered(self, raw: bytes, headers: dict[str, Any], *, drop_expiration: bool) -> bytes:
        """`raw` with `headers` as its headers (and no expiration when asked)."""
        props = decode_properties(raw)
        props.headers = headers
        if drop_expiration:
            props.expiration = None
        return encode_properties(props)

    def expiration_text(self, raw: bytes) -> str | None:
        """The expiration property as the publisher wrote it."""
        if len(raw) >= 2 and not ((raw[0] << 8) | raw[1]) & FLAG_EXPIRATION:
            return None
        return decode_properties(raw).expiration

    def describe(self, raw: bytes) -> dict[str, Any]:
        """The properties present in `raw`, by name (management listings)."""
        return {k: v for k, v in asdict(decode_properties(raw)).items() if v is not None}

    def compose(
        self,
        exchange: str,
        routing_key: str,
        properties: Mapping[str, Any],
        body: bytes,
        now_ms: int,
    ) -> Message:
        """A message from named basic properties (`from_properties`)."""
        return from_properties(exchange, routing_key, properties, body, now_ms)


AMQP091_FORM: Final = Amqp091Form()
register_form(FORM_AMQP091, AMQP091_FORM)
