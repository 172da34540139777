"""MQTT's refusal by a follower that does not relay: a CONNACK that sends the client away.

MQTT 5: reason 0x9C "use another server" with the leader's `host:port` as the server
reference (MQTT 5.0, 4.11); 3.1.1 has no such code: 0x03 "server unavailable". Answers the
client's CONNECT and closes. Sans-IO: `receive(bytes) -> (bytes, done)`.
"""

from __future__ import annotations

from ringmq.core.texts import not_the_leader
from ringmq.mqtt.codec import PacketReader, decode, encode
from ringmq.mqtt.packets import ConnAck, Connect
from ringmq.mqtt.properties import Properties
from ringmq.mqtt.reasons import MQTTError, Reason, connack_v3

MQTT_V5 = 5


class MqttRefuser:
    """Refuses one MQTT connection, naming the leader (see the module docstring)."""

    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.port = port
        self.reader = PacketReader()

    def receive(self, data: bytes) -> tuple[bytes, bool]:
        self.reader.feed(data)
        try:
            packet = self.reader.next_packet()
            if packet is None:
                return b"", False
            connect = decode(packet[0], packet[1], 4)
        except MQTTError:
            return b"", True
        if not isinstance(connect, Connect):
            return b"", True
        if connect.protocol_level == MQTT_V5:
            props = Properties(
                server_reference=f"{self.host}:{self.port}",
                reason_string=not_the_leader(self.host, self.port),
            )
            ack = ConnAck(Reason.USE_ANOTHER_SERVER, properties=props)
            return encode(ack, MQTT_V5), True
        return encode(ConnAck(connack_v3(Reason.SERVER_UNAVAILABLE)), 4), True
