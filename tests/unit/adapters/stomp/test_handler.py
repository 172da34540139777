"""The STOMP adapter over an in-process broker: every command, each ack mode, transactions,
receipts, both destination dialects, header mapping, errors on one connection only."""

from __future__ import annotations

import pytest

from ringmq.adapters.stomp import Dialects, StompHandler
from ringmq.amqp.properties import decode_properties
from ringmq.core.config import BrokerConfig, UserConfig
from ringmq.core.session import Session
from tests.unit.adapters.stomp.kit import Kit
from tests.unit.stomp.server_frames import Out


def bodies(frames: list[Out]) -> list[bytes]:
    return [f.body for f in frames if f.command == "MESSAGE"]


def session(kit: Kit, h: StompHandler, channel: int = 1) -> Session:
    s = kit.broker.session(h.conn_id, channel)
    assert s is not None
    return s


def closed(h: StompHandler) -> bool:
    return h.closed  # a call: mypy does not narrow it across ticks


def ready(kit: Kit, queue: str, vhost: str = "/") -> int:
    return kit.broker.vhosts[vhost].queues[queue].queue.ready_count


def test_connect_bad_login_is_an_error_and_nothing_opens() -> None:
    kit = Kit()
    h = kit.handler()
    kit.feed(h, b"CONNECT\naccept-version:1.2\nlogin:guest\npasscode:nope\n\n\x00")
    (f,) = kit.read(h)
    assert f.command == "ERROR"
    assert "ACCESS_REFUSED" in f.body.decode()
    assert h.closed
    assert not h.opened
    assert kit.broker.conns == {}


def test_connect_unknown_vhost_is_refused_but_dialled_host_means_default() -> None:
    kit = Kit()
    h = kit.handler()
    kit.feed(h, b"CONNECT\naccept-version:1.2\nhost:nope\n\n\x00")
    assert kit.read(h)[0].command == "ERROR"
    h2 = kit.connect(host="127.0.0.1")  # stomp.py fills `host` with the address it dialled
    assert h2.info().vhost == "/"
    assert h2.info().protocol == "STOMP 1.2"


def test_connect_without_credentials_uses_the_default_user() -> None:
    kit = Kit()
    h = kit.handler()
    kit.feed(h, b"CONNECT\n\n\x00")
    (f,) = kit.read(h)
    assert f.command == "CONNECTED"
    assert f.headers["version"] == "1.0"
    assert f.headers["user-name"] == "guest"


def test_send_receipt_follows_the_confirm_and_message_headers() -> None:
    kit = Kit()
    h = kit.connect()
    out = kit.frame(
        h,
        "SEND",
        b"a\x00b",
        destination="/queue/q",
        receipt="r1",
        persistent="true",
        content_length="3",
        priority="3",
        correlation_id="c1",
        content_type="text/plain",
        x_app="v:1",
    )
    assert [(f.command, f.headers.get("receipt-id")) for f in out] == [("RECEIPT", "r1")]
    assert ready(kit, "q") == 1
    kit.read(h)
    (m,) = kit.frame(h, "SUBSCRIBE", destination="/queue/q", id="s", ack="client-individual")
    assert m.body == b"a\x00b"
    hd = m.headers
    assert (hd["subscription"], hd["destination"], hd["redelivered"]) == ("s", "/queue/q", "false")
    assert hd["ack"] == hd["message-id"]
    assert (hd["persistent"], hd["priority"], hd["correlation-id"]) == ("true", "3", "c1")
    assert (hd["content-type"], hd["x-app"]) == ("text/plain", "v:1")


def test_stored_in_the_0_9_1_form() -> None:
    kit = Kit()
    h = kit.connect()
    kit.frame(
        h,
        "SEND",
        b"x",
        destination="/queue/q",
        persistent="true",
        reply_to="/queue/r",
        AMQ_SCHEDULED_DELAY="0",
        _AMQ_LVQ_NAME="k",
        expiration="60000",
        amqp_message_id="m1",
    )
    got = kit.broker.delivery.get(session(kit, h), "q", no_ack=True, now_ms=kit.now)
    assert got is not None
    msg = got.message
    props = decode_properties(msg.properties_bin)
    assert props.delivery_mode == 2
    assert props.reply_to == "/queue/r"
    assert props.expiration == "60000"
    assert props.message_id == "m1"
    assert props.headers == {"x-delay": 0, "_AMQ_LVQ_NAME": "k"}
    assert msg.persistent
    assert msg.expiration_ms == 60000
    assert msg.message_id == "m1"


