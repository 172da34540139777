"""Spark 4 auto-discovery hook: top-level `pyspark_*` modules exporting `DefaultSource`.

Spark registers every such module's `DefaultSource` on the first data source lookup, so
`spark.read.format("ringmq")` works without registration code once ringmq is installed.
"""

from __future__ import annotations

from ringmq.connector.spark import RingMQDataSource as DefaultSource

__all__ = ["DefaultSource"]
