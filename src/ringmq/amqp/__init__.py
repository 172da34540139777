"""ringmq.amqp."""

from __future__ import annotations
