"""The source's partitions (no JVM, no broker): a seq range split into parts, partitions and
readers that survive pickling."""

from __future__ import annotations

import pickle

import pytest

pytest.importorskip("pyspark")
pa = pytest.importorskip("pyarrow")

from ringmq.connector.spark import Options, RingMQDataSource  # noqa: E402
from ringmq.connector.spark.source import RangePartition, RingMQStreamReader, split  # noqa: E402


@pytest.mark.parametrize(
    ("lo", "hi", "parts", "min_size", "want"),
    [
        (0, 0, 2, 1, []),
        (0, 10, 2, 1, [(0, 5), (5, 10)]),
        (0, 10, 3, 1, [(0, 4), (4, 7), (7, 10)]),
        (5, 10, 4, 3, [(5, 10)]),
        (0, 7, 8, 1, [(i, i + 1) for i in range(7)]),
    ],
)
def test_split(lo: int, hi: int, parts: int, min_size: int, want: list[tuple[int, int]]) -> None:
    got = split(lo, hi, parts, min_size)
    assert got == want
    assert sum(b - a for a, b in got) == max(0, hi - lo)


def test_partitions_and_reader_pickle() -> None:
    o = Options.parse({"queue": "q", "consumerName": "c"})
    p = pickle.loads(pickle.dumps(RangePartition(o, "q", 3, 9)))
    assert (p.queue, p.lo, p.hi, p.options) == ("q", 3, 9, o)
    reader = pickle.loads(pickle.dumps(RingMQStreamReader(o)))
    assert reader.consumer == "c"
    assert RingMQDataSource.name() == "ringmq"


def test_the_source_runner_does_not_load_the_amqp_codec() -> None:
    # Spark starts a Python process per streaming query for the source's driver side; what
    # it imports of ringmq (the data source, options, the HTTP client, the readers) must not
    # build the AMQP method tables (`ringmq.amqp.spec`: about 70 ms of that start).
    import subprocess
    import sys

    code = (
        "import sys, ringmq.connector.spark, ringmq.connector.spark.streamsource, "
        "ringmq.connector.spark.source, ringmq.connector.spark.stored; "
        "print(sorted(m for m in sys.modules if m.startswith('ringmq.amqp.')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert "ringmq.amqp.spec" not in out.stdout
    assert "ringmq.amqp.properties" in out.stdout  # still the value codec the rows use
