"""ringmq.storage."""

from __future__ import annotations
