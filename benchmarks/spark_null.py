"""A do-nothing Python data source (`nullsource`): the floor of Spark's Python Data Source API.

It has ringmq's read schema, reads prebuilt Arrow batches (no I/O, no broker) in two
partitions, and its writer counts the Arrow batches it is given and drops them (each task first
undoes a heap another source froze in its worker: `_as_alone`). The time Spark
takes to run it is what any PySpark data source pays (planner and runner Python workers,
pickling, Arrow transfer between the JVM and Python workers) before it does any work of its
own. `spark_bench.py --paths floor` times it next to the ringmq paths and their Parquet
ceilings. Options: `n` (rows) and `size` (body bytes).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow

from ringmq.connector.spark.rows import READ_SCHEMA

_STEP = 50_000  # rows per Arrow batch, as the ringmq reader yields them


def null_batch(n: int, size: int) -> Any:
    """`n` rows of ringmq's read schema with zeroed bodies of `size` bytes."""
    import numpy as np
    import pyarrow as pa

    from ringmq.connector.spark.rows import arrow_schema

    offsets = (np.arange(n + 1, dtype=np.int32) * size).tobytes()
    body = pa.Array.from_buffers(
        pa.binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(bytes(n * size))]
    )
    empty = pa.MapArray.from_arrays(
        pa.repeat(pa.scalar(0, pa.int32()), n + 1),
        pa.array([], type=pa.string()),
        pa.array([], type=pa.string()),
    ).cast(pa.map_(pa.string(), pa.string()))
    seqs = pa.array(np.arange(n, dtype=np.int64))
    columns = [
        pa.repeat(pa.scalar("q", pa.string()), n),
        seqs,
        seqs,
        body,
        pa.repeat(pa.scalar("q", pa.string()), n),
        pa.repeat(pa.scalar("", pa.string()), n),
        empty,
        empty,
        pa.nulls(n, pa.string()),
        pa.repeat(pa.scalar(False), n),
        pa.repeat(pa.scalar(0, pa.int64()), n).cast(pa.timestamp("us", tz="UTC")),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=arrow_schema())


class _Rows(InputPartition):
    def __init__(self, n: int, size: int) -> None:
        super().__init__((n, size))
        self.n = n
        self.size = size


def _halves(n: int, size: int) -> list[_Rows]:
    return [_Rows(n // 2, size), _Rows(n - n // 2, size)] if n else []


def _as_alone() -> None:
    """Undo a frozen heap left in this worker process by another data source's task.

    PySpark reuses Python workers across data sources and runs a full `gc.collect()` after
    every task. ringmq's tasks freeze the worker's long-lived heap after their first task
    (`ringmq/connector/spark/worker.py`), and this source's tasks run in the same worker
    processes; without this they would be measured with ringmq's freeze instead of as a
    do-nothing source pays on its own. With `RINGMQ_FLOOR_FROZEN=1` this source freezes its
    heap too (the floor of a source that does what ringmq does)."""
    import gc
    import os

    if os.environ.get("RINGMQ_FLOOR_FROZEN") == "1":
        if not gc.get_freeze_count():
            gc.collect()
            gc.freeze()
    else:
        gc.unfreeze()


def _read(p: InputPartition) -> Iterator[Any]:
    assert isinstance(p, _Rows)
    _as_alone()
    for a in range(0, p.n, _STEP):
        yield null_batch(min(_STEP, p.n - a), p.size)


class _Reader(DataSourceReader):
    def __init__(self, n: int, size: int) -> None:
        self.n = n
        self.size = size

    def partitions(self) -> list[_Rows]:
        return _halves(self.n, self.size)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return _read(partition)


class _StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, n: int, size: int) -> None:
        self.n = n
        self.size = size

    def initialOffset(self) -> dict[str, int]:  # noqa: N802 - Spark's API name
        return {"p": 0}

    def getDefaultReadLimit(self) -> ReadLimit:  # noqa: N802 - Spark's API name
        return ReadMaxRows(self.n)

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802 - Spark's API name
        pass

    def latestOffset(  # noqa: N802 - Spark's API name
        self, start: dict[str, int] | None = None, limit: ReadLimit | None = None
    ) -> dict[str, int]:
        return {"p": self.n}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[_Rows]:
        return _halves(end["p"] - start["p"], self.size)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return _read(partition)

    def commit(self, end: dict[str, int]) -> None:
        pass


class _Writer(DataSourceArrowWriter):
    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        _as_alone()
        for _ in iterator:
            pass
        return WriterCommitMessage()


class NullSource(DataSource):
    """Format `nullsource` (register with `spark.dataSource.register(NullSource)`)."""

    @classmethod
    def name(cls) -> str:
        return "nullsource"

    def schema(self) -> str:
        return READ_SCHEMA

    def _shape(self) -> tuple[int, int]:
        return int(self.options.get("n", 0)), int(self.options.get("size", 0))

    def reader(self, schema: Any) -> _Reader:
        return _Reader(*self._shape())

    def streamReader(self, schema: Any) -> _StreamReader:  # noqa: N802 - Spark's API name
        return _StreamReader(*self._shape())

    def writer(self, schema: Any, overwrite: bool) -> _Writer:
        return _Writer()
