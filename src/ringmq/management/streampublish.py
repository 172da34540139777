"""Bulk publish for the streams API (`POST /api/streams/{vhost}/{exchange}/publish`).

Theory of operation
-------------------
A bulk publish (body `application/x-ringmq-publish`, see `streamwire.decode_publish`) goes
through the broker exactly like an AMQP publish: `BulkPublish` opens, through the management
facade (`admin.CoreAdmin.open_publisher`), an in-process *virtual connection* as the request's
user (`Broker.connection_opened`, so vhost access is checked), a channel in confirm mode, and
hands each slice to `CoreAdmin.publish_slice` (`Broker.publish_batch`), which does for every
message what a `basic.publish` with its raw content does (routing, write permission on the
exchange, `message_id` de-duplication, limits, nacks and persistence are the AMQP ones) with
one confirm step per slice. Publishes run in slices of `PUBLISH_SLICE` messages, each one
server batch (effects for real connections are applied; the group commit starts at the batch
end), yielding to the loop between slices.

The answer waits until the channel holds no confirm back, i.e. every persistent message routed
to a durable queue is covered by an fsync: confirm semantics. Nacks (a queue refusing the
message) are counted in the answer; a block (memory alarm, Artemis BLOCK) stops the request
with 503 and the count already published, so the client resumes after it. A failed write or
fsync nacks the held confirms and raises the `disk_write` alarm: the request fails with 500.
"""

from __future__ import annotations

import asyncio
import struct
from typing import Any, Final

from ringmq.amqp.reply_codes import AMQPError
from ringmq.core.effects import Block, Confirm, Effect
from ringmq.core.errors import BrokerError
from ringmq.management.admin import CoreAdmin
from ringmq.management.streamreads import CONFIRM_TIMEOUT_S, StreamReads, refused
from ringmq.management.streamwire import ERROR_NAMES, StreamError

PUBLISH_SLICE: Final = 2000
"""Messages handed to the broker per server batch by a bulk publish."""


class PublishResult:
    """What a bulk publish did so far (indices are request positions)."""

    __slots__ = ("blocked", "nacked", "published")

    def __init__(self) -> None:
        self.published = 0
        self.nacked: list[int] = []
        self.blocked: str | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "published": self.published,
            "nacked": len(self.nacked),
            "first_nacked": min(self.nacked) if self.nacked else None,
        }


class BulkPublish:
    """Bulk publishes on virtual connections (see the module docstring)."""

    def __init__(self, reads: StreamReads) -> None:
        self.admin: CoreAdmin = reads.admin
        self.runtime = reads.runtime
        self.clock_ms = reads.clock_ms
        self.in_batch = reads.in_batch

    def open_publisher(self, user: str, vhost: str) -> int:
        """Open a virtual connection of `user` on `vhost` with channel 1 in confirm mode."""
        if not self.admin.has_vhost(vhost):
            raise StreamError(404, f"no vhost {vhost!r}")
        try:
            return self.admin.open_publisher(user, vhost, now_ms=self.clock_ms())
        except BrokerError as exc:
            raise StreamError(403, exc.explanation) from None

    def close_publisher(self, conn_id: int) -> None:
        """Forget a virtual connection (effects for other connections are applied)."""
        self._apply(conn_id, self.admin.close_publisher(conn_id, now_ms=self.clock_ms()))

    def publish_slice(
        self,
        conn_id: int,
        exchange: str,
        messages: list[tuple[str, bytes, bytes]],
        start: int,
        stop: int,
        result: PublishResult,
    ) -> None:
        """Publish `messages[start:stop]` on the virtual connection (one server batch).

        Raises:
            StreamError: the broker refused a publish with a channel or connection error
                (unknown exchange 404, permission 403, others 400); `result.published`
                counts what went through before it.
        """
        alarms = self.admin.alarms()
        if alarms:
            # A resource alarm blocks publishers: take nothing until it clears (AMQP would
            # let one publish through and then block the connection).
            result.blocked = "; ".join(sorted(alarms.values()))
            return
        try:
            done = self.admin.publish_slice(
                conn_id, exchange, messages, start, stop, now_ms=self.clock_ms()
            )
        except (ValueError, IndexError, struct.error):
            raise StreamError(400, f"messages {start}-{stop - 1}: malformed properties") from None
        result.published += done.published
        effects = done.effects
        if effects:
            e = effects[0]
            if not (
                len(effects) == 1 and e.conn_id == conn_id and type(e) is Confirm and e.ok
            ):  # one ack for the whole slice is the common answer
                self._apply(conn_id, effects, result)
        if done.blocked and result.blocked is None:
            result.blocked = "blocked"
        if isinstance(done.error, AMQPError | BrokerError):
            raise refused(done.error)

    def _apply(
        self, conn_id: int, effects: list[Effect], result: PublishResult | None = None
    ) -> None:
        mine = [e for e in effects if e.conn_id == conn_id]
        if result is not None:
            for e in mine:
                if isinstance(e, Confirm) and not e.ok:
                    result.nacked.append(e.seq - 1)
                elif isinstance(e, Block):
                    result.blocked = e.reason
        others = [e for e in effects if e.conn_id != conn_id] if mine else effects
        if others:
            self.runtime.apply_effects(others)

    def _store_failed(self) -> bool:
        return "disk_write" in self.admin.alarms()

    async def run(
        self, user: str, vhost: str, exchange: str, messages: list[tuple[str, bytes, bytes]]
    ) -> tuple[int, dict[str, Any]]:
        """Publish `messages` as `user`; the HTTP status and JSON answer.

        Raises:
            StreamError: before anything was published (no vhost 404, no access 403), or 503.
        """
        result = PublishResult()
        conn_id = self.in_batch(lambda: self.open_publisher(user, vhost))
        try:
            for a in range(0, len(messages), PUBLISH_SLICE):
                b = min(len(messages), a + PUBLISH_SLICE)

                def one_slice(a: int = a, b: int = b) -> None:
                    self.publish_slice(conn_id, exchange, messages, a, b, result)

                self.in_batch(one_slice)
                if result.blocked is not None:
                    break
                await asyncio.sleep(0)  # let other connections and the fsync completion run
            # Confirm semantics: persistent messages on durable queues are fsynced first. A
            # failed write or fsync nacks the held confirms (to this virtual connection, so we
            # do not see them) and raises the disk_write alarm: fail the request then, as a
            # nack fails an AMQP publisher (conservative: the failed group may be another's).
            loop = asyncio.get_running_loop()
            deadline = loop.time() + CONFIRM_TIMEOUT_S
            held = self.admin.confirms_held(conn_id) > 0
            store_failed = False
            while self.admin.confirms_held(conn_id):
                store_failed = store_failed or self._store_failed()
                if loop.time() > deadline:
                    raise StreamError(500, "timed out waiting for the store to sync")
                await asyncio.sleep(0.001)
            if held:
                for _ in range(3):
                    await asyncio.sleep(0)  # the alarm follows the nacks by a loop turn
                store_failed = store_failed or self._store_failed()
            if store_failed:
                raise StreamError(500, "the store could not make the messages durable")
        except StreamError as exc:
            if exc.status == 503:
                raise
            error = ERROR_NAMES.get(exc.status, "bad_request")
            return exc.status, {"error": error, "reason": exc.reason, **result.as_json()}
        finally:
            self.in_batch(lambda: self.close_publisher(conn_id))
        if result.blocked is not None:
            return 503, {"error": "blocked", "reason": result.blocked, **result.as_json()}
        return 200, result.as_json()
