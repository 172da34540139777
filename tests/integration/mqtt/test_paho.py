"""paho-mqtt 2.x against the broker over TCP: MQTT 3.1.1 and 5, every QoS, retained
messages, wills, persistent sessions (across a reconnect and a broker restart), shared
subscriptions, topic aliases and message expiry."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from paho.mqtt.packettypes import PacketTypes

from ringmq.node import BrokerThread
from tests.integration.conftest import BrokerFactory, wait_until
from tests.integration.mqtt.clients import properties
from tests.integration.mqtt.conftest import MakePaho

pytestmark = pytest.mark.integration


def publish_props(**values: object) -> Any:
    return properties(PacketTypes.PUBLISH, **values)


@pytest.mark.parametrize("v5", [False, True], ids=["3.1.1", "5"])
@pytest.mark.parametrize("qos", [0, 1, 2])
def test_publish_subscribe_each_qos(
    broker: BrokerThread, paho: MakePaho, v5: bool, qos: int
) -> None:
    sub = paho(broker, "sub", v5=v5)
    sub.subscribe("sensors/+/temp", qos)
    pub = paho(broker, "pub", v5=v5)
    pub.publish("sensors/k1/temp", b"21.5", qos)
    m = sub.get()
    assert (m.topic, m.payload, m.qos) == ("sensors/k1/temp", b"21.5", qos)


@pytest.mark.parametrize("v5", [False, True], ids=["3.1.1", "5"])
def test_retained_message_reaches_later_subscribers(
    broker: BrokerThread, paho: MakePaho, v5: bool
) -> None:
    pub = paho(broker, "pub", v5=v5)
    pub.publish("home/door", b"open", 1, retain=True)
    sub = paho(broker, "sub", v5=v5)
    sub.subscribe("home/#", 1)
    m = sub.get()
    assert (m.topic, m.payload, m.retain) == ("home/door", b"open", True)
    pub.publish("home/door", b"", 1, retain=True)  # clears it
    assert sub.get().payload == b""
    late = paho(broker, "late", v5=v5)
    late.subscribe("home/#", 1)
    assert late.nothing()


def test_will_on_lost_connection_not_on_disconnect(broker: BrokerThread, paho: MakePaho) -> None:
    sub = paho(broker, "watcher")
    sub.subscribe("status/#", 1)
    dying = paho(broker, "dying", will=("status/dying", b"offline", 1))
    dying.drop()
    m = sub.get()
    assert (m.topic, m.payload) == ("status/dying", b"offline")
    polite = paho(broker, "polite", will=("status/polite", b"offline", 1))
    polite.disconnect()
    assert sub.nothing()


def test_mqtt5_will_delay(broker: BrokerThread, paho: MakePaho) -> None:
    sub = paho(broker, "watcher", v5=True)
    sub.subscribe("status/#", 1)
    wp = properties(PacketTypes.WILLMESSAGE, WillDelayInterval=1)
    dev = paho(
        broker, "dev", v5=True, will=("status/dev", b"gone", 1), will_props=wp, session_expiry=60
    )
    dev.drop()
    m = sub.get()  # after the delay, from the broker's periodic tick
    assert (m.topic, m.payload) == ("status/dev", b"gone")


def test_mqtt5_will_delay_with_no_mqtt_connection_left(
    broker: BrokerThread, paho: MakePaho
) -> None:
    # The delayed will is due while no MQTT connection is open (the watcher speaks AMQP 0-9-1):
    # the server's sweep runs MQTT's protocol tick all the same (it ran in MQTT connections'
    # ticks only, so such a will waited for the next MQTT client).
    import pika

    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", broker.port))
    ch = conn.channel()
    ch.queue_declare("watch")
    ch.queue_bind("watch", "amq.topic", "status.#")
    wp = properties(PacketTypes.WILLMESSAGE, WillDelayInterval=1)
    dev = paho(
        broker, "dev", v5=True, will=("status/dev", b"gone", 1), will_props=wp, session_expiry=60
    )
    dev.drop()
    got: list[bytes] = []

    def will_arrived() -> bool:
        method, _props, body = ch.basic_get("watch", auto_ack=True)
        if method is not None:
            got.append(body)
        return bool(got)

    wait_until(will_arrived, timeout=10)
    assert got == [b"gone"]
    conn.close()


@pytest.mark.parametrize("v5", [False, True], ids=["3.1.1", "5"])
def test_persistent_session_across_client_reconnect(
    broker: BrokerThread, paho: MakePaho, v5: bool
) -> None:
    kw = {"v5": v5, "clean": False, "session_expiry": 300 if v5 else None}
    dev = paho(broker, "device-7", **kw)
    dev.subscribe("cmd/device-7", 1)
    dev.disconnect()
    ctl = paho(broker, "ctl", v5=v5)
    for i in range(3):
        ctl.publish("cmd/device-7", b"c%d" % i, 1)
    again = paho(broker, "device-7", **kw)
    assert again.session_present
    assert [again.get().payload for _ in range(3)] == [b"c0", b"c1", b"c2"]


def test_clean_session_discards_the_old_one(broker: BrokerThread, paho: MakePaho) -> None:
    dev = paho(broker, "dev", clean=False)
    dev.subscribe("t", 1)
    dev.disconnect()
    clean = paho(broker, "dev", clean=True)
    assert not clean.session_present
    paho(broker, "ctl").publish("t", b"x", 1)
    assert clean.nothing()


def test_persistent_session_and_retained_across_broker_restart(
    broker_factory: BrokerFactory, paho: MakePaho, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    b1 = broker_factory(data_dir=data)
    dev = paho(b1, "dev", clean=False)
    dev.subscribe("alerts/#", 2)
    dev.disconnect()
    ctl = paho(b1, "ctl")
    ctl.publish("alerts/fire", b"qos1", 1)
    ctl.publish("alerts/flood", b"qos2", 2)
    ctl.publish("config/mode", b"eco", 0, retain=True)
    ctl.disconnect()
    b1.stop()
    b2 = broker_factory(data_dir=data)
    again = paho(b2, "dev", clean=False)
    assert again.session_present
    got = sorted((m.topic, m.payload) for m in (again.get(), again.get()))
    assert got == [("alerts/fire", b"qos1"), ("alerts/flood", b"qos2")]
    again.subscribe("config/+", 0)
    m = again.get()
    assert (m.topic, m.payload, m.retain) == ("config/mode", b"eco", True)


def test_shared_subscription_splits_the_messages(broker: BrokerThread, paho: MakePaho) -> None:
    a = paho(broker, "a", v5=True)
    b = paho(broker, "b", v5=True)
    for c in (a, b):
        c.subscribe("$share/workers/jobs/#", 1)
    pub = paho(broker, "pub", v5=True)
    for i in range(10):
        pub.publish("jobs/new", b"%d" % i, 1)
    wait_until(lambda: a.messages.qsize() + b.messages.qsize() >= 10)
    got_a = [a.get().payload for _ in range(a.messages.qsize())]
    got_b = [b.get().payload for _ in range(b.messages.qsize())]
    got = got_a + got_b
    assert sorted(got) == sorted(b"%d" % i for i in range(10))
    assert got_a
    assert got_b


def test_topic_alias_and_properties(broker: BrokerThread, paho: MakePaho) -> None:
    sub = paho(broker, "sub", v5=True)
    sub.subscribe("room/+/temp", 1)
    pub = paho(broker, "pub", v5=True)
    pub.publish(
        "room/1/temp",
        b"20",
        1,
        properties=publish_props(
            TopicAlias=1,
            ResponseTopic="replies/pub",
            CorrelationData=b"\x01\x02",
            UserProperty=[("unit", "C")],
            ContentType="text/plain",
        ),
    )
    pub.publish("", b"21", 1, properties=publish_props(TopicAlias=1))
    m1, m2 = sub.get(), sub.get()
    assert [(m1.topic, m1.payload), (m2.topic, m2.payload)] == [
        ("room/1/temp", b"20"),
        ("room/1/temp", b"21"),
    ]
    p: Any = m1.properties
    assert p is not None
    assert p.ResponseTopic == "replies/pub"
    assert p.CorrelationData == b"\x01\x02"
    assert ("unit", "C") in p.UserProperty
    assert p.ContentType == "text/plain"


def test_message_expiry(broker: BrokerThread, paho: MakePaho) -> None:
    dev = paho(broker, "dev", v5=True, clean=False, session_expiry=300)
    dev.subscribe("t/#", 1)
    dev.disconnect()
    pub = paho(broker, "pub", v5=True)
    pub.publish("t/short", b"gone", 1, properties=publish_props(MessageExpiryInterval=1))
    pub.publish("t/long", b"kept", 1, properties=publish_props(MessageExpiryInterval=600))
    time.sleep(1.2)  # the first one's expiry passes while the device is offline
    again = paho(broker, "dev", v5=True, clean=False, session_expiry=300)
    m = again.get()
    assert m.payload == b"kept"
    p: Any = m.properties
    assert 0 < p.MessageExpiryInterval <= 600
    assert again.nothing()


def test_a_second_connection_takes_the_session_over(broker: BrokerThread, paho: MakePaho) -> None:
    first = paho(broker, "same-id", v5=True, clean=False, session_expiry=60)
    first.subscribe("over/#", 1)
    second = paho(broker, "same-id", v5=True, clean=False, session_expiry=60)
    assert first.disconnected.wait(5)
    assert first.reason == 0x8E  # session taken over
    first.client.loop_stop()  # paho would reconnect and take it back
    assert second.session_present
    paho(broker, "pub").publish("over/x", b"to the new one", 1)
    assert second.get().payload == b"to the new one"


def test_shared_subscription_of_a_persistent_session_across_restart(
    broker_factory: BrokerFactory, paho: MakePaho, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    b1 = broker_factory(data_dir=data)
    w = paho(b1, "worker-1", v5=True, clean=False, session_expiry=600)
    w.subscribe("$share/pool/work/#", 1)
    w.disconnect()
    b1.stop()
    b2 = broker_factory(data_dir=data)
    paho(b2, "boss", v5=True).publish("work/item", b"job 1", 1)
    again = paho(b2, "worker-1", v5=True, clean=False, session_expiry=600)
    assert again.session_present
    m = again.get()
    assert (m.topic, m.payload) == ("work/item", b"job 1")
