"""The MQTT connection machine: bytes in, packets out, the protocol's rules in between.

Theory of operation
-------------------
`MqttConnection` is sans-IO (h11's shape): `feed(data, now_ms)` appends socket bytes, then
`next_event()` returns the next packet the application must act on, or None when it needs
more bytes. Replies the protocol alone decides are queued by the machine itself (PINGRESP,
PUBREL after a PUBREC, PUBCOMP after a PUBREL); the application queues the rest with `send`,
`send_publish` and `settle_publish`, and takes the bytes with `data_to_send`.

States: AWAIT_CONNECT (the first packet must be CONNECT: anything else closes), CONNECTED
once the application calls `accept`, CLOSED after `refuse`, `close`, a DISCONNECT from the
client or a protocol violation. A violation is returned as a `Violation` event after the
machine queued the answer the protocol gives (5.0: DISCONNECT with the reason code; 3.1.1:
nothing, the socket closes; a CONNECT of an unknown protocol level: CONNACK 0x01). Nothing
is read after CLOSED.

Packet identifiers, both ways:

* inbound QoS 1 and 2: `pending_in` holds the publishes not yet acknowledged (the
  application acknowledges with `settle_publish` once the broker has the message; more than
  `receive_maximum` at once is RECEIVE_MAXIMUM_EXCEEDED). QoS 2 ids stay in `qos2_in` from
  PUBREC until the client's PUBREL: a PUBLISH repeating such an id is a duplicate, answered
  with PUBREC again and not returned (exactly once). `qos2_in` belongs to the session: the
  application hands it over from one connection to the next of a persistent session.
* outbound: `send_publish` gives a QoS 1/2 publish a free identifier and records its stage in
  `outbound` (AWAIT_PUBACK, AWAIT_PUBREC, then AWAIT_PUBCOMP once PUBREL is sent); a PUBACK
  or PUBREC is returned to the application (the message is the client's), PUBCOMP frees the
  id. An acknowledgement of an unknown id is ignored (it may answer a previous connection).

Keep-alive (§3.1.2.10): a client silent for 1.5 times its keep-alive is gone
(`keep_alive_expired(now_ms)`; `keep_alive_due_ms` is when, for a caller that checks only
then). Topic aliases (5.0 §3.3.2.3.4) sent by the client are
resolved here: the application always sees the topic name.

Imports nothing of the broker (import-linter: protocol machines are sans-IO).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Final

from ringmq.mqtt.codec import PacketReader, decode, encode
from ringmq.mqtt.packets import (
    V5,
    V311,
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
)
from ringmq.mqtt.properties import Properties
from ringmq.mqtt.reasons import MQTTError, Reason, connack_v3

MAX_PACKET_ID: Final = 0xFFFF


class State(Enum):
    AWAIT_CONNECT = "await-connect"
    CONNECTED = "connected"
    CLOSED = "closed"


class Stage(Enum):
    """Where an outbound QoS 1/2 publish is in its acknowledgement flow."""

    AWAIT_PUBACK = "await-puback"
    AWAIT_PUBREC = "await-pubrec"
    AWAIT_PUBCOMP = "await-pubcomp"


@dataclass(frozen=True, slots=True)
class Violation:
    """The client broke the protocol; the machine queued its answer and is CLOSED."""

    reason: Reason
    text: str


Event = Packet | Violation


class MqttConnection:
    """One MQTT connection's protocol state (see the module docstring).

    Args:
        max_packet_size: the largest packet accepted from the client (bigger: PACKET_TOO_LARGE).
        receive_maximum: unacknowledged QoS 1/2 publishes the client may send at once.
        topic_alias_maximum: the highest topic alias the client may use (0: none).
    """

    def __init__(
        self,
        max_packet_size: int = 268_435_460,
        receive_maximum: int = 0xFFFF,
        topic_alias_maximum: int = 0,
    ) -> None:
        self.state = State.AWAIT_CONNECT
        self.version = V311
        self.keep_alive_s = 0
        self.last_rx_ms = 0
        self.receive_maximum = receive_maximum
        self.topic_alias_maximum = topic_alias_maximum
        self.client_max_packet_size = 0  # 0: no limit
        self.pending_in: dict[int, int] = {}  # packet id -> QoS, not yet acknowledged
        self.qos2_in: set[int] = set()  # PUBREC sent, PUBREL awaited
        self.outbound: dict[int, Stage] = {}
        self._aliases: dict[int, str] = {}
        self._next_id = 1
        self._reader = PacketReader(max_packet_size)
        self._out = bytearray()

    # ------------------------------------------------------------------ input
    def feed(self, data: bytes, now_ms: int) -> None:
        """Take bytes read from the socket (ignored once CLOSED)."""
        if self.state is State.CLOSED:
            return
        self.last_rx_ms = now_ms
        self._reader.feed(data)

    def next_event(self) -> Event | None:
        """The next packet for the application, a `Violation`, or None (need more bytes)."""
        while self.state is not State.CLOSED:
            try:
                if self.state is State.AWAIT_CONNECT and self._reader.first_byte() not in (
                    None,
                    0x10,
                ):
                    # Not MQTT at all (or not CONNECT first): no need to wait for a body.
                    raise MQTTError(Reason.PROTOCOL_ERROR, "the first packet must be CONNECT")
                got = self._reader.next_packet()
                if got is None:
                    return None
                packet = decode(got[0], got[1], self.version)
                event = self._process(packet)
            except MQTTError as exc:
                return self._violation(exc)
            if event is not None:
                return event
        return None

    def _violation(self, exc: MQTTError) -> Violation:
        if self.state is State.AWAIT_CONNECT:
            if exc.reason is Reason.UNSUPPORTED_PROTOCOL_VERSION:
                # 3.1.1 §3.1.2.2 and 5.0 §3.1.2.2: answer with the 3.1.1 CONNACK 0x01
                self._out += encode(ConnAck(1), V311)
        elif self.version == V5:
            self._out += encode(Disconnect(exc.reason, Properties(reason_string=exc.text)), V5)
        self.state = State.CLOSED
        return Violation(exc.reason, exc.text)

    def _process(self, packet: Packet) -> Event | None:
        # One decoded packet: answer what the protocol alone answers, return the rest.
        if self.state is State.AWAIT_CONNECT:
            if not isinstance(packet, Connect):
                raise MQTTError(Reason.PROTOCOL_ERROR, "the first packet must be CONNECT")
            self.version = packet.protocol_level
            self.keep_alive_s = packet.keep_alive
            props = packet.properties
            if props is not None:
                if props.receive_maximum == 0 or props.maximum_packet_size == 0:
                    raise MQTTError(Reason.PROTOCOL_ERROR, "receive maximum or packet size 0")
                self.client_max_packet_size = props.maximum_packet_size or 0
            return packet
        match packet:
            case Publish():
                return self._inbound_publish(packet)
            case PubAck():
                if self.outbound.get(packet.packet_id) is Stage.AWAIT_PUBACK:
                    del self.outbound[packet.packet_id]
                    return packet
                return None
            case PubRec():
                pid = packet.packet_id
                if self.outbound.get(pid) is not Stage.AWAIT_PUBREC:
                    if pid in self.outbound or self.version != V5:
                        return None
                    self.send(PubRel(pid, Reason.PACKET_IDENTIFIER_NOT_FOUND))
                    return None
                if packet.reason_code >= 0x80:
                    del self.outbound[pid]
                else:
                    self.outbound[pid] = Stage.AWAIT_PUBCOMP
                    self.send(PubRel(pid))
                return packet
            case PubRel():
                pid = packet.packet_id
                if pid in self.qos2_in:
                    self.qos2_in.discard(pid)
                    self.send(PubComp(pid))
                elif self.version == V5:
                    self.send(PubComp(pid, Reason.PACKET_IDENTIFIER_NOT_FOUND))
                else:
                    self.send(PubComp(pid))
                return None
            case PubComp():
                if self.outbound.get(packet.packet_id) is Stage.AWAIT_PUBCOMP:
                    del self.outbound[packet.packet_id]
                return None
            case PingReq():
                self.send(PingResp())
                return None
            case Disconnect():
                self.state = State.CLOSED
                return packet
            case Connect():
                raise MQTTError(Reason.PROTOCOL_ERROR, "a second CONNECT")
            case _:
                if packet.__class__.__name__ in ("ConnAck", "SubAck", "UnsubAck", "PingResp"):
                    raise MQTTError(
                        Reason.PROTOCOL_ERROR, f"{type(packet).__name__} sent by a client"
                    )
                return packet

    def _inbound_publish(self, p: Publish) -> Publish | None:
        props = p.properties
        if props is not None and props.topic_alias is not None:
            alias = props.topic_alias
            if not 0 < alias <= self.topic_alias_maximum:
                raise MQTTError(Reason.TOPIC_ALIAS_INVALID, f"topic alias {alias}")
            if p.topic:
                self._aliases[alias] = p.topic
            else:
                topic = self._aliases.get(alias)
                if topic is None:
                    raise MQTTError(Reason.PROTOCOL_ERROR, f"unknown topic alias {alias}")
                p.topic = topic
            props.topic_alias = None
        if props is not None and props.subscription_identifiers:
            raise MQTTError(Reason.PROTOCOL_ERROR, "subscription identifier on a client PUBLISH")
        if p.qos == 2 and p.packet_id in self.qos2_in:
            # A repeat of a QoS 2 publish already received: acknowledge it again, once only.
            self.send(PubRec(p.packet_id))
            return None
        if p.qos:
            if p.packet_id not in self.pending_in and len(self.pending_in) >= self.receive_maximum:
                raise MQTTError(
                    Reason.RECEIVE_MAXIMUM_EXCEEDED, "too many unacknowledged publishes"
                )
            self.pending_in[p.packet_id] = p.qos
        return p

    # ------------------------------------------------------------------ application calls
    def accept(self, connack: ConnAck) -> None:
        """Answer the CONNECT with a successful CONNACK: the connection is up."""
        assert self.state is State.AWAIT_CONNECT
        self.send(connack)
        self.state = State.CONNECTED

    def refuse(self, reason: Reason, text: str = "") -> None:
        """Answer the CONNECT with a refusal (its 3.1.1 return code before 5.0) and close."""
        if self.version == V5:
            props = Properties(reason_string=text) if text else None
            self._out += encode(ConnAck(reason, False, props), V5)
        else:
            self._out += encode(ConnAck(connack_v3(reason)), self.version)
        self.state = State.CLOSED

    def close(self, reason: Reason, text: str = "") -> None:
        """Close from the server side (5.0: DISCONNECT with `reason`; 3.1.1: just close)."""
        if self.state is State.CONNECTED and self.version == V5:
            props = Properties(reason_string=text) if text else None
            self._out += encode(Disconnect(reason, props), V5)
        self.state = State.CLOSED

    def send(self, packet: Packet) -> None:
        """Queue a packet for the client."""
        self._out += encode(packet, self.version)

    def settle_publish(self, packet_id: int, reason: int = Reason.SUCCESS) -> None:
        """Acknowledge an inbound QoS 1 (PUBACK) or QoS 2 (PUBREC) publish."""
        qos = self.pending_in.pop(packet_id, 0)
        if qos == 1:
            self.send(PubAck(packet_id, reason))
        elif qos == 2:
            if reason < 0x80:
                self.qos2_in.add(packet_id)
            self.send(PubRec(packet_id, reason))

    def send_publish(self, p: Publish) -> bool:
        """Queue an outbound publish, giving a QoS 1/2 one a free packet identifier.

        Returns False, queueing nothing, when the packet is over the client's maximum packet
        size (5.0 §3.1.2.11.4: the server discards it as if it were delivered).
        """
        if p.qos and not p.packet_id:
            p.packet_id = self._free_id()
        data = encode(p, self.version)
        if self.client_max_packet_size and len(data) > self.client_max_packet_size:
            return False
        if p.qos:
            self.outbound[p.packet_id] = Stage.AWAIT_PUBACK if p.qos == 1 else Stage.AWAIT_PUBREC
        self._out += data
        return True

    def resend_pubrel(self, packet_id: int) -> None:
        """Send PUBREL again for a QoS 2 publish the client received (session resumed)."""
        self.outbound[packet_id] = Stage.AWAIT_PUBCOMP
        self.send(PubRel(packet_id))

    def _free_id(self) -> int:
        nid = self._next_id
        for _ in range(MAX_PACKET_ID):
            if nid not in self.outbound:
                self._next_id = nid % MAX_PACKET_ID + 1
                return nid
            nid = nid % MAX_PACKET_ID + 1
        raise MQTTError(Reason.RECEIVE_MAXIMUM_EXCEEDED, "no free packet identifier")

    def data_to_send(self) -> bytes:
        """Everything queued for the client since the last call."""
        out = bytes(self._out)
        self._out.clear()
        return out

    def keep_alive_expired(self, now_ms: int) -> bool:
        """The client said nothing for 1.5 times its keep-alive (§3.1.2.10)."""
        due = self.keep_alive_due_ms()
        return due is not None and now_ms >= due

    def keep_alive_due_ms(self) -> int | None:
        """When `keep_alive_expired` turns true if nothing more arrives (None: never; every
        byte received moves it later)."""
        ka = self.keep_alive_s
        if not ka or self.state is State.CLOSED:
            return None
        return self.last_rx_ms + ka * 1500 + 1
