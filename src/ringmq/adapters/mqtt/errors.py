"""The core's refusals in MQTT 5.0 reason codes (3.1.1 has none: its connection closes)."""

from __future__ import annotations

from typing import Final

from ringmq.core.errors import BrokerError, Condition
from ringmq.mqtt import Reason

REFUSED: Final = {
    "overflow": Reason.QUOTA_EXCEEDED,
    "address-full": Reason.QUOTA_EXCEEDED,
}
"""A negative `Confirm`'s reason as the PUBACK / PUBREC reason code."""

CLOSE: Final = {
    Condition.CONNECTION_FORCED: Reason.ADMINISTRATIVE_ACTION,
    Condition.ACCESS_REFUSED: Reason.NOT_AUTHORIZED,
    Condition.NOT_ALLOWED: Reason.NOT_AUTHORIZED,
}
"""A close the server starts, as the DISCONNECT reason code."""


def reason_of(exc: BrokerError) -> Reason:
    """A refused core call as a 5.0 reason code."""
    match exc.condition:
        case Condition.ACCESS_REFUSED | Condition.NOT_ALLOWED:
            return Reason.NOT_AUTHORIZED
        case Condition.PRECONDITION_FAILED if "message size" in exc.explanation:
            return Reason.PACKET_TOO_LARGE
        case Condition.RESOURCE_LOCKED:
            return Reason.QUOTA_EXCEEDED
        case _:
            return Reason.IMPLEMENTATION_SPECIFIC_ERROR
