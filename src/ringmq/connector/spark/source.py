"""Readers: `spark.readStream.format("ringmq")` and `spark.read.format("ringmq")`.

Theory of operation (docs/spark.md has the long form)
-----------------------------------------------------
Streaming. Offsets are `{queue: position}` dicts, positions being the dense positions of the
broker-side reservation named by `consumerName` (`/api/streams/.../reserve`). In the driver's
long-lived runner process, `latestOffset(start, limit)` reserves up to the admission limit
beyond `start` and returns the new ends (it also settles below `start`: Spark only asks for
`latestOffset(start=X)` once the batch ending at X is committed; `commit(end)` remains the
authoritative settle, and both are idempotent). `partitions(start, end)` re-reserves the range
(a no-op while the lease holds it; after a lease expiry it refills the same positions from the
head of the queue) and splits it into `RangePartition`s. `read(partition)` runs on executors,
opens its own HTTP connection, reads the reserved range (non-destructive, so retries and
replays see identical data) in the columnar wire format and yields Arrow batches built on the
response's buffers (`rows.columns_to_batch`: no Python object per message except for
properties other than a lone `message_id`); a task asks for its next range while it builds and
hands over the current one (one request thread per task owns its connection, so the broker's
serving overlaps Spark's consuming). Nothing here keeps state that matters
across processes: the runner is killed without `stop()` on every restart.

Batch. A non-destructive browse by queue seq: the driver splits `[head_seq, tail_seq]` into
seq ranges, each executor pages through its range with `browse(after=...)`, asking for the
next page as soon as a page's last seq is known (`rows.count_and_last_seq`). Recomputing a
partition reads the same messages while the queue is unchanged.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from ringmq.connector.spark.options import Options, http_with_credentials
from ringmq.connector.spark.worker import freeze_heap

if TYPE_CHECKING:
    import pyarrow as pa

    from ringmq.connector.client import StreamClient

log = logging.getLogger(__name__)
_T = TypeVar("_T")

_UNBOUNDED = 100_000  # most positions reserved per queue and batch with ReadAllAvailable
_RESERVE_CALL = 100_000  # positions per reserve request (the broker's MAX_RESERVE_PER_CALL)
_READ_STEP = 50_000  # positions (or browsed messages) per HTTP request of a task


def _one_thread() -> ThreadPoolExecutor:
    # The reader's request thread: it alone uses the task's HTTP connection.
    return ThreadPoolExecutor(1, thread_name_prefix="ringmq-read")


def client_of(o: Options) -> StreamClient:
    """A client of the streams API for the options' management URL, credentials and vhost."""
    from ringmq.connector.client import StreamClient

    return StreamClient(http_with_credentials(o.http_url, o.user, o.password), o.vhost)


Ask = Callable[[Callable[["StreamClient"], bytes]], bytes]
"""Run a request on the task's request thread (the one that owns its connection)."""


def read_ranges(
    o: Options,
    lo: int,
    hi: int,
    fetch: Callable[[StreamClient, int, int], _T],
    decode: Callable[[_T, int, int, Ask], Iterable[pa.RecordBatch]],
) -> Iterator[pa.RecordBatch]:
    """Executor side: `[lo, hi)` as Arrow batches, in steps of `_READ_STEP`: `fetch(client,
    a, b)` gives a step's answer, `decode(answer, a, b, ask)` its batches (`ask` for a request
    it needs on the way). The next step is under way while a batch is built and consumed (one
    thread owns the task's connection)."""
    ranges = [(a, min(hi, a + _READ_STEP)) for a in range(lo, hi, _READ_STEP)]
    with client_of(o) as c, _one_thread() as pool:

        def ask(request: Callable[[StreamClient], bytes]) -> bytes:
            return pool.submit(request, c).result()

        ahead = [pool.submit(fetch, c, a, b) for a, b in ranges[:1]]
        for i, (a, b) in enumerate(ranges):
            data = ahead.pop().result()
            if i + 1 < len(ranges):
                ahead.append(pool.submit(fetch, c, *ranges[i + 1]))
            for batch in decode(data, a, b, ask):
                if batch.num_rows:
                    yield batch
    freeze_heap()


@dataclass
class RangePartition(InputPartition):
    """Positions `[lo, hi)` of `queue`: of the reservation named by the options' `consumerName`
    (the queue source), or a stream's offsets (the stream source). Picklable."""

    options: Options
    queue: str
    lo: int
    hi: int

    def __init__(self, options: Options, queue: str, lo: int, hi: int) -> None:
        super().__init__((queue, lo, hi))
        self.options = options
        self.queue = queue
        self.lo = lo
        self.hi = hi


