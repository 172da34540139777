"""Messages as the core sees them: one protocol-neutral container (RabbitMQ's `mc`).

A `Message` is created once per publish by a protocol adapter and shared by every queue it is
routed to (so a fan-out to ten queues holds one body). Queues never mutate it: per-queue state
(sequence number, redelivered flag, delivery count, expiry) lives in the queue's own entry.

Two parts:

* the **protocol form** the message arrived in, kept raw: `properties_bin` in the encoding of
  the protocol named by `form` (AMQP 0-9-1: the property flags and list exactly as the publisher
  sent them) and `body`. A consumer of the same protocol gets them verbatim; a consumer of
  another protocol converts them, lazily, when it reads the message (docs/dev/messages.md);
* the **neutral fields** the engine reads, filled once by the adapter at publish, only from
  what the form says is present: routing (exchange, routing key), `headers` (application
  properties: LVQ keys, the headers exchange, delays, CC/BCC), `priority`, `expiration_ms`,
  `persistent`, `message_id`, the broker's `timestamp_ms`.

A consumer of another protocol reads the message through `converted` (AMQP 0-9-1 consumers:
`amqp091_content`), which calls the conversion the adapter that knows both forms registered
(`register_conversion`) once and caches its result on the message (`converted`, RabbitMQ's
`mc` conversion cache).

When the core itself changes a message (dead-lettering adds `x-death` headers and drops the
expiration; sender-selected distribution removes BCC) it asks the message's `Form` for the new
raw properties (`reheadered`): the adapter of each protocol registers its form with
`register_form` when imported, so the engine never imports a protocol.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, NewType, Protocol

SeqId = NewType("SeqId", int)
"""Per-queue, strictly increasing position of a message; requeues restore it."""

DeliveryTag = NewType("DeliveryTag", int)
"""Per-channel delivery tag, as on the wire."""


@dataclass(slots=True, eq=False)
class Message:
    """One published message (immutable by convention once routed).

    Attributes:
        exchange: exchange it was published to ("" for the default exchange).
        routing_key: the publish routing key.
        properties_bin: raw encoded basic properties (flags + property list), re-sent verbatim.
        body: the message body.
        headers: decoded application headers, or None when the publisher sent none.
        priority: the `priority` property, 0 when absent.
        expiration_ms: the per-message TTL from the `expiration` property, None when absent.
        persistent: delivery_mode == 2.
        message_id: the `message_id` property, None when absent.
        timestamp_ms: wall time at which the broker accepted the message.
    """

    exchange: str
    routing_key: str
    properties_bin: bytes
    body: bytes
    headers: dict[str, Any] | None = None
    priority: int = 0
    expiration_ms: int | None = None
    persistent: bool = False
    message_id: str | None = None
    timestamp_ms: int = 0
    store_ref: int = field(default=0)
    """Identity in the shared message store once persisted (0: not stored)."""
    form: int = field(default=0)
    """The protocol form of `properties_bin` (`FORM_AMQP091`, ...): which `Form` reads it."""
    converted: dict[int, Any] | None = field(default=None)
    """The per-protocol conversion cache: this message in another form, by form id, made once
    by `converted` for the first consumer of that protocol (never copied with the message)."""

    @property
    def size(self) -> int:
        """Body size in bytes: what byte limits count (RabbitMQ counts bodies only)."""
        return len(self.body)

    def reheadered(
        self,
        headers: dict[str, Any],
        *,
        exchange: str | None = None,
        routing_key: str | None = None,
        drop_expiration: bool = False,
        timestamp_ms: int | None = None,
    ) -> Message:
        """A copy with `headers` as its headers (and optionally another exchange, routing key
        and timestamp; `drop_expiration` removes the per-message TTL), re-encoded in its form."""
        raw = form_of(self).reheadered(
            self.properties_bin, headers, drop_expiration=drop_expiration
        )
        return Message(
            self.exchange if exchange is None else exchange,
            self.routing_key if routing_key is None else routing_key,
            raw,
            self.body,
            headers=headers,
            priority=self.priority,
            expiration_ms=None if drop_expiration else self.expiration_ms,
            persistent=self.persistent,
            message_id=self.message_id,
            timestamp_ms=self.timestamp_ms if timestamp_ms is None else timestamp_ms,
            form=self.form,
        )

    def expiration_text(self) -> str | None:
        """The per-message TTL as its publisher wrote it (for `x-death`'s
        original-expiration), None when it has none."""
        return form_of(self).expiration_text(self.properties_bin)


FORM_AMQP091: Final = 0
"""AMQP 0-9-1 basic properties (flags + property list), as on the wire."""


class Form(Protocol):
    """What the core asks of a protocol's raw message properties."""

    def reheadered(self, raw: bytes, headers: dict[str, Any], *, drop_expiration: bool) -> bytes:
        """`raw` with its headers replaced by `headers` (and its expiration removed)."""

    def expiration_text(self, raw: bytes) -> str | None:
        """The expiration property of `raw` as written, None when absent."""

    def describe(self, raw: bytes) -> dict[str, Any]:
        """The properties present in `raw`, by name (management listings)."""

    def compose(
        self,
        exchange: str,
        routing_key: str,
        properties: Mapping[str, Any],
        body: bytes,
        now_ms: int,
    ) -> Message:
        """A message in this form from named properties (ValueError for a bad one)."""


_FORMS: dict[int, Form] = {}


def register_form(form_id: int, form: Form) -> None:
    """Install the reader of a protocol form (each adapter calls it for its own, at import)."""
    _FORMS[form_id] = form


def form(form_id: int) -> Form:
    """The registered `Form` `form_id`; one whose adapter was never imported is a wiring
    defect (LookupError)."""
    try:
        return _FORMS[form_id]
    except KeyError:
        raise LookupError(
            f"no reader registered for message form {form_id} (import its protocol adapter)"
        ) from None


def form_of(msg: Message) -> Form:
    """The `Form` of `msg`."""
    return form(msg.form)


Conversion = Callable[[Message], Any]
"""Makes a message of one form readable by the consumers of another (what it returns is that
protocol's: `(properties_bin, body)` for AMQP 0-9-1)."""

_CONVERSIONS: dict[tuple[int, int], Conversion] = {}


def register_conversion(source: int, target: int, conversion: Conversion) -> None:
    """Install the conversion of messages of form `source` for consumers of form `target` (the
    adapter that knows both registers it, at import)."""
    _CONVERSIONS[source, target] = conversion


def converted(msg: Message, target: int) -> Any:
    """`msg` converted for a consumer of form `target`: made once, then cached on the message
    (so a fan-out to many consumers of one protocol converts once). A conversion nobody
    registered is a wiring defect (LookupError)."""
    cache = msg.converted
    if cache is None:
        cache = msg.converted = {}
    elif target in cache:
        return cache[target]
    try:
        conversion = _CONVERSIONS[msg.form, target]
    except KeyError:
        raise LookupError(
            f"no conversion of message form {msg.form} to form {target} (import its adapter)"
        ) from None
    got = cache[target] = conversion(msg)
    return got


def amqp091_content(msg: Message) -> tuple[bytes, bytes]:
    """`(properties_bin, body)` of `msg` for an AMQP 0-9-1 consumer: its own for a 0-9-1
    message (the delivery path tests `msg.form` first and never calls this for one), else
    converted once and cached."""
    if not msg.form:
        return msg.properties_bin, msg.body
    pb, body = converted(msg, FORM_AMQP091)
    return pb, body
