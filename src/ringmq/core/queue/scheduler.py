"""Scheduled delivery: messages held back until their due time (Artemis' scheduled-delivery
handler, RabbitMQ's delayed-message plugin headers).
"""

from __future__ import annotations

from typing import Any

__all__ = ["schedule_due"]


def schedule_due(headers: dict[str, Any], now_ms: int) -> int | None:
    """The due time (epoch ms) `headers` ask for, or None.

    The absolute Artemis time wins over the relative RabbitMQ delay; malformed values are
    ignored."""
    absolute = headers.get("_AMQ_SCHED_DELIVERY")
    if type(absolute) is int or type(absolute) is float:
        return int(absolute)
    delay = headers.get("x-delay")
    if type(delay) is int or type(delay) is float:
        return now_ms + int(delay)
    return None
