"""The MQTT adapter: MQTT 3.1.1 and 5.0 connections on the protocol-neutral core.

`mqtt_handler` is the `HandlerFactory` the server registers for its MQTT listener, `mqtt_tick`
its protocol tick (delayed wills).
"""

from __future__ import annotations

from ringmq.adapters.handler import HandlerContext
from ringmq.adapters.mqtt.handler import MqttHandler
from ringmq.adapters.mqtt.sessions import RETAINED_QUEUE, queue_name, registry_of
from ringmq.adapters.mqtt.wills import mqtt_tick


def mqtt_handler(ctx: HandlerContext) -> MqttHandler:
    """The handler of one accepted MQTT socket."""
    return MqttHandler(ctx)


__all__ = [
    "RETAINED_QUEUE",
    "MqttHandler",
    "mqtt_handler",
    "mqtt_tick",
    "queue_name",
    "registry_of",
]