@dataclass
class BrowsePartition(InputPartition):
    """Ready messages of `queue` with `after < seq <= last` (picklable)."""

    options: Options
    queue: str
    after: int | None
    last: int

    def __init__(self, options: Options, queue: str, after: int | None, last: int) -> None:
        super().__init__((queue, after, last))
        self.options = options
        self.queue = queue
        self.after = after
        self.last = last


def split(lo: int, hi: int, parts: int, min_size: int) -> list[tuple[int, int]]:
    """Split `[lo, hi)` into at most `parts` contiguous pieces of at least `min_size`."""
    n = hi - lo
    if n <= 0:
        return []
    k = max(1, min(parts, n // max(1, min_size)))
    step, extra = divmod(n, k)
    out = []
    a = lo
    for i in range(k):
        b = a + step + (1 if i < extra else 0)
        out.append((a, b))
        a = b
    return out


class RunnerState:
    """What both streaming readers keep in Spark's runner process: the options and queues,
    a client opened on first use (never pickled to the executors), the position 4.0/4.1's
    `latestOffset()` does not pass, the AvailableNow target and the last ends seen."""

    def __init__(self, options: Options) -> None:
        # Runs in several processes per query start: parse only, never connect here.
        self.options = options
        self.queues = options.require_queues()
        self._client: StreamClient | None = None
        self._position: dict[str, int] | None = None  # for 4.0/4.1's latestOffset()
        self._target: dict[str, int] | None = None  # AvailableNow stop positions or offsets
        self._latest: dict[str, Any] = {}

    def __getstate__(self) -> dict[str, Any]:
        # Spark pickles reader instances to executors: never ship the driver's connection.
        return {**self.__dict__, "_client": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def _c(self) -> StreamClient:
        if self._client is None:
            self._client = client_of(self.options)
        return self._client

    def stop(self) -> None:
        # Best effort only: Spark kills the runner without calling this (docs/spark.md).
        if self._client is not None:
            self._client.close()
            self._client = None


class RingMQStreamReader(RunnerState, DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reader over named reservations (see module docstring)."""

    def __init__(self, options: Options) -> None:
        super().__init__(options)
        self.consumer = options.require_consumer()

    def _offset(self, values: dict[str, int]) -> dict[str, int]:
        # Stable key order (Spark compares serialized offsets in places).
        return {q: int(values[q]) for q in self.queues}

    def initialOffset(self) -> dict[str, int]:  # noqa: N802 - Spark's API name
        """Where a new query starts: the settled mark of an existing reservation, else 0."""
        start: dict[str, int] = {}
        for q in self.queues:
            leases = self._c().info(q).get("leases", [])
            mine = [le for le in leases if le["consumer"] == self.consumer]
            start[q] = int(mine[0]["settled"]) if mine else 0
        return self._offset(start)

    def getDefaultReadLimit(self) -> ReadLimit:  # noqa: N802 - Spark's API name
        return ReadMaxRows(self.options.max_messages_per_batch)

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802 - Spark's API name
        """Fix the stop positions: what is reserved or ready right now."""
        target: dict[str, int] = {}
        for q in self.queues:
            info = self._c().info(q)
            mine = [le for le in info.get("leases", []) if le["consumer"] == self.consumer]
            held_next = int(mine[0]["next"]) if mine else 0
            target[q] = held_next + int(info["ready"])
        self._target = target

    def latestOffset(  # noqa: N802 - Spark's API name
        self, start: dict[str, int] | None = None, limit: ReadLimit | None = None
    ) -> dict[str, int]:
        """Reserve up to the admission limit beyond `start` and return the new ends."""
        if start is None:  # Spark 4.0/4.1: no admission control, we track the position
            start = self._position if self._position is not None else self.initialOffset()
        if isinstance(limit, ReadMaxRows):
            budget = int(limit.max_rows)
        elif limit is None or isinstance(limit, ReadAllAvailable):
            budget = _UNBOUNDED * len(self.queues)
        else:  # other limits (files, bytes, min rows) fall back to the batch size option
            budget = self.options.max_messages_per_batch
        c = self._c()
        end: dict[str, int] = {}
        for q in self.queues:
            s = int(start.get(q, 0))
            # Spark asks latestOffset(start=X) only after the batch ending at X committed.
            c.settle(q, self.consumer, s)
            want = budget
            if self._target is not None:
                want = max(0, min(want, self._target[q] - s))
            r = self._reserve(q, s, want, self.options.max_bytes_per_batch)
            end[q] = int(r["end"])
            budget -= end[q] - s
            self._latest[q] = {
                "position": int(r["next"]),
                "ready": int(r["ready"]),
                "skipped": int(r["skipped"]),
                "leaseExpired": int(r["expired"]),
                "evicted": r.get("evicted", {}),
            }
        self._position = end
        return self._offset(end)

    def _reserve(self, q: str, start: int, want: int, max_bytes: int | None) -> dict[str, Any]:
        """Reserve `[start, start + want)` in calls of at most `_RESERVE_CALL` positions.

        Each call is one short step of the broker's loop; the loop stops at the first call
        that comes back short (the queue ran dry, or `max_bytes` was reached).
        """
        c = self._c()
        lease_ms = self.options.lease_ms
        r = c.reserve(
            q,
            self.consumer,
            start,
            min(want, _RESERVE_CALL),
            lease_ms=lease_ms,
            max_bytes=max_bytes,
        )
        got = int(r["end"]) - start
        while got < want and int(r["end"]) - int(r["start"]) == _RESERVE_CALL and max_bytes is None:
            at = int(r["end"])
            r = c.reserve(q, self.consumer, at, min(want - got, _RESERVE_CALL), lease_ms=lease_ms)
            got = int(r["end"]) - start
        return r

    def reportLatestOffset(self) -> dict[str, Any]:  # noqa: N802 - Spark's API name
        """For progress: per queue the reservation head, ready depth, skipped and evicted."""
        return dict(self._latest)

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[RangePartition]:
        """Re-reserve `[start, end)` (refills after a lease expiry) and split it."""
        o = self.options
        out: list[RangePartition] = []
        for q in self.queues:
            lo, hi = int(start.get(q, 0)), int(end.get(q, 0))
            if hi <= lo:
                continue
            self._reserve(q, lo, hi - lo, None)
            for a, b in split(lo, hi, o.partitions_per_range, o.min_messages_per_partition):
                out.append(RangePartition(o, q, a, b))
        return out

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Executor side: the reserved range as Arrow batches (never acks). The next request
        is under way while a batch is built and consumed (one thread owns the connection)."""
        from ringmq.connector.spark.rows import columns_to_batch

        assert isinstance(partition, RangePartition)
        q = partition.queue
        consumer = partition.options.require_consumer()
        yield from read_ranges(
            partition.options,
            partition.lo,
            partition.hi,
            lambda c, a, b: c.read_columns(q, consumer, a, b),
            lambda data, _a, _b, _ask: (columns_to_batch(q, data),),
        )

    def commit(self, end: dict[str, int]) -> None:
        """The batch ending at `end` is durable in the sink: settle (delete) below it."""
        c = self._c()
        for q in self.queues:
            if q in end:
                c.settle(q, self.consumer, int(end[q]))


class RingMQBatchReader(DataSourceReader):
    """Repeatable, non-destructive browse of the queues (see module docstring)."""

    def __init__(self, options: Options) -> None:
        self.options = options
        self.queues = options.require_queues()

    def partitions(self) -> list[BrowsePartition]:
        o = self.options
        out: list[BrowsePartition] = []
        with client_of(o) as c:
            for q in self.queues:
                info = c.info(q)
                head, tail = info.get("head_seq"), int(info.get("tail_seq") or 0)
                if head is None or tail < int(head):
                    continue
                lo = int(head)
                for a, b in split(
                    lo, tail + 1, o.partitions_per_range, o.min_messages_per_partition
                ):
                    out.append(BrowsePartition(o, q, a - 1 if a > 0 else None, b - 1))
        return out or [BrowsePartition(o, self.queues[0], None, -1)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Executor side: the partition's seqs page by page; the next page is asked for as
        soon as this one's last seq is known, while this one is built and consumed."""
        import pyarrow.compute as pc

        from ringmq.connector.spark.rows import columns_to_batch, count_and_last_seq

        assert isinstance(partition, BrowsePartition)
        if partition.last < 0:
            return
        q = partition.queue
        with client_of(partition.options) as c, _one_thread() as pool:
            ahead = [pool.submit(c.browse_columns, q, partition.after, _READ_STEP)]
            while ahead:
                data = ahead.pop().result()
                n, last_seq = count_and_last_seq(data)
                if n == 0:
                    return
                if n == _READ_STEP and last_seq < partition.last:  # more of this partition
                    ahead.append(pool.submit(c.browse_columns, q, last_seq, _READ_STEP))
                page = columns_to_batch(q, data)
                if last_seq > partition.last:
                    page = page.filter(pc.less_equal(page.column("seq"), partition.last))
                if page.num_rows:
                    yield page
        freeze_heap()
