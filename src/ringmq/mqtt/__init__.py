"""MQTT 3.1.1 and 5.0, sans-IO: the packet codec and the connection machine."""

from __future__ import annotations

from ringmq.mqtt.codec import PacketReader, decode, encode
from ringmq.mqtt.connection import Event, MqttConnection, Stage, State, Violation
from ringmq.mqtt.packets import V5, V31, V311
from ringmq.mqtt.properties import Properties
from ringmq.mqtt.reasons import MQTTError, Reason

__all__ = [
    "V5",
    "V31",
    "V311",
    "Event",
    "MQTTError",
    "MqttConnection",
    "PacketReader",
    "Properties",
    "Reason",
    "Stage",
    "State",
    "Violation",
    "decode",
    "encode",
]
