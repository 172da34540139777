"""ringmq.server."""

from __future__ import annotations
