"""ringmq: an AMQP 0-9-1 broker with ring, limit, size-policy and last-value queue semantics."""

from __future__ import annotations

__version__ = "0.1.0"
__all__ = ["__version__"]
