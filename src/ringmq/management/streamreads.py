"""The streams API's offset readers: reserve, range read, settle, browse, leases, head/tail.

Theory of operation
-------------------
`StreamReads` serves `/api/streams/{vhost}/{queue}...` over the broker's reservation books
(`core.streambooks.StreamBooks`: one `core.reservations.Reservations` book per queue, created
on first use, dropped with the queue, stored with a durable queue and recovered at start),
which it reaches only through the management facade (`admin.CoreAdmin`: `reserve`,
`read_reserved`, `settle`, `browse_ready`, `drop_lease`, `stream_info`, `expire_leases`).
A reserve or a settle answers only once the group commit's fsync covers what it wrote (the
lease, the settles' ACK records), as a publisher confirm does (`durable`).

Every call runs on the broker's event loop, inside one server batch (`in_batch`), so it calls
the pure core directly without locks. Anything that can make messages ready again (a lease
expiring, a consumer name dropped) is followed, inside the facade, by a broker dispatch whose
effects go out through the runtime, so waiting AMQP consumers get the returned messages.

A loop timer (armed when the routes are mounted on a running loop, else by the first request)
expires leases once a second, recovered ones included.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, Final, TypeVar

from ringmq.amqp.reply_codes import AMQPError
from ringmq.core.errors import BrokerError
from ringmq.core.reservations import DEFAULT_LEASE_MS, MAX_RESERVE_PER_CALL
from ringmq.management.admin import CoreAdmin
from ringmq.management.port import Runtime
from ringmq.management.streamwire import (
    COLUMNS_MEDIA_TYPE,
    MAX_READ,
    STORED_MEDIA_TYPE,
    StreamError,
    encode_column_set,
    encode_rows,
    parse_consumer,
    parse_int,
)

log = logging.getLogger(__name__)

CONFIRM_TIMEOUT_S: Final = 60.0
"""Longest a request waits for the store to make what it wrote durable."""
EXPIRE_PERIOD_S: Final = 1.0

_T = TypeVar("_T")
_STATUS: Final = {"NOT_FOUND": 404, "ACCESS_REFUSED": 403}


def refused(exc: AMQPError | BrokerError) -> StreamError:
    """The streams API's answer to a broker refusal (404, 403, else 400)."""
    name = exc.code.name if isinstance(exc, AMQPError) else exc.condition.name
    return StreamError(_STATUS.get(name, 400), exc.explanation)


