"""The MQTT adapter on a real in-process broker: connect, publish, subscribe, sessions."""

from __future__ import annotations

from collections.abc import Sequence

from ringmq.adapters.mqtt import registry_of
from ringmq.core.broker import Broker
from ringmq.core.config import BrokerConfig, PermissionConfig, PolicyConfig, UserConfig
from ringmq.mqtt import V5, V311
from ringmq.mqtt.packets import (
    ConnAck,
    Disconnect,
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
from tests.unit.adapters.mqtt.kit import Net


def pubs(packets: Sequence[object]) -> list[Publish]:
    return [p for p in packets if isinstance(p, Publish)]


def test_connect_subscribe_publish_qos0_and_qos1() -> None:
    net = Net()
    sub, ack = net.connect("sub")
    assert ack.reason_code == 0
    assert not ack.session_present
    got = sub.send(Subscribe(1, [Subscription("a/+", 1), Subscription("b/#", 0)]))
    assert got == [SubAck(1, [1, 0])]
    pub, _ = net.connect("pub")
    assert pub.send(Publish("a/x", b"one", 1, packet_id=7)) == [PubAck(7)]
    pub.send(Publish("b/c/d", b"two", 0))
    delivered = pubs(sub.read())
    assert [(p.topic, p.payload, p.qos) for p in delivered] == [
        ("a/x", b"one", 1),
        ("b/c/d", b"two", 0),
    ]
    sub.send(PubAck(delivered[0].packet_id))
    q = net.broker.vhosts["/"].queues["mqtt-subscription-subqos1"]
    assert q.queue.message_count == 0


def test_bad_password_is_refused_with_connack_code() -> None:
    net = Net()
    c = net.open(V311)
    from ringmq.mqtt.packets import Connect

    got = c.send(Connect(V311, "x", True, 60, "guest", b"nope"))
    assert got == [ConnAck(4)]
    assert c.handler.closed
    assert not c.handler.opened


def test_persistent_session_keeps_messages_while_offline() -> None:
    net = Net()
    sub, _ = net.connect("dev", clean=False)
    sub.send(Subscribe(1, [Subscription("t", 1)]))
    sub.send(Disconnect())
    sub.lose()
    pub, _ = net.connect("pub")
    pub.send(Publish("t", b"m1", 1, packet_id=1))
    sub2, ack = net.connect("dev", clean=False)
    assert ack.session_present
    got = pubs(sub2.read())
    assert [(p.topic, p.payload) for p in got] == [("t", b"m1")]


def test_retained_message_is_sent_on_subscribe_and_cleared_by_empty_payload() -> None:
    net = Net()
    pub, _ = net.connect("pub")
    pub.send(Publish("r/1", b"kept", 0, retain=True))
    sub, _ = net.connect("sub")
    got = sub.send(Subscribe(1, [Subscription("r/#", 1)]))
    assert isinstance(got[0], SubAck)
    assert [(p.topic, p.payload, p.retain) for p in pubs(got)] == [("r/1", b"kept", True)]
    pub.send(Publish("r/1", b"", 0, retain=True))
    sub.read()
    other, _ = net.connect("other")
    assert pubs(other.send(Subscribe(1, [Subscription("r/#", 0)]))) == []


def test_will_is_published_when_the_connection_is_lost() -> None:
    net = Net()
    sub, _ = net.connect("sub")
    sub.send(Subscribe(1, [Subscription("will/#", 0)]))
    dying, _ = net.connect("dying", will=Will("will/dying", b"gone", 0))
    dying.lose()
    assert [(p.topic, p.payload) for p in pubs(sub.read())] == [("will/dying", b"gone")]
    polite, _ = net.connect("polite", will=Will("will/polite", b"gone", 0))
    polite.send(Disconnect())
    polite.lose()
    assert pubs(sub.read()) == []


def test_qos2_both_ways() -> None:
    net = Net()
    sub, _ = net.connect("sub")
    sub.send(Subscribe(1, [Subscription("q2", 2)]))
    pub, _ = net.connect("pub")
    assert pub.send(Publish("q2", b"x", 2, packet_id=5)) == [PubRec(5)]
    # a repeat before PUBREL is not published again
    assert pub.send(Publish("q2", b"x", 2, dup=True, packet_id=5)) == [PubRec(5)]
    assert pub.send(PubRel(5)) == [PubComp(5)]
    got = pubs(sub.read())
    assert [(p.payload, p.qos) for p in got] == [(b"x", 2)]
    pid = got[0].packet_id
    assert sub.send(PubRec(pid)) == [PubRel(pid)]
    assert sub.send(PubComp(pid)) == []


def test_mqtt5_properties_and_subscription_identifier() -> None:
    net = Net()
    sub, ack = net.connect("sub", V5)
    assert ack.properties is not None
    assert ack.properties.topic_alias_maximum
    sub.send(Subscribe(1, [Subscription("p/#", 1)], Properties(subscription_identifiers=[42])))
    pub, _ = net.connect("pub", V5)
    props = Properties(
        content_type="text/plain",
        response_topic="reply/here",
        correlation_data=b"\x00\x01",
        user_properties=[("k", "v")],
        message_expiry_interval=30,
        topic_alias=3,
    )
    pub.send(Publish("p/1", b"hello", 1, packet_id=1, properties=props))
    pub.send(Publish("", b"again", 0, properties=Properties(topic_alias=3)))
    got = pubs(sub.read())
    assert [(p.topic, p.payload) for p in got] == [("p/1", b"hello"), ("p/1", b"again")]
    p = got[0].properties
    assert p is not None
    assert p.content_type == "text/plain"
    assert p.response_topic == "reply/here"
    assert p.correlation_data == b"\x00\x01"
    assert ("k", "v") in p.user_properties
    assert p.subscription_identifiers == [42]
    assert p.message_expiry_interval == 30


def test_dollar_topics_not_matched_by_leading_wildcard() -> None:
    net = Net()
    sub, _ = net.connect("sub")
    sub.send(Subscribe(1, [Subscription("#", 0), Subscription("$SYS/x", 0)]))
    pub, _ = net.connect("pub")
    pub.send(Publish("$SYS/y", b"hidden", 0))
    pub.send(Publish("$SYS/x", b"seen", 0))
    assert [p.payload for p in pubs(sub.read())] == [b"seen"]


def test_unsubscribe_and_invalid_filter() -> None:
    net = Net()
    sub, _ = net.connect("sub", V5)
    got = sub.send(Subscribe(1, [Subscription("a/#/b", 0), Subscription("ok", 0)]))
    assert isinstance(got[0], SubAck)
    assert got[0].reason_codes == [0x8F, 0]
    got = sub.send(Unsubscribe(2, ["ok", "never"]))
    assert isinstance(got[0], UnsubAck)
    assert got[0].reason_codes == [0, 0x11]


def test_shared_subscription_spreads_messages() -> None:
    net = Net()
    a, _ = net.connect("a", V5)
    b, _ = net.connect("b", V5)
    for c in (a, b):
        c.send(Subscribe(1, [Subscription("$share/g/s/#", 0)]))
    pub, _ = net.connect("pub", V5)
    for i in range(4):
        pub.send(Publish("s/x", b"%d" % i, 0))
    got_a, got_b = pubs(a.read()), pubs(b.read())
    assert len(got_a) + len(got_b) == 4
    assert got_a
    assert got_b


def test_takeover_closes_the_old_connection() -> None:
    net = Net()
    old, _ = net.connect("same", V5)
    _new, ack = net.connect("same", V5)
    assert ack.reason_code == 0
    got = old.read()
    assert isinstance(got[-1], Disconnect)
    assert got[-1].reason_code == 0x8E
    assert old.handler.closed


def test_unacknowledged_qos2_goes_again_under_its_packet_id_after_reconnect() -> None:
    net = Net()
    dev, _ = net.connect("dev", clean=False)
    dev.send(Subscribe(1, [Subscription("x", 2), Subscription("y", 1)]))
    pub, _ = net.connect("pub")
    pub.send(Publish("y", b"before", 1, packet_id=1))
    (before,) = pubs(dev.read())
    dev.send(PubAck(before.packet_id))
    pub.send(Publish("x", b"once", 2, packet_id=2), PubRel(2))
    first = pubs(dev.read())
    assert [(p.payload, p.dup) for p in first] == [(b"once", False)]
    assert first[0].packet_id != 1  # a fresh connection would start from 1
    dev.lose()  # before PUBREC: the message is the broker's still
    again, ack = net.connect("dev", clean=False)
    assert ack.session_present
    second = pubs(again.read())
    assert [(p.payload, p.dup, p.packet_id) for p in second] == [
        (b"once", True, first[0].packet_id)
    ]


def test_keep_alive_timeout_closes_and_publishes_the_will() -> None:
    net = Net()
    sub, _ = net.connect("sub", keep_alive=0)
    sub.send(Subscribe(1, [Subscription("w", 0)]))
    dev, _ = net.connect("dev", V5, will=Will("w", b"timeout"), keep_alive=2)
    net.tick(3000)
    assert dev.read() == []  # 1.5 x 2 s not over yet
    net.tick(100)
    got = dev.read()
    assert isinstance(got[-1], Disconnect)
    assert got[-1].reason_code == 0x8D
    assert dev.handler.closed
    dev.lose()
    assert [p.payload for p in pubs(sub.read())] == [b"timeout"]


def test_session_expiry_is_the_queues_x_expires() -> None:
    net = Net()
    dev, _ = net.connect("dev", V5, clean=False, props=Properties(session_expiry_interval=2))
    dev.send(Subscribe(1, [Subscription("t", 1)]))
    queues = net.broker.vhosts["/"].queues
    q = queues["mqtt-subscription-devqos1"]
    assert q.durable
    assert q.arguments["x-expires"] == 2000
    dev.lose()
    net.now_ms += 2001
    net.route(net.broker.tick(net.now_ms))
    assert "mqtt-subscription-devqos1" not in queues
    _again, ack = net.connect("dev", V5, clean=False, props=Properties(session_expiry_interval=2))
    assert not ack.session_present


def test_disconnect_with_session_expiry_0_ends_the_session() -> None:
    net = Net()
    dev, _ = net.connect("dev", V5, clean=False, props=Properties(session_expiry_interval=60))
    dev.send(Subscribe(1, [Subscription("t", 1)]))
    dev.send(Disconnect(0, Properties(session_expiry_interval=0)))
    dev.lose()
    assert "mqtt-subscription-devqos1" not in net.broker.vhosts["/"].queues


def test_qos0_messages_on_a_qos1_subscription_do_not_hold_its_window() -> None:
    net = Net()
    sub, _ = net.connect("sub")  # 3.1.1: 100 unacknowledged deliveries at most
    sub.send(Subscribe(1, [Subscription("f", 1)]))
    pub, _ = net.connect("pub")
    pub.send(*(Publish("f", b"%d" % i, 0) for i in range(250)))
    got = pubs(sub.read())
    assert [p.payload for p in got] == [b"%d" % i for i in range(250)]
    assert {p.qos for p in got} == {0}


def test_receive_maximum_bounds_unacknowledged_deliveries() -> None:
    net = Net()
    sub, _ = net.connect("sub", V5, props=Properties(receive_maximum=2))
    sub.send(Subscribe(1, [Subscription("r", 1)]))
    pub, _ = net.connect("pub", V5)
    for i in range(5):
        pub.send(Publish("r", b"%d" % i, 1, packet_id=i + 1))
    first = pubs(sub.read())
    assert [p.payload for p in first] == [b"0", b"1"]
    more = pubs(sub.send(PubAck(first[0].packet_id)))
    assert [p.payload for p in more] == [b"2"]


def test_no_local_and_retain_as_published() -> None:
    net = Net()
    me, _ = net.connect("me", V5)
    me.send(
        Subscribe(
            1,
            [
                Subscription("loop/#", 0, no_local=True),
                Subscription("keep/#", 0, retain_as_published=True),
            ],
        )
    )
    got = pubs(me.send(Publish("loop/a", b"mine", 0), Publish("keep/a", b"kept", 0, retain=True)))
    other, _ = net.connect("other", V5)
    other.send(Publish("loop/a", b"theirs", 0))
    got += pubs(me.read())
    assert [(p.topic, p.payload, p.retain) for p in got] == [
        ("keep/a", b"kept", True),
        ("loop/a", b"theirs", False),
    ]


def test_vhost_from_the_user_name_and_permissions() -> None:
    cfg = BrokerConfig(
        users=[UserConfig("dev", password="pw")],
        vhosts=["/", "plant"],
        permissions=[PermissionConfig("dev", "plant", write="^amq\\.topic$", read=".*")],
    )
    net = Net(Broker(cfg))
    c, ack = net.connect("d1", V5, user="plant:dev", password=b"pw")
    assert ack.reason_code == 0
    assert c.handler.info().vhost == "plant"
    # configure is allowed (".*") but not write on the session queue: the SUBSCRIBE is refused
    got = c.send(Subscribe(1, [Subscription("a", 1)]))
    assert isinstance(got[0], SubAck)
    assert got[0].reason_codes == [0x87]
    _, refused = net.connect("d2", V5, user="dev", password=b"pw")  # no access to "/"
    assert refused.reason_code == 0x87


def test_retain_handling() -> None:
    net = Net()
    pub, _ = net.connect("pub", V5)
    pub.send(Publish("rh/x", b"r", 0, retain=True))
    sub, _ = net.connect("sub", V5)
    assert pubs(sub.send(Subscribe(1, [Subscription("rh/#", 0, retain_handling=2)]))) == []
    assert pubs(sub.send(Subscribe(2, [Subscription("rh/+", 0, retain_handling=1)]))) != []
    # 1: only for a new subscription; this one exists now
    assert pubs(sub.send(Subscribe(3, [Subscription("rh/+", 0, retain_handling=1)]))) == []
    assert pubs(sub.send(Subscribe(4, [Subscription("rh/+", 0, retain_handling=0)]))) != []


def test_a_refused_qos1_publish_gets_its_reason_code() -> None:
    small = PolicyConfig(
        name="small",
        pattern="^mqtt-subscription-",
        definition={"max-length": 1, "overflow": "reject-publish"},
        apply_to="queues",
    )
    net = Net(Broker(BrokerConfig(policies=[small])))
    slow, _ = net.connect("slow", V5, clean=False, props=Properties(session_expiry_interval=60))
    slow.send(Subscribe(1, [Subscription("full", 1)]))
    slow.lose()  # offline: its queue keeps one message and refuses the next
    pub, _ = net.connect("pub", V5)
    first = pub.send(Publish("full", b"1", 1, packet_id=1))
    second = pub.send(Publish("full", b"2", 1, packet_id=2))
    assert isinstance(first[0], PubAck)
    assert first[0].reason_code == 0
    assert isinstance(second[0], PubAck)
    assert second[0].reason_code == 0x97  # quota exceeded
    old, _ = net.connect("old", V311)  # 3.1.1 has no way to refuse: the connection closes
    assert old.send(Publish("full", b"3", 1, packet_id=1)) == []
    assert old.handler.closed


def test_shared_subscription_membership_is_its_binding() -> None:
    net = Net()
    vh = net.broker.vhosts["/"]
    keep, _ = net.connect("keep", V5, clean=False, props=Properties(session_expiry_interval=60))
    keep.send(Subscribe(1, [Subscription("$share/g/jobs", 1)]))
    gone, _ = net.connect("gone", V5)
    gone.send(Subscribe(1, [Subscription("$share/g/jobs", 1)]))
    members = {
        args.get("x-mqtt-member") for _x, _k, args in vh.bindings_to(("q", "mqtt-shared-g-jobs"))
    }
    assert members == {"keep", "gone"}
    gone.lose()  # its session ends with it: it leaves the group
    keep.lose()  # offline, still a member: the group's queue keeps receiving
    members = {
        args.get("x-mqtt-member") for _x, _k, args in vh.bindings_to(("q", "mqtt-shared-g-jobs"))
    }
    assert members == {"keep"}
    pub, _ = net.connect("pub", V5)
    pub.send(Publish("jobs", b"while away", 1, packet_id=1))
    registry_of(net.broker).saved.clear()  # forget "keep" as a restart does
    back, ack = net.connect("keep", V5, clean=False, props=Properties(session_expiry_interval=60))
    assert ack.session_present
    assert [p.payload for p in pubs(back.read())] == [b"while away"]
    clean, _ = net.connect("keep", V5)  # a clean start leaves the group
    members = {
        args.get("x-mqtt-member") for _x, _k, args in vh.bindings_to(("q", "mqtt-shared-g-jobs"))
    }
    assert members == set()
    assert clean.handler.opened


def test_an_amqp_1_0_message_reaches_an_mqtt_subscriber_converted() -> None:
    # published in AMQP 1.0's form to amq.topic: the PUBLISH carries the data section's bytes
    # and the 0-9-1 conversion's properties (content type, user properties)
    from ringmq.adapters.amqp10.message import build as build_10
    from ringmq.amqp10.sections import DATA, Message10, encode_message
    from ringmq.amqp10.sections import Properties as Properties10
    from ringmq.amqp10.types import Symbol

    net = Net()
    sub, _ = net.connect("sub", V5)
    sub.send(Subscribe(1, [Subscription("dev/+", 0)]))
    payload = encode_message(
        Message10(
            properties=Properties10(content_type=Symbol("text/plain")),
            application_properties={"room": "kitchen"},
            body=((DATA, b"21.5"),),
        )
    )
    b = net.broker
    msg = build_10(payload, exchange="amq.topic", routing_key="dev.t1", now_ms=0)
    vh = b.exchanges.vhost("/")
    with b.call(0, publish=True) as out:
        b.publisher.publish_without_session(
            msg, vhost=vh, exchange=vh.exchanges["amq.topic"], now_ms=0
        )
    net.route(out)
    (got,) = pubs(sub.read())
    assert (got.topic, got.payload) == ("dev/t1", b"21.5")
    assert got.properties is not None
    assert got.properties.content_type == "text/plain"
    assert ("room", "kitchen") in got.properties.user_properties
