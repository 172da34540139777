"""PySpark data source `ringmq` (install the `spark` extra).

`spark.readStream.format("ringmq")`, `spark.read.format("ringmq")`, `df.write.format("ringmq")`
and `df.writeStream.format("ringmq")`; options and guarantees in docs/spark.md. Spark 4 finds
the format without registration code through the top-level module `pyspark_ringmq`
(`DefaultSource`); `spark.dataSource.register(RingMQDataSource)` also works.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from pyspark.sql.datasource import DataSource

from ringmq.connector.spark.options import OptionError, Options
from ringmq.connector.spark.rows import READ_SCHEMA

__all__ = ["OptionError", "Options", "RingMQDataSource", "prepare_environment", "session"]


class RingMQDataSource(DataSource):
    """The `ringmq` format. `__init__` must stay cheap: Spark builds it in many processes."""

    @classmethod
    def name(cls) -> str:
        return "ringmq"

    def schema(self) -> str:
        return READ_SCHEMA

    def _options(self) -> Options:
        return Options.parse(dict(self.options))

    def reader(self, schema: Any) -> Any:
        from ringmq.connector.spark.source import RingMQBatchReader
        from ringmq.connector.spark.streamsource import StreamRangeReader, is_stream

        o = self._options()
        return StreamRangeReader(o) if is_stream(o) else RingMQBatchReader(o)

    def streamReader(self, schema: Any) -> Any:  # noqa: N802 - Spark's API name
        # Stream queues are read by offset (the checkpoint holds them); destructive queues
        # through reservations. The `stream` option answers without asking the broker.
        from ringmq.connector.spark.source import RingMQStreamReader
        from ringmq.connector.spark.streamsource import StreamOffsetReader, is_stream

        o = self._options()
        return StreamOffsetReader(o) if is_stream(o) else RingMQStreamReader(o)

    def writer(self, schema: Any, overwrite: bool) -> Any:
        from ringmq.connector.spark.sink import RingMQBatchWriter

        _check_write_schema(schema)
        return RingMQBatchWriter(self._options())

    def streamWriter(self, schema: Any, overwrite: bool) -> Any:  # noqa: N802 - Spark's API name
        from ringmq.connector.spark.sink import RingMQStreamWriter

        _check_write_schema(schema)
        return RingMQStreamWriter(self._options())


def _check_write_schema(schema: Any) -> None:
    names = set(getattr(schema, "names", []) or [])
    if "body" not in names:
        raise OptionError(
            "writing to ringmq needs a `body` column (binary or string); optional columns: "
            "routing_key, exchange, headers (map<string,string>), message_id, properties"
        )


def prepare_environment() -> None:
    """Avoid the two classic PySpark pitfalls before a session starts.

    * Workers must run this interpreter (which has ringmq and pyarrow): set `PYSPARK_PYTHON`
      and `PYSPARK_DRIVER_PYTHON` to `sys.executable` unless the user set them.
    * pyarrow is required by Python data sources but not installed by `pip install pyspark`:
      fail early with the fix instead of deep inside a worker.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    try:
        import pyarrow  # noqa: F401
    except ImportError as exc:  # pragma: no cover - depends on the installation
        raise ImportError(
            "the ringmq Spark connector needs pyarrow: pip install 'ringmq[spark]'"
        ) from exc


def session(app_name: str = "ringmq", master: str = "local[2]", **conf: str) -> Any:
    """A SparkSession ready for the connector (environment prepared, format registered).

    Registration is explicit here too, so the format works even where the `pyspark_ringmq`
    module is not on the workers' path. A `local` master, or a standalone master on
    127.0.0.1/localhost, binds the driver to 127.0.0.1 (Spark otherwise picks the first
    non-loopback interface when the hostname resolves to loopback).
    """
    prepare_environment()
    from pyspark.sql import SparkSession

    b = SparkSession.builder.appName(app_name).master(master)
    defaults = {
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.sql.session.timeZone": "UTC",
    }
    if master.startswith(("local", "spark://127.0.0.1:", "spark://localhost:")):
        # A loopback cluster (tests, one machine) must reach the driver on loopback too.
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        defaults["spark.driver.host"] = "127.0.0.1"
        defaults["spark.driver.bindAddress"] = "127.0.0.1"
    for k, v in {**defaults, **conf}.items():
        b = b.config(k, v)
    spark = b.getOrCreate()
    spark.dataSource.register(RingMQDataSource)
    return spark
