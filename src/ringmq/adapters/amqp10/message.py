"""AMQP 1.0 messages in the core's container: building them at publish, and the 1.0 form.

Theory of operation
-------------------
A transfer's payload is the encoded message: sections (``amqp10/sections.py``). `build` scans
it once (decoding only header, message-annotations, properties and application-properties;
the body is stepped over, never decoded) and keeps it raw in the core's `Message` of form
`FORM_AMQP10`:

* ``properties_bin``: the sections before the body as received (header, message-annotations,
  properties, application-properties), less the delivery-annotations (they are for one hop
  only) and less the header's ``first-acquirer`` and ``delivery-count`` (per-delivery state
  the broker owns: a header carrying them, or whose descriptor is not in the usual
  ``smallulong`` form, is re-encoded without them, which is rare);
* ``body``: the body sections and the footer, exactly as received, so `Message.size` is the
  length of the encoded body sections.

The neutral fields come from docs/dev/messages.md §2: ``persistent`` from header durable,
``priority``, ``expiration_ms`` from header ttl or else properties absolute-expiry-time
(counted from arrival), ``message_id`` as the text a 0-9-1 consumer gets as its message_id
(§3: none for a binary or over-long id), ``headers`` from application-properties
and the ``x-*`` message-annotations (``x-cc`` as ``CC``), plus what the engine schedules by:
``x-opt-delivery-time`` as ``_AMQ_SCHED_DELIVERY`` and ``x-opt-delivery-delay`` as ``x-delay``.

A 1.0 receiver gets `payload_for_amqp10`: for a 1.0 message ``properties_bin + body`` (no
decoding), with the header rewritten only when the delivery count is not 0. The header's
``first-acquirer`` is written only in such a rewritten header; otherwise it stays absent,
i.e. false, which the spec reads as "may have been acquired before" and always allows: setting
it would cost a header encoding per delivery. A message of another form is converted once
(``convert.py``, §4) and cached on the message by the core (`converted`). The reverse
conversion (§3), for 0-9-1 consumers, is registered with the core at import, as is
`AMQP10_FORM`, the `core.message.Form` of this layout.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any, Final, cast

from ringmq.adapters.amqp091.message import AMQP091_FORM, EXPIRATION_MAX_MS, from_properties
from ringmq.adapters.amqp10.convert import (
    carried,
    from_amqp091,
    header_bytes,
    id_text,
    neutral,
    shortstr,
    to_amqp091,
)
from ringmq.amqp10 import sections as sec
from ringmq.amqp10.codec import decode, skip
from ringmq.amqp10.composite import from_fields
from ringmq.amqp10.sections import Header, Scan, scan, usual_form
from ringmq.amqp10.types import DecodeError, Int, Symbol, Timestamp
from ringmq.core.message import (
    FORM_AMQP091,
    Message,
    converted,
    register_conversion,
    register_form,
)
from ringmq.core.streamchunk import register_entry_codec

FORM_AMQP10: Final = 1
"""AMQP 1.0: the encoded sections before the body, and the body sections (module docstring)."""

_HEADER_PREFIX: Final = b"\x00\x53\x70"
_SHORT_DATA: Final = b"\x00\x53\x75\xa0"
"""A data section (smallulong descriptor) holding a vbin8."""
_DELAY_MAX_MS: Final = 2**62
"""The longest x-opt-delivery-delay taken as it is (146 million years); longer is this."""
_INT_MIN: Final = -(2**31)
_INT_MAX: Final = 2**31 - 1


def build(payload: bytes, *, exchange: str, routing_key: str, now_ms: int) -> Message:
    """The core message of a transfer's payload (the whole encoded message as received).

    Raises:
        DecodeError: the payload is not a well-formed AMQP 1.0 message.
    """
    if type(payload) is not bytes:
        payload = bytes(payload)
    n = len(payload)
    if n > 4 and payload[4] + 5 == n and payload.startswith(_SHORT_DATA):
        # one short data section, the commonest form (`usual_form` says so too, a call later)
        return Message(exchange, routing_key, b"", payload, None, 0, None, False, None, now_ms,
                       0, FORM_AMQP10)  # fmt: skip
    usual = usual_form(payload)
    if usual is not None:  # an optional header, one data section: read at once
        h, start = usual
        if h is None:  # nothing before the body, nothing the core reads
            return Message(exchange, routing_key, b"", payload, None, 0, None, False, None,
                           now_ms, 0, FORM_AMQP10)  # fmt: skip
        if not h.first_acquirer and not h.delivery_count:
            persistent, priority, ttl = _header_fields(h)
            return Message(exchange, routing_key, payload[:start], payload[start:], None,
                           priority, ttl, persistent, None, now_ms, 0, FORM_AMQP10)  # fmt: skip
    sc = scan(payload)
    h = sc.header
    if h is not None and (
        h.first_acquirer or h.delivery_count or payload[:3] != _HEADER_PREFIX
    ):  # delivery state to drop, or a header in a long form: re-encoded, as the rest expects
        head = header_bytes((h.durable, h.priority, h.ttl), False, 0)
        pb = head + payload[sc.annotations_start : sc.body_start]
    elif sc.annotations_start != sc.header_end:  # delivery-annotations: left out
        pb = payload[: sc.header_end] + payload[sc.annotations_start : sc.body_start]
    else:
        pb = payload[: sc.body_start]
    msg = Message(exchange, routing_key, pb, payload[sc.body_start :], None, 0, None, False, None,
                  now_ms, 0, FORM_AMQP10)  # fmt: skip
    if h is not None:
        msg.persistent, msg.priority, msg.expiration_ms = _header_fields(h)
    p = sc.properties
    if p is not None:
        if p.message_id is not None:
            text = id_text(p.message_id)  # the 0-9-1 message_id it becomes (§3), or none
            msg.message_id = text if text is not None and shortstr(text) is not None else None
        if msg.expiration_ms is None and p.absolute_expiry_time is not None:
            left = max(0, int(p.absolute_expiry_time) - now_ms)
            # past the longest TTL a queue takes (2^32 - 1 ms, as 0-9-1's): no expiry at all
            msg.expiration_ms = left if left <= EXPIRATION_MAX_MS else None
    ma, ap = sc.message_annotations, sc.application_properties
    if ma or ap:
        msg.headers = neutral_headers(ma, ap)
    if p is not None and p.group_id is not None:
        # the group the engine groups by (core/groups.py), under JMS' names as Artemis maps
        # them; the message's own sections are not changed
        grouped = dict(msg.headers or {})
        grouped["JMSXGroupID"] = str(p.group_id)
        if p.group_sequence is not None:
            grouped["JMSXGroupSeq"] = int(p.group_sequence)
        msg.headers = grouped
    return msg


def _header_fields(h: Header) -> tuple[bool, int, int | None]:
    # the neutral fields of a 1.0 header (docs/dev/messages.md §2): persistent, priority,
    # expiration_ms
    return bool(h.durable), int(h.priority or 0), (None if h.ttl is None else int(h.ttl))


def neutral_headers(ma: dict[Any, Any] | None, ap: dict[Any, Any] | None) -> dict[str, Any] | None:
    """``Message.headers`` of a 1.0 message: application-properties, ``x-*``
    message-annotations (``x-cc`` as ``CC``), and the Artemis scheduling annotations as the
    headers the engine schedules by (docs/dev/messages.md §2, §6)."""
    headers: dict[str, Any] = {}
    if ap:
        for k, v in ap.items():
            if isinstance(k, str) and carried(v):
                headers[str(k)] = neutral(v)
    if ma:
        for k, v in ma.items():
            if isinstance(k, str) and k.startswith("x-") and carried(v):
                headers["CC" if k == "x-cc" else str(k)] = neutral(v)
        when = ma.get("x-opt-delivery-time")
        if isinstance(when, int) and not isinstance(when, bool):
            headers["_AMQ_SCHED_DELIVERY"] = int(when)
        delay = ma.get("x-opt-delivery-delay")
        if isinstance(delay, int) and not isinstance(delay, bool):
            # bounded so that arrival + delay stays a 64-bit time (the journal's due_ms)
            headers["x-delay"] = min(int(delay), _DELAY_MAX_MS)
    return headers or None


def address_of(payload: bytes) -> str | None:
    """The properties section's ``to`` (where an anonymous relay routes the message), None
    when absent. Steps over the sections before properties without decoding them.

    Raises:
        DecodeError: a malformed payload.
    """
    off, n = 0, len(payload)
    try:
        while off < n:
            if payload[off] != 0 or payload[off + 1] != 0x53:
                # a descriptor by name or in a long form: the full reader
                p = scan(payload).properties
                return None if p is None or p.to is None else str(p.to)
            code = payload[off + 2]
            if code == sec.PROPERTIES:
                to = cast(
                    sec.Properties, from_fields(sec.Properties, decode(payload, off + 3)[0])
                ).to
                return None if to is None else str(to)
            if code > sec.PROPERTIES:
                return None
            off = skip(payload, off + 3)
    except IndexError:
        raise DecodeError("truncated message section") from None
    return None


def payload_for_amqp10(msg: Message, *, first_acquirer: bool, delivery_count: int) -> bytes:
    """What a 1.0 receiver gets for ``msg`` (see the module docstring): the raw sections of a
    1.0 message, the header rewritten only when ``delivery_count`` is not 0; a message of
    another form converted (§4) once and cached on it."""
    if msg.form == FORM_AMQP10:
        pb = msg.properties_bin
        if not delivery_count:
            return pb + msg.body
        if pb[:3] == _HEADER_PREFIX:
            value, end = decode(pb, 3)
            h = cast(Header, from_fields(Header, value))
            fields = (h.durable, h.priority, h.ttl)
            pb = pb[end:]
        else:
            fields = (False, None, None)
        return header_bytes(fields, first_acquirer, delivery_count) + pb + msg.body
    fields, payload, header_len = converted(msg, FORM_AMQP10)
    if not delivery_count:
        return bytes(payload)
    rest = payload[header_len:]
    return header_bytes(fields, first_acquirer, delivery_count) + bytes(rest)


def _from_amqp091(msg: Message) -> tuple[tuple[bool, int | None, int | None], bytes, int]:
    # Cached on the message: the first delivery's payload (one copy of the body), with the
    # header's fields and length for a redelivery's header.
    fields, rest = from_amqp091(msg.properties_bin, msg.body, msg.expiration_ms)
    head = header_bytes(fields, False, 0)
    return fields, head + rest, len(head)


def _to_amqp091(msg: Message) -> tuple[bytes, bytes]:
    payload = msg.properties_bin + msg.body
    return to_amqp091(scan(payload), payload, msg.expiration_ms)


def to_10(v: Any) -> Any:
    """A header value as the engine holds it (a 0-9-1 table's Python value) as a 1.0 value:
    ints as int or long (as the 0-9-1 table codec picks I or l), datetimes as timestamps."""
    if isinstance(v, bool) or v is None or isinstance(v, str | bytes | float):
        return v
    if isinstance(v, int):
        return Int(v) if _INT_MIN <= v <= _INT_MAX else int(v)
    if isinstance(v, datetime):
        return Timestamp(int(v.timestamp()) * 1000)
    if isinstance(v, list):
        return [to_10(x) for x in v]
    if isinstance(v, dict):
        return {str(k): to_10(x) for k, x in v.items()}
    return str(v)  # a Decimal: its text


def _reheadered(raw: bytes, headers: dict[str, Any], drop_expiration: bool) -> bytes:
    sc = scan(raw)
    old = neutral_headers(sc.message_annotations, sc.application_properties) or {}
    ma = dict(sc.message_annotations or {})
    ap = dict(sc.application_properties or {})
    derived = {"CC": "x-cc", "_AMQ_SCHED_DELIVERY": "x-opt-delivery-time"}
    derived["x-delay"] = "x-opt-delivery-delay"
    for k in old.keys() - headers.keys():
        ap.pop(k, None)
        ma.pop(k, None)
        if k in derived:
            ma.pop(derived[k], None)
    for k, v in headers.items():
        if k in old and old[k] == v:
            continue
        if k == "CC":
            ma[Symbol("x-cc")] = to_10(v)
        elif k.startswith("x-"):
            ma[Symbol(k)] = to_10(v)
        else:
            ap[k] = to_10(v)
    return _encode_prefix(sc, ma, ap, drop_expiration)


def _encode_prefix(sc: Scan, ma: dict[Any, Any], ap: dict[Any, Any], drop_ttl: bool) -> bytes:
    parts = []
    h = sc.header
    if h is not None:
        if drop_ttl:
            h = replace(h, ttl=None)
        if h != Header():
            parts.append(h.encode())
    if ma:
        parts.append(sec.encode_section(sec.MESSAGE_ANNOTATIONS, ma))
    p = sc.properties
    if p is not None:
        parts.append((replace(p, absolute_expiry_time=None) if drop_ttl else p).encode())
    if ap:
        parts.append(sec.encode_section(sec.APPLICATION_PROPERTIES, ap))
    return b"".join(parts)


class Amqp10Form:
    """The `core.message.Form` of AMQP 1.0 messages (the layout of the module docstring)."""

    def reheadered(self, raw: bytes, headers: dict[str, Any], *, drop_expiration: bool) -> bytes:
        """``raw`` with its headers replaced: a changed ``x-*`` header (and ``CC``) in the
        message-annotations, any other in the application-properties; ``drop_expiration``
        removes the header's ttl and the absolute-expiry-time."""
        return _reheadered(raw, headers, drop_expiration)

    def expiration_text(self, raw: bytes) -> str | None:
        """The header's ttl in decimal ms (what 0-9-1 consumers see as ``expiration``)."""
        if raw[:3] != _HEADER_PREFIX:
            return None
        ttl = cast(Header, from_fields(Header, decode(raw, 3)[0])).ttl
        return None if ttl is None else str(ttl)

    def describe(self, raw: bytes) -> dict[str, Any]:
        """The properties a 0-9-1 consumer would see (§3), by 0-9-1 name."""
        sc = scan(raw)
        ttl = sc.header.ttl if sc.header is not None else None
        pb, _ = to_amqp091(sc, raw, ttl, body=False)
        return AMQP091_FORM.describe(pb)

    def compose(
        self,
        exchange: str,
        routing_key: str,
        properties: Mapping[str, Any],
        body: bytes,
        now_ms: int,
    ) -> Message:
        """A 1.0 message from named 0-9-1 properties (the management API's publish), by §4."""
        m = from_properties(exchange, routing_key, properties, body, now_ms)
        fields, rest = from_amqp091(m.properties_bin, m.body, m.expiration_ms)
        payload = header_bytes(fields, False, 0) + rest
        return build(payload, exchange=exchange, routing_key=routing_key, now_ms=now_ms)


AMQP10_FORM: Final = Amqp10Form()
register_form(FORM_AMQP10, AMQP10_FORM)
register_conversion(FORM_AMQP10, FORM_AMQP091, _to_amqp091)
register_conversion(FORM_AMQP091, FORM_AMQP10, _from_amqp091)


def _stream_entry(data: bytes, timestamp_ms: int, stream: str) -> Message:
    # An entry of a stream chunk kept as published (core/streamchunk.py), for a consumer of
    # another protocol; what is not an AMQP 1.0 message is the body of one. It carries no
    # exchange or routing key: RabbitMQ's defaults, as if sent to the default exchange with
    # the stream's name (rabbit_stream_queue:entry_to_msg).
    try:
        return build(data, exchange="", routing_key=stream, now_ms=timestamp_ms)
    except ValueError:
        wrapped = b"\x00\x53\x75\xb0" + len(data).to_bytes(4, "big") + data
        return build(wrapped, exchange="", routing_key=stream, now_ms=timestamp_ms)


def _stream_payload(msg: Message) -> bytes:
    return payload_for_amqp10(msg, first_acquirer=False, delivery_count=0)


register_entry_codec(_stream_entry, _stream_payload)
