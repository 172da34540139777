"""docs/dev/messages.md §7, row by row: an MQTT publish as the stored AMQP 0-9-1 message, and
a stored message as an MQTT 5 publish."""

from __future__ import annotations

from ringmq.adapters.amqp091.message import build
from ringmq.adapters.mqtt.message import (
    incoming,
    outgoing_properties,
    published_qos,
    retained_topic,
)
from ringmq.amqp.properties import BasicProperties, decode_properties, encode_properties
from ringmq.core.broker import Broker
from ringmq.core.session import Session
from ringmq.mqtt import Properties, Publish


def _session() -> Session:
    b = Broker()
    b.connection_opened(1, "guest", "/", "", {}, 0)
    b.channel_opened(1, 1, 0)
    s = b.session(1, 1)
    assert s is not None
    return s


def test_publish_to_amqp_properties() -> None:
    props = Properties(
        message_expiry_interval=30,
        content_type="application/json",
        response_topic="r/1",
        correlation_data=b"c-1",
        user_properties=[("a", "1"), ("a", "2"), ("b", "x")],
        payload_format_indicator=1,
    )
    p = Publish("x/y", b"{}", 1, retain=True, properties=props)
    msg = incoming(_session(), p, "x.y", 1000)
    bp = decode_properties(msg.properties_bin)
    assert msg.persistent
    assert bp.delivery_mode == 2
    assert msg.expiration_ms == 30_000
    assert bp.expiration == "30000"
    assert bp.content_type == "application/json"
    assert bp.reply_to == "r/1"
    assert bp.correlation_id == "c-1"
    assert bp.headers is not None
    assert bp.headers["a"] == "2"  # the last of a repeated name
    assert bp.headers["b"] == "x"
    assert bp.headers["x-mqtt-publish-qos"] == 1
    assert bp.headers["x-mqtt-payload-format-indicator"] == 1
    assert retained_topic(msg) == "x/y"
    assert published_qos(msg) == 1
    assert (msg.exchange, msg.routing_key, msg.body) == ("amq.topic", "x.y", b"{}")


def test_binary_correlation_data_goes_to_a_header_and_back() -> None:
    p = Publish("t", b"", 0, properties=Properties(correlation_data=b"\xff\x00"))
    msg = incoming(_session(), p, "t", 0)
    assert not msg.persistent
    assert decode_properties(msg.properties_bin).correlation_id is None
    assert outgoing_properties(msg, 0).correlation_data == b"\xff\x00"


def test_amqp_message_to_mqtt5_properties() -> None:
    bp = BasicProperties(
        content_type="text/plain",
        correlation_id="c-9",
        reply_to="replies",
        expiration="5000",
        delivery_mode=2,
        headers={"s": "v", "n": 3, "flag": True, "nested": {"no": 1}, "x-mqtt-publish-qos": 1},
    )
    msg = build(None, "amq.topic", "a.b", encode_properties(bp), b"x", 10_000)
    out = outgoing_properties(msg, 11_000)
    assert out.content_type == "text/plain"
    assert out.correlation_data == b"c-9"
    assert out.response_topic == "replies"
    assert out.message_expiry_interval == 4  # 4 s left of 5
    assert sorted(out.user_properties) == [("flag", "true"), ("n", "3"), ("s", "v")]
    assert published_qos(msg) == 1


def test_qos_of_a_message_from_another_protocol() -> None:
    plain = build(None, "amq.topic", "k", encode_properties(BasicProperties()), b"", 0)
    durable = build(
        None, "amq.topic", "k", encode_properties(BasicProperties(delivery_mode=2)), b"", 0
    )
    assert published_qos(plain) == 0
    assert published_qos(durable) == 1


def test_the_plain_publish_shortcut_gives_what_the_full_path_gives() -> None:
    s = _session()
    for qos in (0, 1, 2):
        fast = incoming(s, Publish("a/b", b"p", qos), "a.b", 5)
        full = incoming(s, Publish("a/b", b"p", qos), "a.b", 5, persistent=qos > 0)
        assert fast.properties_bin == full.properties_bin
        assert (fast.headers, fast.persistent, fast.expiration_ms, fast.message_id) == (
            full.headers,
            full.persistent,
            full.expiration_ms,
            full.message_id,
        )
