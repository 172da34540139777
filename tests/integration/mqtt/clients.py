"""paho-mqtt 2.x clients for the integration tests: connect, wait, collect what arrives."""

from __future__ import annotations

import queue
import threading
from typing import Any

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from paho.mqtt.subscribeoptions import SubscribeOptions

from ringmq.node import BrokerThread

TIMEOUT_S = 5.0


def properties(packet_type: int, **values: object) -> Any:
    """paho's `Properties` for a packet type, with the named properties set."""
    props = Properties(packet_type)  # type: ignore[no-untyped-call]
    for k, v in values.items():
        setattr(props, k, v)
    return props


class Paho:
    """One paho client in its own network thread, with what it received in a queue (`b`: a
    broker thread, or the MQTT port of a broker in another process)."""

    def __init__(
        self,
        b: BrokerThread | int,
        client_id: str,
        *,
        v5: bool = False,
        clean: bool = True,
        user: str | None = "guest",
        password: str | None = "guest",
        will: tuple[str, bytes, int] | None = None,
        will_props: Properties | None = None,
        session_expiry: int | None = None,
        connect: bool = True,
    ) -> None:
        self.v5 = v5
        self.client = mqtt.Client(
            CallbackAPIVersion.VERSION2,
            client_id=client_id,
            protocol=mqtt.MQTTv5 if v5 else mqtt.MQTTv311,
            clean_session=None if v5 else clean,
        )
        if user is not None:  # None: an anonymous client (no user name in CONNECT)
            self.client.username_pw_set(user, password)
        if will is not None:
            self.client.will_set(will[0], will[1], will[2], properties=will_props)
        self.messages: queue.Queue[mqtt.MQTTMessage] = queue.Queue()
        self.connected = threading.Event()
        self.disconnected = threading.Event()
        self.subscribed = threading.Event()
        self.reason: Any = None
        self.connack: Any = None
        self.session_present = False
        self.granted: list[Any] = []
        self.client.on_connect = self._on_connect
        self.client.on_message = lambda _c, _u, m: self.messages.put(m)
        self.client.on_disconnect = self._on_disconnect
        self.client.on_subscribe = self._on_subscribe
        self._clean = clean
        self.dropped = False
        self._expiry = session_expiry
        self.port = b if isinstance(b, int) else b.port_of("mqtt")
        if connect:
            self.connect()

    def _on_connect(self, _c: Any, _u: Any, flags: Any, reason: Any, _p: Any) -> None:
        self.reason = self.connack = reason
        self.session_present = bool(flags.session_present)
        self.connected.set()

    def _on_disconnect(self, _c: Any, _u: Any, _f: Any, reason: Any, _p: Any) -> None:
        self.reason = reason
        self.disconnected.set()

    def _on_subscribe(self, _c: Any, _u: Any, _mid: int, codes: Any, _p: Any) -> None:
        self.granted = list(codes)
        self.subscribed.set()

    def connect(self) -> None:
        kwargs: dict[str, Any] = {}
        if self.v5:
            props = properties(PacketTypes.CONNECT)
            if self._expiry is not None:
                props.SessionExpiryInterval = self._expiry
            kwargs = {"clean_start": self._clean, "properties": props}
        self.connected.clear()
        self.client.connect("127.0.0.1", self.port, keepalive=30, **kwargs)
        self.client.loop_start()
        assert self.connected.wait(TIMEOUT_S), "no CONNACK"

    @property
    def refused(self) -> bool:
        """The CONNACK refused the connection (paho's reason code is a failure)."""
        return bool(getattr(self.connack, "is_failure", False))

    def subscribe(self, topic: str, qos: int = 0, **kw: Any) -> list[Any]:
        self.subscribed.clear()
        if self.v5 and kw:
            opts = SubscribeOptions(qos=qos, **kw.pop("options", {}))
            self.client.subscribe(topic, options=opts, **kw)
        elif self.v5:
            self.client.subscribe(topic, options=SubscribeOptions(qos=qos))
        else:
            self.client.subscribe(topic, qos)
        assert self.subscribed.wait(TIMEOUT_S), "no SUBACK"
        return self.granted

    def publish(
        self, topic: str, payload: bytes, qos: int = 0, retain: bool = False, **kw: Any
    ) -> None:
        info = self.client.publish(topic, payload, qos, retain, **kw)
        info.wait_for_publish(TIMEOUT_S)
        assert info.is_published()

    def get(self, timeout: float = TIMEOUT_S) -> mqtt.MQTTMessage:
        return self.messages.get(timeout=timeout)

    def nothing(self, wait_s: float = 0.3) -> bool:
        try:
            self.messages.get(timeout=wait_s)
        except queue.Empty:
            return True
        return False

    def disconnect(self) -> None:
        """DISCONNECT, wait for the socket to close, stop the network thread."""
        if self.client.is_connected() and not self.dropped:
            self.client.disconnect()
            self.disconnected.wait(TIMEOUT_S)
        self.client.loop_stop()
        self.client._reset_sockets()  # its wake-up socket pair too (else closed by GC, warned)

    def drop(self) -> None:
        """Lose the connection without DISCONNECT (the will fires)."""
        self.dropped = True
        sock = self.client.socket()
        if sock is not None:
            sock.close()
        self.client.loop_stop()
        self.client._reset_sockets()
