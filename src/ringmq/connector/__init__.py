"""ringmq.connector."""

from __future__ import annotations