def test_auto_ack_removes_at_delivery() -> None:
    kit = Kit()
    h = kit.connect()
    kit.frame(h, "SUBSCRIBE", destination="/queue/q", id="s")
    kit.frame(h, "SEND", b"1", destination="/queue/q")
    assert bodies(kit.read(h)) == [b"1"]
    kit.lose(h)
    assert ready(kit, "q") == 0


def test_client_ack_is_cumulative_per_subscription() -> None:
    kit = Kit()
    h = kit.connect()
    for b in (b"1", b"2", b"3"):
        kit.frame(h, "SEND", b, destination="/queue/q")
    kit.frame(h, "SEND", b"other", destination="/queue/o")
    kit.frame(h, "SUBSCRIBE", destination="/queue/o", id="o", ack="client")
    kit.frame(h, "SUBSCRIBE", destination="/queue/q", id="s", ack="client")
    frames = [f for f in kit.read(h) if f.command == "MESSAGE"]
    by_sub: dict[str, list[Out]] = {f.headers["subscription"]: [] for f in frames}
    for f in frames:
        by_sub[f.headers["subscription"]].append(f)
    assert [f.body for f in by_sub["s"]] == [b"1", b"2", b"3"]
    kit.frame(h, "ACK", id=by_sub["s"][1].headers["ack"], receipt="a")  # acks 1 and 2
    kit.lose(h)
    assert ready(kit, "q") == 1  # 3 came back
    assert ready(kit, "o") == 1  # the other subscription's message was not acked


def test_client_individual_and_nack() -> None:
    kit = Kit()
    kit.broker.admin  # noqa: B018 - created on first use
    h = kit.connect()
    kit.frame(h, "SUBSCRIBE", destination="/queue/dlq", id="d")
    kit.frame(
        h,
        "SUBSCRIBE",
        destination="/queue/q",
        id="s",
        ack="client-individual",
        x_dead_letter_exchange="",
        x_dead_letter_routing_key="dlq",
    )
    for b in (b"1", b"2", b"3"):
        kit.frame(h, "SEND", b, destination="/queue/q")
    msgs = {f.body: f for f in kit.read(h)}
    kit.frame(h, "ACK", id=msgs[b"2"].headers["ack"])
    out = kit.frame(h, "NACK", id=msgs[b"1"].headers["ack"])  # RabbitMQ: requeue by default
    redelivered = [f for f in out if f.command == "MESSAGE"]
    assert [(f.body, f.headers["redelivered"]) for f in redelivered] == [(b"1", "true")]
    out = kit.frame(h, "NACK", id=msgs[b"3"].headers["ack"], requeue="false")  # dead-letters
    dead = [f for f in out if f.command == "MESSAGE"]
    assert [(f.body, f.headers["subscription"]) for f in dead] == [(b"3", "d")]


def test_ack_of_unknown_message_is_an_error_on_that_connection_only() -> None:
    kit = Kit()
    h = kit.connect()
    other = kit.connect()
    (f,) = kit.frame(h, "ACK", id="9-9", receipt="x")
    assert f.command == "ERROR"
    assert f.headers["receipt-id"] == "x"
    assert h.closed
    assert not other.closed
    assert (
        kit.frame(other, "SEND", b"x", destination="/queue/q", receipt="ok")[0].command == "RECEIPT"
    )


