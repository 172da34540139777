"""The AMQP 1.0 adapter: AMQP 1.0 links as core calls, core effects as AMQP 1.0 frames.

Importing it registers the AMQP 1.0 message form and its conversions to and from AMQP 0-9-1
with the core (`message.AMQP10_FORM`).
"""

from __future__ import annotations

from ringmq.adapters.amqp10.message import (
    AMQP10_FORM,
    FORM_AMQP10,
    address_of,
    build,
    payload_for_amqp10,
)

__all__ = ["AMQP10_FORM", "FORM_AMQP10", "address_of", "build", "payload_for_amqp10"]
