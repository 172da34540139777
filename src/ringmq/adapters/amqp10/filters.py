"""A receiver's source filters, as Qpid JMS and ActiveMQ Artemis name them.

A source's `filter` field is a map of filter name -> described value (AMQP 1.0 3.5.8); the
descriptor, not the name, says what the filter is. The broker applies the filters it knows and
echoes only those in its attach's source; one it does not apply is left out, so the receiver
sees that it was not applied (3.5.3), never silently taken as applied:

* the JMS selector, `apache.org:selector-filter:string` (descriptor code 0x0000468C00000004:
  Qpid JMS and Artemis accept both, rhea sends the code, python-qpid-proton the symbol); its
  value is the selector text;
* no-local, `apache.org:no-local-filter:list` (code 0x0000468C00000003; Qpid JMS sends it for
  `createConsumer(topic, selector, noLocal=true)` and durable subscribers with noLocal): the
  receiver does not get messages its own connection published. The caller decides where it
  applies (Artemis: multicast subscriptions) and says so with `applied`;
* RabbitMQ 4's stream offset, `rabbitmq:stream-offset-spec` (by name: RabbitMQ registers no
  code): where a stream consumer starts, `first`, `last`, `next`, an offset (a ulong), a
  timestamp or an interval string such as `1h` (`stream_offset`, given to the core as
  `x-stream-offset`; echoed when the source is a stream).

Pure: a function of the decoded filter map.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

from ringmq.amqp10.types import Described, Timestamp

SELECTOR_FILTER_CODE: Final = 0x0000468C00000004
"""The JMS selector filter's descriptor code (Apache's filter registry)."""
SELECTOR_FILTER_NAME: Final = "apache.org:selector-filter:string"
NO_LOCAL_FILTER_CODE: Final = 0x0000468C00000003
"""The no-local filter's descriptor code (Apache's filter registry)."""
NO_LOCAL_FILTER_NAME: Final = "apache.org:no-local-filter:list"
STREAM_OFFSET_FILTER_NAME: Final = "rabbitmq:stream-offset-spec"
SELECTOR: Final = "selector"
NO_LOCAL: Final = "no-local"
STREAM_OFFSET: Final = "stream-offset"


class FilterError(ValueError):
    """A filter the broker knows, with a value it cannot take (`amqp:invalid-field`)."""


@dataclass(slots=True)
class SourceFilters:
    """The filters of a source the broker knows.

    Attributes:
        selector: the JMS selector's text (None: no selector).
        no_local: the source asks for no-local.
        known: filter name -> (`SELECTOR` or `NO_LOCAL`, its described value), for the echo.
    """

    selector: str | None = None
    no_local: bool = False
    stream_offset: Any = None
    """The stream offset specification's value (None: none given)."""
    known: dict[Any, tuple[str, Any]] = field(default_factory=dict)

    def applied(self, *, no_local: bool, stream: bool = False) -> dict[Any, Any] | None:
        """The filter map the attach echoes: the selector, no-local when `no_local` says the
        broker applies it here, the stream offset when the source is a `stream` (None: no
        filter applied)."""
        skip = {k for k, b in ((NO_LOCAL, no_local), (STREAM_OFFSET, stream)) if not b}
        out = {k: v for k, (kind, v) in self.known.items() if kind not in skip}
        return out or None

    def stream_offset_argument(self) -> Any:
        """The stream offset as the core's `x-stream-offset` argument (an AMQP timestamp, in
        ms, becomes a `datetime`), None when none was given."""
        value = self.stream_offset
        if isinstance(value, Timestamp):
            return datetime.fromtimestamp(int(value) / 1000, UTC)
        if isinstance(value, int) and not isinstance(value, bool):
            return int(value)
        if isinstance(value, str):
            return str(value)
        return value


def _is(descriptor: Any, code: int, name: str) -> bool:
    if isinstance(descriptor, int) and not isinstance(descriptor, bool):
        return int(descriptor) == code
    return isinstance(descriptor, str) and str(descriptor) == name


def source_filters(filters: Any) -> SourceFilters:
    """The filters of a source's `filter` field that the broker knows; others are ignored
    (and so not echoed).

    Raises:
        FilterError: a selector filter whose value is not a string.
    """
    found = SourceFilters()
    if not isinstance(filters, dict):
        return found
    for key, value in filters.items():
        if not isinstance(value, Described):
            continue
        d = value.descriptor
        if _is(d, SELECTOR_FILTER_CODE, SELECTOR_FILTER_NAME):
            if not isinstance(value.value, str):
                raise FilterError(f"a selector filter must be a string, not {value.value!r}")
            found.selector = str(value.value)
            kind = SELECTOR
        elif _is(d, NO_LOCAL_FILTER_CODE, NO_LOCAL_FILTER_NAME):
            found.no_local = True
            kind = NO_LOCAL
        elif isinstance(d, str) and str(d) == STREAM_OFFSET_FILTER_NAME:
            found.stream_offset = value.value
            kind = STREAM_OFFSET
        else:
            continue
        found.known[key] = (kind, value)
    return found