def test_1_0_and_1_1_ack_by_message_id() -> None:
    for version in ("1.0", "1.1"):
        kit = Kit()
        h = kit.connect(version)
        kit.frame(h, "SUBSCRIBE", destination="/queue/q", id="s", ack="client")
        kit.frame(h, "SEND", b"1", destination="/queue/q")
        (m,) = kit.read(h)
        assert "ack" not in m.headers
        out = kit.frame(h, "ACK", message_id=m.headers["message-id"], subscription="s", receipt="r")
        assert out[0].command == "RECEIPT"
        kit.lose(h)
        assert ready(kit, "q") == 0


def test_transaction_commit_publishes_and_acks_together() -> None:
    kit = Kit()
    h = kit.connect()
    kit.frame(h, "SEND", b"in", destination="/queue/in")
    kit.frame(h, "SUBSCRIBE", destination="/queue/in", id="s", ack="client-individual")
    (m,) = kit.read(h)
    kit.frame(h, "BEGIN", transaction="t")
    kit.frame(h, "SEND", b"out", destination="/queue/out", transaction="t")
    kit.frame(h, "ACK", id=m.headers["ack"], transaction="t")
    assert ready(kit, "out") == 0  # nothing before the commit (the SEND declared the queue)
    out = kit.frame(h, "COMMIT", transaction="t", receipt="c")
    assert [f.command for f in out] == ["RECEIPT"]
    assert ready(kit, "out") == 1
    kit.lose(h)
    assert ready(kit, "in") == 0


def test_transaction_abort_discards_and_returns_acquired_to_the_head() -> None:
    kit = Kit()
    h = kit.connect()
    for b in (b"A", b"B", b"C"):
        kit.frame(h, "SEND", b, destination="/queue/q")
    kit.frame(
        h, "SUBSCRIBE", destination="/queue/q", id="s", ack="client-individual", prefetch_count="2"
    )
    got = kit.read(h)
    assert bodies(got) == [b"A", b"B"]
    kit.frame(h, "BEGIN", transaction="t")
    for f in got:
        kit.frame(h, "ACK", id=f.headers["ack"], transaction="t")
    kit.frame(h, "SEND", b"never", destination="/queue/q", transaction="t")
    out = kit.frame(h, "ABORT", transaction="t")
    # A and B are back at the head, before C, redelivered
    assert [(f.body, f.headers["redelivered"]) for f in out if f.command == "MESSAGE"] == [
        (b"A", "true"),
        (b"B", "true"),
    ]
    assert ready(kit, "q") == 1  # C; "never" was not published
    err = kit.frame(h, "COMMIT", transaction="t")
    assert err[0].command == "ERROR"


def test_unknown_and_duplicate_transactions_are_errors() -> None:
    kit = Kit()
    h = kit.connect()
    assert (
        kit.frame(h, "SEND", b"", destination="/queue/q", transaction="nope")[0].command == "ERROR"
    )
    h = kit.connect()
    kit.frame(h, "BEGIN", transaction="t")
    assert kit.frame(h, "BEGIN", transaction="t")[0].command == "ERROR"


def test_ring_of_three_seed_client_ack_then_disconnect_keeps_the_tail() -> None:
    kit = Kit()
    h = kit.connect()
    kit.frame(h, "SUBSCRIBE", destination="/queue/ring", id="s", ack="client", x_ring_size="3")
    for b in (b"A", b"B", b"C", b"D"):
        kit.frame(h, "SEND", b, destination="/queue/ring")
    assert bodies(kit.read(h)) == [b"A", b"B", b"C", b"D"]  # in delivery: the ring overshoots
    kit.lose(h)  # disconnect without acking
    h2 = kit.connect()
    kit.frame(h2, "SUBSCRIBE", destination="/queue/ring", id="s", ack="auto")
    assert bodies(kit.read(h2)) == [b"B", b"C", b"D"]


def test_topic_and_exchange_destinations() -> None:
    kit = Kit()
    h = kit.connect()
    kit.frame(h, "SUBSCRIBE", destination="/topic/a.*", id="t")
    kit.frame(h, "SUBSCRIBE", destination="/exchange/amq.direct/k", id="x")
    kit.frame(h, "SEND", b"1", destination="/topic/a.b")
    kit.frame(h, "SEND", b"2", destination="/topic/b.b")
    kit.frame(h, "SEND", b"3", destination="/exchange/amq.direct/k")
    frames = [f for f in kit.read(h) if f.command == "MESSAGE"]
    assert [(f.body, f.headers["subscription"], f.headers["destination"]) for f in frames] == [
        (b"1", "t", "/topic/a.b"),
        (b"3", "x", "/exchange/amq.direct/k"),
    ]
    kit.lose(h)
    assert not [q for q in kit.broker.vhosts["/"].queues if q.startswith("stomp-")]


