"""ringmq.management."""

from __future__ import annotations
