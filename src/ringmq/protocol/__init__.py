"""ringmq.protocol."""

from __future__ import annotations