def test_durable_topic_subscription_keeps_messages_between_connections() -> None:
    kit = Kit()
    h = kit.connect()
    kit.frame(h, "SUBSCRIBE", destination="/topic/news", id="me", durable="true", ack="client")
    kit.lose(h)
    p = kit.connect()
    kit.frame(p, "SEND", b"while away", destination="/topic/news")
    h = kit.connect()
    kit.frame(h, "SUBSCRIBE", destination="/topic/news", id="me", durable="true", ack="auto")
    assert bodies(kit.read(h)) == [b"while away"]
    kit.frame(h, "UNSUBSCRIBE", id="me", durable="true")
    assert not [q for q in kit.broker.vhosts["/"].queues if q.startswith("stomp-")]


def test_amq_queue_must_exist_and_temp_queue_reply() -> None:
    kit = Kit()
    h = kit.connect()
    assert kit.frame(h, "SUBSCRIBE", destination="/amq/queue/none", id="s")[0].command == "ERROR"
    server = kit.connect()
    kit.frame(server, "SUBSCRIBE", destination="/queue/rpc", id="s")
    client = kit.connect()
    kit.frame(client, "SEND", b"ping", destination="/queue/rpc", reply_to="/temp-queue/r")
    (req,) = kit.read(server)
    reply_to = req.headers["reply-to"]
    assert reply_to.startswith("/reply-queue/stomp-temp-queue-")
    kit.frame(server, "SEND", b"pong", destination=reply_to)
    (rep,) = kit.read(client)
    assert (rep.body, rep.headers["subscription"]) == (b"pong", "/temp-queue/r")
    kit.lose(client)
    assert reply_to[len("/reply-queue/") :] not in kit.broker.vhosts["/"].queues


def test_artemis_anycast_and_multicast() -> None:
    kit = Kit()
    h = kit.connect(client_id="app")
    kit.frame(h, "SUBSCRIBE", destination="orders", id="a", subscription_type="ANYCAST")
    kit.frame(h, "SUBSCRIBE", destination="topic://prices", id="m1")
    kit.frame(
        h,
        "SUBSCRIBE",
        destination="prices",
        id="m2",
        subscription_type="MULTICAST",
        durable_subscription_name="keep",
    )
    kit.frame(h, "SEND", b"o", destination="queue://orders")
    kit.frame(h, "SEND", b"p", destination="prices")  # an existing multicast address
    frames = [f for f in kit.read(h) if f.command == "MESSAGE"]
    assert sorted(
        (f.headers["subscription"], f.body, f.headers["destination"]) for f in frames
    ) == [("a", b"o", "orders"), ("m1", b"p", "prices"), ("m2", b"p", "prices")]
    assert "app.keep" in kit.broker.vhosts["/"].queues
    assert kit.broker.vhosts["/"].queues["app.keep"].durable
    kit.frame(h, "UNSUBSCRIBE", id="m2", durable_subscription_name="keep")
    assert "app.keep" not in kit.broker.vhosts["/"].queues


def test_artemis_durable_subscription_needs_a_client_id() -> None:
    kit = Kit()
    h = kit.connect()
    (f,) = kit.frame(h, "SUBSCRIBE", destination="topic://t", id="s", durable_subscription_name="n")
    assert f.command == "ERROR"
    assert "client-id" in f.body.decode()


def test_artemis_default_routing_is_configurable() -> None:
    kit = Kit(dialects=Dialects(default_routing="MULTICAST", anycast_prefix="q/"))
    h = kit.connect()
    kit.frame(h, "SEND", b"x", destination="fresh")
    assert kit.broker.vhosts["/"].exchanges["fresh"].type.value == "fanout"
    kit.frame(h, "SEND", b"y", destination="q/work")
    assert ready(kit, "work") == 1


