"""Readers of stream queues (`x-queue-type: stream`) by offset, as Spark's Kafka source reads.

Theory of operation (docs/spark.md has the long form)
-----------------------------------------------------
A stream's offsets are stable and reading removes nothing, so the offsets live in Spark's
checkpoint alone and the broker holds nothing for the job: no reservation, no lease, nothing
to settle. A streaming offset is `{queue: next offset}`; a micro-batch is the range
`[start, end)` of each queue, and replaying a batch (after a driver or broker kill) reads the
same range again, which holds the same messages.

In the driver's runner process `latestOffset(start, limit)` asks the broker each stream's
`next_offset` (one small GET, answered only once the log is durable up to it: an offset a
batch has planned is never reused by a broker that lost its tail in a crash) and returns
`min(next_offset, start + share of the per-trigger limit)`. `initialOffset` resolves
`startingOffsets` (`earliest`, `latest`, an offset, `timestamp:<ms>`) once, for a new query
(Spark calls it twice: the second answer is the first, kept); a restarted query starts from
its checkpoint and never calls it. `commit` does nothing.

Executors read `[lo, hi)` with `GET /api/streams/{vhost}/{queue}/log?lo=..&hi=..&format=stored`
in steps of `_READ_STEP` offsets: the records as the stream's segment files hold them, which
the broker locates by its index and sends without looking at a chunk or a message; the worker
decodes them in bulk into Arrow (`stored`: one step per stored record, the rest on whole
columns), and asks the columns format only for what the broker alone converts (stream-protocol
chunks, other protocols' messages). A broker whose log is in memory answers in the columns
format. The next step is asked for while the current one is built into Arrow
(`source.read_ranges`, the queue source's loop). A range whose start retention has removed
reads from the stream's first offset (what is gone is gone).

`spark.read` of a stream resolves `startingOffsets` and `endingOffsets` (default `earliest` and
`latest`) in the planner and reads the range the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from ringmq.connector.spark.options import OptionError, Options
from ringmq.connector.spark.source import (
    Ask,
    RangePartition,
    RunnerState,
    client_of,
    read_ranges,
    split,
)

if TYPE_CHECKING:
    import pyarrow as pa

    from ringmq.connector.client import StreamClient


def is_stream(o: Options) -> bool:
    """Whether `o`'s queues are streams: the `stream` option, else each queue's type as the
    broker tells it (all of them alike, or an OptionError)."""
    if o.stream is not None:
        return o.stream
    with client_of(o) as c:
        kinds = {q: c.info(q).get("type") == "stream" for q in o.require_queues()}
    if len(set(kinds.values())) > 1:
        raise OptionError(f"queues mix stream and other queue types: {kinds}; read them apart")
    return next(iter(kinds.values()))


def resolve(c: StreamClient, queue: str, spec: str) -> int:
    """The offset `spec` names on `queue` now: `earliest` the first offset kept, `latest` the
    next one to be written, a number itself, `timestamp:<ms>` the first chunk at or after it."""
    if spec.startswith("timestamp:"):
        return int(c.stream_bounds(queue, int(spec[len("timestamp:") :]))["offset_at"])
    if spec.isdigit():
        return int(spec)
    b = c.stream_bounds(queue)
    if b.get("type") != "stream":
        raise OptionError(f"queue {queue!r} is not a stream queue")
    return int(b["first_offset"] if spec == "earliest" else b["next_offset"])


OffsetRange = RangePartition
"""Offsets `[lo, hi)` of stream `queue` (the queue source's partition: one class for both)."""


def _partitions(o: Options, ranges: dict[str, tuple[int, int]]) -> list[RangePartition]:
    out = []
    for q, (lo, hi) in ranges.items():
        for a, b in split(lo, hi, o.partitions_per_range, o.min_messages_per_partition):
            out.append(RangePartition(o, q, a, b))
    return out


def _batches(
    queue: str, answer: tuple[str, bytes], lo: int, hi: int, ask: Ask
) -> Iterator[pa.RecordBatch]:
    # One step's answer: the records as stored, decoded here (what they hold that only the
    # broker converts, in the columns format), or the columns of a log with no stored form.
    from ringmq.connector.client import STORED_MEDIA_TYPE
    from ringmq.connector.spark import stored
    from ringmq.connector.spark.rows import columns_to_batch

    media, data = answer
    if media != STORED_MEDIA_TYPE:
        yield columns_to_batch(queue, data)
        return
    for piece in stored.decode(data, lo, hi):
        if isinstance(piece, stored.Run):
            yield stored.to_batch(queue, data, piece)
        else:
            yield columns_to_batch(queue, ask(_log_columns(queue, *piece)))


def _log_columns(queue: str, lo: int, hi: int) -> Callable[[StreamClient], bytes]:
    return lambda c: c.read_log_columns(queue, lo, hi)


def _read(partition: InputPartition) -> Iterator[pa.RecordBatch]:
    assert isinstance(partition, RangePartition)
    q = partition.queue
    yield from read_ranges(
        partition.options,
        partition.lo,
        partition.hi,
        lambda c, a, b: c.read_log_stored(q, a, b),
        lambda answer, a, b, ask: _batches(q, answer, a, b, ask),
    )


class StreamOffsetReader(RunnerState, DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches over stream offsets kept in Spark's checkpoint (module docstring); the
    runner's state (client, position, target) is the queue source's (`RunnerState`)."""

    def __init__(self, options: Options) -> None:
        super().__init__(options)
        self._initial: dict[str, int] | None = None

    def initialOffset(self) -> dict[str, int]:  # noqa: N802 - Spark's API name
        """Where a new query starts (`startingOffsets`), resolved once per runner: Spark asks
        for it again when it plans the first batch, and `latest` or a timestamp must name the
        same offsets both times (and a broker request is saved). A restart starts at its
        checkpoint."""
        if self._initial is None:
            o = self.options
            self._initial = {q: resolve(self._c(), q, o.starting_offsets) for q in self.queues}
        return dict(self._initial)

    def getDefaultReadLimit(self) -> ReadLimit:  # noqa: N802 - Spark's API name
        n = self.options.max_offsets_per_trigger
        return ReadAllAvailable() if n is None else ReadMaxRows(n)

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802 - Spark's API name
        """Fix the stop offsets: each stream's end right now."""
        self._target = {q: self._next(q) for q in self.queues}

    def _next(self, q: str) -> int:
        b = self._c().stream_bounds(q)
        if b.get("type") != "stream":
            raise OptionError(f"queue {q!r} is not a stream queue")
        return int(b["next_offset"])

    def latestOffset(  # noqa: N802 - Spark's API name
        self, start: dict[str, int] | None = None, limit: ReadLimit | None = None
    ) -> dict[str, int]:
        """Each stream's end now (or the AvailableNow target), capped by the limit: the
        limit is shared out evenly, what one stream leaves goes to the next."""
        if start is None:  # Spark 4.0/4.1: no admission control, we track the position
            start = self._position if self._position is not None else self.initialOffset()
        budget: int | None = None
        if isinstance(limit, ReadMaxRows):
            budget = int(limit.max_rows)
        elif limit is not None and not isinstance(limit, ReadAllAvailable):
            budget = self.options.max_offsets_per_trigger  # files, bytes: the option's limit
        end: dict[str, int] = {}
        for i, q in enumerate(self.queues):
            s = int(start[q]) if q in start else self.initialOffset()[q]
            top = self._target[q] if self._target is not None else self._next(q)
            self._latest[q] = top
            e = max(s, top)  # a start past the end (an offset option) waits for the log
            if budget is not None:
                e = min(e, s + -(-budget // (len(self.queues) - i)))
                budget -= e - s
            end[q] = e
        self._position = end
        return end

    def reportLatestOffset(self) -> dict[str, int]:  # noqa: N802 - Spark's API name
        """For progress: each stream's end as last seen."""
        return dict(self._latest)

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[RangePartition]:
        ranges = {q: (int(start.get(q, end[q])), int(end[q])) for q in self.queues if q in end}
        return _partitions(self.options, ranges)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Executor side: the range's messages as Arrow batches (nothing reserved)."""
        return _read(partition)

    def commit(self, end: dict[str, int]) -> None:
        """Nothing to do: the offsets are in the checkpoint, the broker keeps no state."""


class StreamRangeReader(DataSourceReader):
    """`spark.read` of streams: `[startingOffsets, endingOffsets)` of each."""

    def __init__(self, options: Options) -> None:
        self.options = options
        self.queues = options.require_queues()

    def partitions(self) -> list[RangePartition]:
        o = self.options
        with client_of(o) as c:
            ranges = {
                q: (resolve(c, q, o.starting_offsets), resolve(c, q, o.ending_offsets))
                for q in self.queues
            }
        return _partitions(o, ranges) or [RangePartition(o, self.queues[0], 0, 0)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(partition)
