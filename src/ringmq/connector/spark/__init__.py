"""PySpark data source for ringmq (install the `spark` extra)."""

from __future__ import annotations
