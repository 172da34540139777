"""MQTT 3.1.1 and 5.0, sans-IO: the packet codec and the connection machine."""

from __future__ import annotations

from ringmq.mqtt.codec import PacketReader, decode, encode
from ringmq.mqtt.connection import Event, MqttConnection, Stage, State, Violation
from ringmq.mqtt.packets import (
    V5,
    V31,
    V311,
    Auth,
    ConnAck,
    Connect,
    Disconnect,
    Packet,
    PingReq,
    PingResp,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    SubAck,
    Subscribe,
    Subscription,
    UnsubAck,
    Unsubscribe,
    Will,
)
from ringmq.mqtt.properties import Properties
from ringmq.mqtt.reasons import MQTTError, Reason

__all__ = [
    "V5",
    "V31",
    "V311",
    "Auth",
    "ConnAck",
    "Connect",
    "Disconnect",
    "Event",
    "MQTTError",
    "MqttConnection",
    "Packet",
    "PacketReader",
    "PingReq",
    "PingResp",
    "Properties",
    "PubAck",
    "PubComp",
    "PubRec",
    "PubRel",
    "Publish",
    "Reason",
    "Stage",
    "State",
    "SubAck",
    "Subscribe",
    "Subscription",
    "UnsubAck",
    "Unsubscribe",
    "Violation",
    "Will",
    "decode",
    "encode",
]
