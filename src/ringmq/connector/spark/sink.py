"""Writers: `df.write.format("ringmq")` and `df.writeStream.format("ringmq")`.

Each executor task publishes its rows over one AMQP connection in confirm mode and returns only
after the broker confirmed every message, so a task that succeeded has its rows in the broker.
Every message gets a deterministic `message_id` (the row's `message_id` column when present,
else one derived from the query id, batch id, partition id and row index for streams, or from
the row's content and place for batch writes), so a replayed batch (same batch id after a
restart) or a retried task publishes the same ids and a de-duplicating broker scope drops the
copies. `commit`/`abort` run in another process on a fresh writer: they only log.

With `publishVia=http` (the default when `httpUrl` is given) tasks post Arrow batches to the
bulk publish endpoint instead (`bulk.py`): the broker routes, de-duplicates and confirms them
exactly as AMQP publishes, without the per-row Python and AMQP framing.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamWriter,
    WriterCommitMessage,
)

try:  # Spark 4.1+: Arrow batches for streaming writes too
    from pyspark.sql.datasource import DataSourceStreamArrowWriter as _StreamBase
except ImportError:  # pragma: no cover - Spark 4.0
    _StreamBase = DataSourceStreamWriter  # type: ignore[misc,assignment]

from ringmq.connector.spark.options import Options
from ringmq.connector.spark.worker import freeze_heap
from ringmq.connector.spark.writerows import digest, row_properties, text

log = logging.getLogger(__name__)

FRAME_ROWS = 2048
"""Rows framed at a time by the AMQP writer (`arrow_frames`)."""


@dataclass
class PublishedMessage(WriterCommitMessage):
    """What one task published (travels to the driver's commit)."""

    partition: int
    count: int
    first_id: str | None
    last_id: str | None


def _count(messages: list[WriterCommitMessage | None]) -> int:
    return sum(m.count for m in messages if isinstance(m, PublishedMessage))


def _body(v: Any) -> bytes:
    if v is None:
        return b""
    if isinstance(v, bytes | bytearray | memoryview):
        return bytes(v)
    return str(v).encode()


def _id_for(prefix: str, partition: int, index: int, rk: str, body: bytes, content: bool) -> str:
    if not content:
        return f"{prefix}:{partition}:{index}"
    return f"{prefix}:{partition}:{index}:{digest(rk, body)}"


def arrow_rows(batches: Iterator[Any]) -> Iterator[dict[str, Any]]:
    """Rows of Arrow record batches as dicts (map columns arrive as lists of pairs)."""
    for batch in batches:
        yield from batch.to_pylist()


def publish_rows(options: Options, rows: Iterator[Any], *, streaming: bool) -> PublishedMessage:
    """Executor side: publish `rows` (Rows or dicts) with confirms; shared by every writer."""
    from ringmq.connector.publisher import Publisher

    partition, prefix, content = _task_ids(options, streaming=streaming)
    ends: list[str] = []
    with Publisher(options.url, window=options.window) as pub:
        count = pub.publish_many(row_messages(options, rows, partition, prefix, content, ends))
    return PublishedMessage(partition, count, ends[0] if ends else None, ends[-1] if ends else None)


def row_messages(
    options: Options,
    rows: Iterator[Any],
    partition: int,
    prefix: str,
    content: bool,
    ends: list[str],
) -> Iterator[tuple[str, str, bytes, bytes]]:
    """(exchange, routing key, properties, body) of every row (a Row or a dict); the first
    and last message ids are kept in `ends`."""
    from ringmq.amqp.properties import encode_properties

    for i, row in enumerate(rows):
        d = row if isinstance(row, dict) else row.asDict()
        body = _body(d.get("body"))
        rk = d.get("routing_key")
        rk = options.routing_key if rk is None else text(rk)
        ex = d.get("exchange")
        ex = options.exchange if ex is None else text(ex)
        mid = d.get("message_id")
        mid = _id_for(prefix, partition, i, rk, body, content) if mid is None else text(mid)
        props = row_properties(mid, d.get("headers"), d.get("properties"), options.persistent)
        if not ends:
            ends.append(mid)
        del ends[1:]
        ends.append(mid)
        yield ex, rk, encode_properties(props), body


def _task_ids(options: Options, *, streaming: bool) -> tuple[int, str, bool]:
    """(partition, message id prefix, whether ids hash the content) of the current task."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    partition = ctx.partitionId() if ctx is not None else 0
    if options.message_id_prefix:
        return partition, options.message_id_prefix, not streaming
    if streaming and ctx is not None:
        query = ctx.getLocalProperty("sql.streaming.queryId") or "query"
        batch = ctx.getLocalProperty("streaming.sql.batchId") or "0"
        return partition, f"{query}:{batch}", False
    return partition, "spark", True


def publish_arrow(options: Options, batches: Iterator[Any], *, streaming: bool) -> PublishedMessage:
    """Executor side: Arrow batches to the broker, by the bulk HTTP path or by AMQP.

    Either way a batch's message ids, properties and bodies are made column by column
    (`bulk.message_columns`), as `publish_rows` would make them row by row."""
    from ringmq.connector.spark.bulk import (
        content_ids,
        publish_batches,
        routing_keys,
        sequential_ids,
    )

    partition, prefix, content = _task_ids(options, streaming=streaming)
    ids = (
        content_ids(prefix, partition, routing_keys(options))
        if content
        else sequential_ids(prefix, partition)
    )
    if options.publish_via == "http":
        count, first, last = publish_batches(options, batches, ids)
        return PublishedMessage(partition, count, first, last)
    from ringmq.connector.publisher import Publisher

    ends: list[str] = []
    with Publisher(options.url, window=options.window) as pub:
        count = pub.publish_framed(arrow_frames(options, batches, ids, ends, pub.frame_max))
    return PublishedMessage(partition, count, ends[0] if ends else None, ends[-1] if ends else None)


def arrow_frames(
    options: Options, batches: Iterator[Any], ids: Any, ends: list[str], frame_max: int
) -> Iterator[tuple[memoryview | bytes, list[int]]]:
    """The AMQP publishes of every row of `batches`, framed `FRAME_ROWS` rows at a time
    (`amqpframes.publish_frames`), the ids numbered across them; the first and last message
    ids are kept in `ends`."""
    from ringmq.connector.spark.bulk import routing_keys

    keys = routing_keys(options)
    methods: dict[tuple[str, str], bytes] = {}
    start = 0
    for whole in batches:
        # In slices: the first slice's frames are on their way (publish_framed's sender
        # thread) while the next slice's ids and frames are made.
        slices = (whole.slice(a, FRAME_ROWS) for a in range(0, whole.num_rows, FRAME_ROWS))
        for batch in slices:
            yield from _batch_frames(options, batch, ids, start, ends, frame_max, keys, methods)
            start += batch.num_rows


def _batch_frames(
    options: Options,
    batch: Any,
    ids: Any,
    start: int,
    ends: list[str],
    frame_max: int,
    keys: Any,
    methods: dict[tuple[str, str], bytes],
) -> Iterator[tuple[memoryview | bytes, list[int]]]:
    # `arrow_frames` of one slice, numbered from `start`.
    import pyarrow as pa
    import pyarrow.compute as pc

    from ringmq.connector.spark.amqpframes import publish_frames
    from ringmq.connector.spark.bulk import message_columns

    n = batch.num_rows  # at least one: `arrow_frames` slices only rows that are there
    mids, props, bodies = message_columns(batch, options, ids, start)
    if "exchange" in batch.schema.names:
        col = batch.column("exchange").cast(pa.string())
        exchanges: list[str] = pc.fill_null(col, options.exchange).to_pylist()
    else:
        exchanges = [options.exchange] * n
    if not ends:
        ends.append(mids[0].as_py())
    yield from publish_frames(exchanges, keys(batch), props, bodies, frame_max, methods)
    del ends[1:]
    ends.append(mids[n - 1].as_py())


class RingMQBatchWriter(DataSourceArrowWriter):
    """`df.write.format("ringmq")`: publish every row, confirmed, before the task succeeds.

    Rows arrive as Arrow record batches (no per-row pickling between the JVM and Python).
    """

    def __init__(self, options: Options) -> None:
        self.options = options

    def write(self, iterator: Iterator[Any]) -> PublishedMessage:
        try:
            return publish_arrow(self.options, iterator, streaming=False)
        finally:
            freeze_heap()

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        n = _count(messages)
        log.info("ringmq batch write committed: %d messages", n)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        n = _count(messages)
        log.warning("ringmq batch write aborted after %d confirmed messages", n)


class RingMQStreamWriter(_StreamBase):
    """`df.writeStream.format("ringmq")`: as the batch writer, ids keyed by query and batch.

    Arrow record batches on Spark 4.1+, Rows on 4.0.
    """

    def __init__(self, options: Options) -> None:
        self.options = options

    def write(self, iterator: Iterator[Any]) -> PublishedMessage:
        try:
            if _StreamBase is DataSourceStreamWriter:  # Spark 4.0: Rows
                return publish_rows(self.options, iterator, streaming=True)
            return publish_arrow(self.options, iterator, streaming=True)
        finally:
            freeze_heap()

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        n = _count(messages)
        log.info("ringmq stream batch %d committed: %d messages", batchId, n)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        # Published messages cannot be unpublished; a replay re-sends the same message ids.
        n = _count(messages)
        log.warning("ringmq stream batch %d aborted after %d confirmed messages", batchId, n)