class StreamReads:
    """Offset readers over the facade (see the module docstring).

    Args:
        admin: the management facade over the core broker.
        runtime: the server (its batches and group commit).
        clock_ms: wall clock in ms (the server's clock).
    """

    def __init__(self, admin: CoreAdmin, runtime: Runtime, clock_ms: Callable[[], int]) -> None:
        self.admin = admin
        self.runtime = runtime
        self.clock_ms = clock_ms
        self._timer: asyncio.TimerHandle | None = None

    def in_batch(self, fn: Callable[[], _T]) -> _T:
        """Run `fn` as one server batch (its writes and effects flushed together)."""
        return self.runtime.run_batch(fn)

    # -- operations (sync; each is one call on the loop) --------------------------------------
    def reserve(self, vhost: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        consumer = parse_consumer(body.get("consumer"))
        start = parse_int(body.get("start", 0), "start", 0)
        max_messages = parse_int(body.get("max", 1000), "max", 0, MAX_RESERVE_PER_CALL)
        lease_ms = parse_int(body.get("lease_ms", DEFAULT_LEASE_MS), "lease_ms", 1)
        max_bytes = body.get("max_bytes")
        if max_bytes is not None:
            max_bytes = parse_int(max_bytes, "max_bytes", 1)
        try:
            return self.admin.reserve(
                vhost,
                name,
                consumer,
                start,
                max_messages,
                lease_ms=lease_ms,
                max_bytes=max_bytes,
                now_ms=self.clock_ms(),
            )
        except (AMQPError, BrokerError) as exc:
            raise refused(exc) from None

    def read(
        self, vhost: str, name: str, consumer: str, lo: int, hi: int, *, columns: bool = False
    ) -> bytes:
        try:
            if columns:  # rows held raw go in as blocks (`Reservations.read_columns`)
                cols, positions = self.admin.read_reserved_columns(
                    vhost, name, consumer, lo, hi, max_span=MAX_READ, now_ms=self.clock_ms()
                )
                return encode_column_set(cols, positions)
            rows = self.admin.read_reserved(
                vhost, name, consumer, lo, hi, max_span=MAX_READ, now_ms=self.clock_ms()
            )
        except (AMQPError, BrokerError) as exc:
            raise refused(exc) from None
        except ValueError as exc:
            raise StreamError(400, str(exc)) from None
        return encode_rows(rows, columns=False)

    def settle(self, vhost: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        consumer = parse_consumer(body.get("consumer"))
        up_to = parse_int(body.get("up_to"), "up_to", 0)
        try:
            return self.admin.settle(vhost, name, consumer, up_to, now_ms=self.clock_ms())
        except (AMQPError, BrokerError) as exc:
            raise refused(exc) from None

    def browse(
        self, vhost: str, name: str, after: int | None, limit: int, *, columns: bool = False
    ) -> bytes:
        """Ready messages with seq > after, in seq order, without changing anything.

        Records carry the queue seq as both position and seq (a browse has no lease). A paged
        queue is read in place and stays paged (`Queue.browse_ready`); with `columns`, its
        page records go to the columns without a message built for each
        (`Queue.browse_columns`).
        """
        try:
            if columns:
                cols = self.admin.browse_columns(vhost, name, after, limit, self.clock_ms())
                return encode_column_set(cols)
            rows = self.admin.browse_ready(vhost, name, after, limit, self.clock_ms())
        except (AMQPError, BrokerError) as exc:
            raise refused(exc) from None
        return encode_rows(rows, columns=False)

    def drop(self, vhost: str, name: str, consumer: str) -> bool:
        try:
            return self.admin.drop_lease(vhost, name, consumer, now_ms=self.clock_ms())
        except (AMQPError, BrokerError) as exc:
            raise refused(exc) from None

    def read_log(
        self, vhost: str, name: str, lo: int, hi: int, *, stored: bool = False
    ) -> tuple[str, bytes]:
        """A stream queue's offsets `[lo, hi)`: (media type, body). In the columns encoding,
        or with `stored` the records as the segments hold them when the log has them (the
        columns otherwise). Nothing is reserved: an offset reader keeps its own position."""
        try:
            if stored:
                pieces = self.admin.read_log_stored(vhost, name, lo, hi, max_span=MAX_READ)
                if pieces is not None:
                    return STORED_MEDIA_TYPE, pieces[0] if len(pieces) == 1 else b"".join(pieces)
            cols = self.admin.read_log_columns(vhost, name, lo, hi, max_span=MAX_READ)
        except (AMQPError, BrokerError) as exc:
            raise refused(exc) from None
        except ValueError as exc:
            raise StreamError(400, str(exc)) from None
        return COLUMNS_MEDIA_TYPE, encode_column_set(cols)

    def info(self, vhost: str, name: str, timestamp_ms: int | None = None) -> dict[str, Any]:
        try:
            bounds, leases = self.admin.stream_info(vhost, name, timestamp_ms=timestamp_ms)
        except (AMQPError, BrokerError) as exc:
            raise refused(exc) from None
        return {
            "vhost": vhost,
            "name": name,
            **bounds,
            "leases": [
                {
                    "consumer": le.consumer,
                    "settled": le.settled,
                    "next": le.next_pos,
                    "held": le.held,
                    "skipped": le.skipped,
                    "expired": le.expired,
                    "lease_ms": le.lease_ms,
                    "deadline_ms": le.deadline_ms,
                    "lag": le.held + bounds["ready"],
                }
                for le in leases
            ],
        }

    def expire(self, now_ms: int) -> int:
        """Expire leases of every book; returns how many leases gave messages back."""
        n = 0
        for vhost, name, gone in self.admin.expire_leases(now_ms):
            n += len(gone)
            log.info("lease expired on %s/%s: %s", vhost, name, ", ".join(gone))
        return n

    # -- background ---------------------------------------------------------------------------
    def ensure_started(self) -> None:
        """Arm the lease-expiry timer on the running loop (idempotent).

        A plain loop timer, not a task, so nothing is left pending when the loop closes.
        """
        if self._timer is None:
            loop = asyncio.get_running_loop()
            self._timer = loop.call_later(EXPIRE_PERIOD_S, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        try:
            self.in_batch(lambda: self.expire(self.clock_ms()))
        except Exception:
            log.exception("lease expiry failed")
        self.ensure_started()

    def stop(self) -> None:
        """Cancel the expiry timer."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    async def durable(self) -> None:
        """Wait for the fsync covering every store write so far (the runtime's group commit).

        Raises:
            StreamError: 500 when the store could not write or sync them.
        """
        until = getattr(self.runtime, "until_durable", None)
        if until is None:
            return
        try:
            await asyncio.wait_for(until(), CONFIRM_TIMEOUT_S)
        except (OSError, TimeoutError) as exc:
            raise StreamError(500, f"the store could not make this durable: {exc}") from None