def test_scheduled_delivery() -> None:
    kit = Kit()
    h = kit.connect()
    kit.frame(h, "SUBSCRIBE", destination="/queue/later", id="s")
    kit.frame(h, "SEND", b"t", destination="/queue/later", AMQ_SCHEDULED_TIME=str(kit.now + 5000))
    kit.frame(h, "SEND", b"d", destination="/queue/later", AMQ_SCHEDULED_DELAY="2000")
    assert bodies(kit.read(h)) == []
    kit.tick(2500)
    assert bodies(kit.read(h)) == [b"d"]
    kit.tick(3000)
    assert bodies(kit.read(h)) == [b"t"]


def test_prefetch_count_bounds_each_subscription() -> None:
    kit = Kit()
    h = kit.connect()
    for i in range(5):
        kit.frame(h, "SEND", str(i).encode(), destination="/queue/q")
    kit.frame(
        h, "SUBSCRIBE", destination="/queue/q", id="s", ack="client-individual", prefetch_count="2"
    )
    got = kit.read(h)
    assert bodies(got) == [b"0", b"1"]
    assert bodies(kit.frame(h, "ACK", id=got[0].headers["ack"])) == [b"2"]


def test_header_escaping_on_message_frames() -> None:
    kit = Kit()
    h = kit.connect()
    kit.frame(h, "SUBSCRIBE", destination="/queue/q", id="s")
    kit.frame(h, "SEND", b"", destination="/queue/q", weird="a:b\nc\\d\re")
    (m,) = kit.read(h)
    assert m.headers["weird"] == "a:b\nc\\d\re"


def test_unsubscribe_requeues_and_unknown_unsubscribe_is_an_error() -> None:
    kit = Kit()
    h = kit.connect()
    kit.frame(h, "SEND", b"1", destination="/queue/q")
    kit.frame(h, "SUBSCRIBE", destination="/queue/q", id="s", ack="client")
    assert len(kit.read(h)) == 1
    kit.frame(h, "UNSUBSCRIBE", id="s")
    assert ready(kit, "q") == 1
    assert kit.frame(h, "UNSUBSCRIBE", id="s")[0].command == "ERROR"


def test_refused_core_call_and_bad_destination() -> None:
    kit = Kit(BrokerConfig(name_seed=1, users=[UserConfig("u", password="p")]))
    h = kit.handler()
    kit.feed(h, b"CONNECT\naccept-version:1.2\nlogin:u\npasscode:p\n\n\x00")
    assert kit.read(h)[0].command == "ERROR"  # no permissions on "/"
    kit2 = Kit()
    h = kit2.connect()
    (f,) = kit2.frame(h, "SEND", b"", destination="/nope/x")
    assert f.command == "ERROR"
    h = kit2.connect()
    (f,) = kit2.frame(h, "SUBSCRIBE", destination="/queue/q", id="s", x_max_length="many")
    assert f.command == "ERROR"
    assert "x-max-length" in f.body.decode()


@pytest.mark.parametrize("wire", [b"BOGUS\n\n\x00", b"SEND\ncontent-length:999999999\n\n"])
def test_bad_frames_get_an_error(wire: bytes) -> None:
    kit = Kit()
    h = kit.connect()
    kit.feed(h, wire)
    (f,) = kit.read(h)
    assert f.command == "ERROR"
    assert h.closed


def test_too_large_body_against_max_message_size() -> None:
    kit = Kit()
    h = kit.handler(max_message_size=10)
    kit.feed(h, b"CONNECT\naccept-version:1.2\n\n\x00")
    kit.read(h)
    (f,) = kit.frame(h, "SEND", b"x" * 11, destination="/queue/q")
    assert f.command == "ERROR"
    assert f.headers["message"] == "frame too large"


