"""Stream queues' settings and offset specifications: what a declare and a consumer give.

RabbitMQ's rules for a stream declare (`check_stream_declare`: the properties and arguments a
stream refuses, in its order and words; `stream_spec`: segment size and retention from the
arguments) and for where a reader starts (`x-stream-offset`: `parse_offset_spec` into an
`OffsetSpec`). The log itself (segments, index, retention) is `ringmq.core.streamlog`'s, which
re-exports these names. Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any, Final

from ringmq.core.argvalues import SettingsError, parse_max_age

__all__ = [
    "DEFAULT_MAX_SEGMENT_BYTES",
    "MAX_SEGMENT_BYTES",
    "NEXT",
    "STREAM",
    "STREAM_ARGUMENTS",
    "ConfirmRule",
    "OffsetKind",
    "OffsetSpec",
    "StreamSpec",
    "check_stream_declare",
    "parse_offset_spec",
    "stream_spec",
]

STREAM: Final = "stream"
"""The `x-queue-type` of a stream queue."""


class ConfirmRule(StrEnum):
    """When a publish to a stream is confirmed (`[server] stream_confirm`, `--stream-confirm`).

    `FSYNCED` (the default): after the fsync covering its chunk, so a power loss loses nothing
    confirmed. `WRITTEN`: once its chunk is handed to the OS (in the page cache), as RabbitMQ's
    streams confirm (written and replicated, no fsync): a crash of the broker's process
    (kill -9) loses nothing confirmed, a power loss or kernel crash may lose the last ones."""

    FSYNCED = "fsynced"
    WRITTEN = "written"


DEFAULT_MAX_SEGMENT_BYTES: Final = 500_000_000
"""RabbitMQ's default `x-stream-max-segment-size-bytes`."""
MAX_SEGMENT_BYTES: Final = 3_000_000_000
"""RabbitMQ's ceiling for `x-stream-max-segment-size-bytes` (?MAX_STREAM_MAX_SEGMENT_SIZE)."""
STREAM_ARGUMENTS: Final = frozenset(
    {
        "x-queue-type",
        "x-max-length-bytes",
        "x-max-age",
        "x-stream-max-segment-size-bytes",
        "x-initial-cluster-size",
        "x-queue-leader-locator",
        "x-stream-filter-size-bytes",
    }
)
"""Arguments a stream accepts (RabbitMQ's `rabbit_stream_queue:capabilities`); the other
arguments RabbitMQ knows are refused on a stream."""

# Arguments RabbitMQ knows for other queue types, refused on a stream ("invalid arg ... of queue
# type rabbit_stream_queue"); anything else is ignored, as on any queue.
_REFUSED_ON_STREAM: Final = frozenset(
    {
        "x-expires",
        "x-message-ttl",
        "x-dead-letter-exchange",
        "x-dead-letter-routing-key",
        "x-max-length",
        "x-max-priority",
        "x-overflow",
        "x-queue-mode",
        "x-single-active-consumer",
        "x-delivery-limit",
        "x-dead-letter-strategy",
        "x-quorum-initial-group-size",
        "x-queue-version",
        "x-queue-master-locator",
        "x-ring-size",
        "x-last-value-key",
        "x-last-value",
        "x-non-destructive",
    }
)


@dataclass(frozen=True, slots=True)
class StreamSpec:
    """A stream's storage settings."""

    max_segment_bytes: int = DEFAULT_MAX_SEGMENT_BYTES
    max_bytes: int | None = None
    """`x-max-length-bytes`: retention by size (None: unbounded)."""
    max_age_ms: int | None = None
    """`x-max-age`: retention by age (None: unbounded)."""


def _rs(name: str, vhost: str) -> str:
    # rabbit_misc:rs/1 of a queue resource
    return f"queue '{name}' in vhost '{vhost}'"


def check_stream_declare(
    name: str,
    vhost: str,
    *,
    durable: bool,
    exclusive: bool,
    auto_delete: bool,
    arguments: Mapping[str, Any],
) -> None:
    """RabbitMQ's checks on a stream declare, in its order and words (SettingsError: 406)."""
    if auto_delete:
        raise SettingsError(f"invalid property 'auto-delete' for {_rs(name, vhost)}")
    if exclusive:
        raise SettingsError(f"invalid property 'exclusive-owner' for {_rs(name, vhost)}")
    if not durable:
        raise SettingsError(f"invalid property 'non-durable' for {_rs(name, vhost)}")
    for arg in sorted(arguments):
        if arg in _REFUSED_ON_STREAM:
            raise SettingsError(
                f"invalid arg '{arg}' for {_rs(name, vhost)} of queue type rabbit_stream_queue"
            )
    stream_spec(name, arguments, None)


def stream_spec(name: str, arguments: Mapping[str, Any], max_bytes: int | None) -> StreamSpec:
    """The `StreamSpec` of stream `name` from its arguments (`max_bytes`: the effective
    `x-max-length-bytes`, argument or policy)."""
    seg = arguments.get("x-stream-max-segment-size-bytes", DEFAULT_MAX_SEGMENT_BYTES)
    if type(seg) is not int or seg < 1:
        raise SettingsError(
            f"invalid arg 'x-stream-max-segment-size-bytes' for queue '{name}': "
            f"expected a positive integer, got {seg!r}"
        )
    if seg > MAX_SEGMENT_BYTES:
        raise SettingsError("Exceeded max value for x-stream-max-segment-size-bytes")
    age = arguments.get("x-max-age")
    age_ms = None
    if age is not None:
        try:
            age_ms = parse_max_age(age)
        except ValueError:
            raise SettingsError(
                f"invalid arg 'x-max-age' for queue '{name}': expected a duration such as "
                f"'7D' or '1h' (units Y M D h m s), got {age!r}"
            ) from None
    if max_bytes is None:
        mb = arguments.get("x-max-length-bytes")
        max_bytes = mb if type(mb) is int else None
    return StreamSpec(seg, max_bytes, age_ms)


# --- offset specifications --------------------------------------------------------------------


class OffsetKind(StrEnum):
    """Where a stream reader starts."""

    FIRST = "first"
    LAST = "last"
    NEXT = "next"
    OFFSET = "offset"
    TIMESTAMP = "timestamp"


@dataclass(frozen=True, slots=True)
class OffsetSpec:
    """A reader's starting point (`value`: the offset, or the timestamp in ms)."""

    kind: OffsetKind
    value: int = 0


NEXT: Final = OffsetSpec(OffsetKind.NEXT)


def parse_offset_spec(value: Any, now_ms: int) -> OffsetSpec:
    """`x-stream-offset` as RabbitMQ reads it (`rabbit_stream_queue:parse_offset_arg`):
    absent: next; `first`, `last`, `next`; an integer: that offset; an AMQP timestamp
    (a `datetime`, seconds): that time; another string: an interval back from now (`1h`).
    ValueError for anything else."""
    if value is None:
        return NEXT
    if isinstance(value, bytes):
        value = value.decode()
    if isinstance(value, str):
        if value in ("first", "last", "next"):
            return OffsetSpec(OffsetKind(value))
        return OffsetSpec(OffsetKind.TIMESTAMP, now_ms - parse_max_age(value))
    if isinstance(value, datetime):
        return OffsetSpec(OffsetKind.TIMESTAMP, int(value.timestamp() * 1000))
    if type(value) is int and value >= 0:
        return OffsetSpec(OffsetKind.OFFSET, value)
    raise ValueError(value)