def test_heartbeat_timeout_closes_and_releases() -> None:
    kit = Kit()
    h = kit.connect(heart_beat="2000,0")
    kit.frame(h, "SEND", b"1", destination="/queue/q")
    kit.frame(h, "SUBSCRIBE", destination="/queue/q", id="s", ack="client")
    kit.read(h)
    kit.tick(100)
    kit.tick(4000)
    assert not closed(h)
    kit.tick(1000)
    assert closed(h)
    kit.lose(h)
    assert ready(kit, "q") == 1


def test_server_close_sends_an_error() -> None:
    from ringmq.core.errors import Condition

    kit = Kit()
    h = kit.connect()
    h.close(Condition.CONNECTION_FORCED, "shutting down")
    (f,) = kit.read(h)
    assert f.command == "ERROR"
    assert h.closed


def test_refused_send_with_receipt_is_an_error_with_its_receipt_id() -> None:
    kit = Kit()
    h = kit.connect()
    kit.frame(
        h,
        "SEND",
        b"1",
        destination="/queue/full",
        x_max_length="1",
        x_overflow="reject-publish",
        receipt="ok",
    )
    assert [f.command for f in kit.read(h)] == ["RECEIPT"]
    (f,) = kit.frame(h, "SEND", b"2", destination="/queue/full", receipt="r2")
    assert f.command == "ERROR"
    assert f.headers["receipt-id"] == "r2"
    assert ready(kit, "full") == 1


def test_header_a_0_9_1_property_cannot_carry_is_an_error() -> None:
    kit = Kit()
    h = kit.connect()
    (f,) = kit.frame(h, "SEND", b"", destination="/queue/q", content_type="x" * 300)
    assert f.command == "ERROR"
    assert "content_type" in f.body.decode()


def test_an_error_ends_the_subscriptions_at_once_so_nothing_is_lost() -> None:
    kit = Kit()
    h = kit.connect()
    kit.frame(h, "SUBSCRIBE", destination="/queue/q", id="s")  # auto ack
    kit.frame(h, "ACK", id="1-1")  # ERROR: the connection is over
    assert h.closed
    p = kit.connect()
    kit.frame(p, "SEND", b"kept", destination="/queue/q")
    assert ready(kit, "q") == 1  # not delivered to the closing connection
    assert h.connection_lost(kit.now) == []


def test_disconnect_receipt_waits_for_the_receipts_of_earlier_sends() -> None:
    from ringmq.core.effects import Confirm
    from ringmq.stomp import encode

    kit = Kit()
    h = kit.connect()
    effects = h.receive_data(
        encode("SEND", {"destination": "/queue/q", "receipt": "r1"}, b"x", "1.2"), kit.now
    )
    held = [e for e in effects if isinstance(e, Confirm)]  # as if waiting for the fsync
    assert held
    kit.apply([e for e in effects if not isinstance(e, Confirm)])
    kit.feed(h, encode("DISCONNECT", {"receipt": "bye"}, b"", "1.2"))
    assert kit.read(h) == []
    assert not closed(h)
    kit.feed(h, encode("SEND", {"destination": "/queue/q"}, b"ignored", "1.2"))
    kit.apply(held)
    assert [(f.command, f.headers["receipt-id"]) for f in kit.read(h)] == [
        ("RECEIPT", "r1"),
        ("RECEIPT", "bye"),
    ]
    assert closed(h)
    assert ready(kit, "q") == 1


def test_receipts_go_out_in_order_whatever_order_the_confirms_come_in() -> None:
    from ringmq.core.effects import Confirm
    from ringmq.stomp import encode

    kit = Kit()
    h = kit.connect()
    for rid in ("r1", "r2", "r3"):
        frame = encode("SEND", {"destination": "/queue/q", "receipt": rid}, b"x", "1.2")
        kit.apply([e for e in h.receive_data(frame, kit.now) if not isinstance(e, Confirm)])
    h.apply(Confirm(h.conn_id, 1, 2, False, True))  # the second before the first
    assert kit.read(h) == []
    h.apply(Confirm(h.conn_id, 1, 1, False, True))
    assert [f.headers["receipt-id"] for f in kit.read(h)] == ["r1", "r2"]
    h.apply(Confirm(h.conn_id, 1, 3, True, True))
    assert [f.headers["receipt-id"] for f in kit.read(h)] == ["r3"]


def test_expiry_both_ways() -> None:
    kit = Kit()
    h = kit.connect()
    kit.frame(h, "SUBSCRIBE", destination="queue://work", id="a")
    kit.frame(h, "SUBSCRIBE", destination="/queue/rabbit", id="r")
    kit.read(h)
    (m,) = kit.frame(h, "SEND", b"", destination="work", expires=str(kit.now + 5000))
    assert (m.headers["expiration"], m.headers["expires"]) == ("5000", str(kit.now + 5000))
    (m,) = kit.frame(h, "SEND", b"", destination="/queue/rabbit", expiration="700")
    assert m.headers["expiration"] == "700"
    assert "expires" not in m.headers


def test_artemis_consumer_window_size_zero_is_one_at_a_time() -> None:
    kit = Kit()
    h = kit.connect()
    for b in (b"1", b"2"):
        kit.frame(h, "SEND", b, destination="queue://w")
    got = kit.frame(
        h, "SUBSCRIBE", destination="queue://w", id="s", ack="client", consumer_window_size="0"
    )
    assert bodies(got) == [b"1"]
    assert bodies(kit.frame(h, "ACK", id=got[0].headers["ack"])) == [b"2"]


def test_non_ascii_digits_are_refused_not_crashed_on() -> None:
    kit = Kit()
    h = kit.connect("1.1")
    (f,) = kit.frame(h, "ACK", message_id="\u00b2-1", subscription="s")
    assert f.command == "ERROR"
    h = kit.connect()
    (f,) = kit.frame(h, "SUBSCRIBE", destination="/queue/q", id="s", prefetch_count="\u00b2")
    assert f.command == "ERROR"


def test_a_message_whose_0_9_1_properties_cannot_be_read_still_reaches_stomp() -> None:
    from ringmq.core.effects import Deliver
    from ringmq.core.message import Message

    kit = Kit()
    h = kit.connect()
    kit.frame(h, "SUBSCRIBE", destination="/queue/q", id="s")
    kit.read(h)
    channel = next(iter(h._by_channel))
    raw = b"\x80\x00\x05ab"  # content_type said 5 bytes long, 2 there: stored raw by 0-9-1
    h.apply(Deliver(h.conn_id, channel, "s", 1, False, Message("", "q", raw, b"body")))
    (m,) = kit.read(h)
    assert m.body == b"body"
    assert m.headers["destination"] == "/queue/q"


def test_an_amqp_1_0_message_reaches_a_stomp_consumer_converted() -> None:
    # published in AMQP 1.0's form (an application property, a message id, one data section):
    # the STOMP MESSAGE carries the 0-9-1 conversion's headers and the data section's bytes
    from ringmq.adapters.amqp10.message import build as build_10
    from ringmq.amqp10.sections import DATA, Message10, Properties, encode_message
    from ringmq.amqp10.types import Symbol

    kit = Kit()
    h = kit.connect()
    kit.frame(h, "SUBSCRIBE", destination="/queue/q10", id="s")
    payload = encode_message(
        Message10(
            properties=Properties(message_id="id-1", content_type=Symbol("text/plain")),
            application_properties={"colour": "blue"},
            body=((DATA, b"hello from 1.0"),),
        )
    )
    msg = build_10(payload, exchange="", routing_key="q10", now_ms=kit.now)
    b = kit.broker
    vh = b.exchanges.vhost("/")
    with b.call(kit.now, publish=True) as out:
        b.publisher.publish_without_session(
            msg, vhost=vh, exchange=vh.exchanges[""], now_ms=kit.now
        )
    kit.apply(out)
    kit.apply(b.dispatch_pending(kit.now))
    (message,) = [f for f in kit.read(h) if f.command == "MESSAGE"]
    assert message.body == b"hello from 1.0"
    assert message.headers["colour"] == "blue"
    assert message.headers["amqp-message-id"] == "id-1"
    assert message.headers["content-type"] == "text/plain"
