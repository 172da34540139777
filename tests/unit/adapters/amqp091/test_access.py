"""Logins, vhost access and permissions as AMQP 0-9-1 clients see them: PLAIN and AMQPLAIN,
refused logins with their reply codes, configured users, the permission regexes with
RabbitMQ's texts and the method they name, and what declaring with a dead-letter or alternate
exchange needs."""

from __future__ import annotations

import pytest

from ringmq.adapters.amqp091 import check_login
from ringmq.amqp import spec
from ringmq.amqp.reply_codes import AMQPError, ReplyCode
from ringmq.amqp.tables import encode_table
from ringmq.core.broker import Broker
from ringmq.core.config import BrokerConfig, PermissionConfig, UserConfig
from ringmq.core.errors import BrokerError, Condition
from tests.unit.adapters.amqp091.kit import Kit


def test_plain_and_amqplain_login() -> None:
    b = Broker()
    assert check_login(b, "PLAIN", b"\x00guest\x00guest", True).user == "guest"
    amqplain = encode_table({"LOGIN": "guest", "PASSWORD": "guest"})[4:]
    assert check_login(b, "AMQPLAIN", amqplain, True).user == "guest"


def test_bad_password_and_remote_guest_are_refused() -> None:
    b = Broker()
    with pytest.raises(AMQPError) as bad:
        check_login(b, "PLAIN", b"\x00guest\x00nope", True)
    assert bad.value.code is ReplyCode.ACCESS_REFUSED
    assert "Login was refused using authentication mechanism PLAIN" in bad.value.reply_text
    with pytest.raises(AMQPError) as remote:
        check_login(b, "PLAIN", b"\x00guest\x00guest", False)
    assert remote.value.code is ReplyCode.ACCESS_REFUSED
    with pytest.raises(AMQPError) as mech:
        check_login(b, "EXTERNAL", b"", True)
    assert mech.value.code is ReplyCode.COMMAND_INVALID


def test_configured_user_logs_in_remotely_and_vhost_access_is_checked() -> None:
    cfg = BrokerConfig(
        users=[UserConfig("app", password="s3cret")],
        vhosts=["/", "prod"],
        permissions=[PermissionConfig("app", "prod")],
    )
    b = Broker(cfg)
    assert check_login(b, "PLAIN", b"\x00app\x00s3cret", False).user == "app"
    b.connection_opened(1, "app", "prod", "10.0.0.1:5", {}, 0)
    with pytest.raises(BrokerError) as denied:
        b.connection_opened(2, "app", "/", "10.0.0.1:6", {}, 0)
    assert denied.value.condition is Condition.NOT_ALLOWED
    assert denied.value.explanation == "access to vhost '/' refused for user 'app'"
    with pytest.raises(BrokerError) as missing:
        b.connection_opened(3, "app", "nope", "10.0.0.1:7", {}, 0)
    assert missing.value.condition is Condition.NOT_ALLOWED


def test_permission_regexes_refuse_with_rabbitmq_text() -> None:
    cfg = BrokerConfig(
        users=[UserConfig("u", password="p")],
        permissions=[PermissionConfig("u", "/", configure="^own-", write=".*", read="^own-")],
    )
    k = Kit(cfg)
    ch = k.channel(k.connect("u"))
    k.declare(ch, "own-q")
    err = k.error(ch, spec.QueueDeclare(queue="other"))
    assert err.code is ReplyCode.ACCESS_REFUSED
    assert err.explanation == "configure access to queue 'other' in vhost '/' refused for user 'u'"
    assert (err.class_id, err.method_id) == (50, 10)


def _perm_kit(write: str, read: str) -> tuple[Kit, tuple[int, int]]:
    cfg = BrokerConfig(
        users=[UserConfig("u", password="p")],
        permissions=[PermissionConfig("u", "/", configure=".*", write=write, read=read)],
    )
    k = Kit(cfg)
    return k, k.channel(k.connect("u"))


def test_dead_letter_exchange_on_declare_needs_write_on_it_and_read_on_the_queue() -> None:
    k, ch = _perm_kit(write="^dlx-ok$", read="^q-")
    k.declare(ch, "q-1", arguments={"x-dead-letter-exchange": "dlx-ok"})
    err = k.error(ch, spec.QueueDeclare(queue="q-2", arguments={"x-dead-letter-exchange": "dlx"}))
    assert err.code is ReplyCode.ACCESS_REFUSED
    assert err.explanation == "write access to exchange 'dlx' in vhost '/' refused for user 'u'"
    ch = k.channel(k.connect("u"))
    args = {"x-dead-letter-exchange": "dlx-ok"}
    err = k.error(ch, spec.QueueDeclare(queue="other", arguments=args))
    assert err.code is ReplyCode.ACCESS_REFUSED
    assert err.explanation == "read access to queue 'other' in vhost '/' refused for user 'u'"
    # the default exchange as DLX is checked as amq.default
    ch = k.channel(k.connect("u"))
    err = k.error(ch, spec.QueueDeclare(queue="q-3", arguments={"x-dead-letter-exchange": ""}))
    assert "exchange 'amq.default'" in err.explanation
    ch = k.channel(k.connect("u"))
    err = k.error(ch, spec.QueueDeclare(queue="q-4", arguments={"x-dead-letter-exchange": 5}))
    assert err.code is ReplyCode.PRECONDITION_FAILED
    assert err.explanation == "invalid type 'signedint' for arg 'x-dead-letter-exchange'"
    assert "q-2" not in k.broker.vhosts["/"].queues


def test_alternate_exchange_on_declare_needs_write_on_it_and_read_on_the_exchange() -> None:
    k, ch = _perm_kit(write="^ae-ok$", read="^x-")
    k.call(ch, spec.ExchangeDeclare(exchange="x-1", arguments={"alternate-exchange": "ae-ok"}))
    decl = spec.ExchangeDeclare(exchange="x-2", arguments={"alternate-exchange": "ae"})
    err = k.error(ch, decl)
    assert err.code is ReplyCode.ACCESS_REFUSED
    assert err.explanation == "write access to exchange 'ae' in vhost '/' refused for user 'u'"
    assert (err.class_id, err.method_id) == (40, 10)
    ch = k.channel(k.connect("u"))
    decl = spec.ExchangeDeclare(exchange="y", arguments={"alternate-exchange": "ae-ok"})
    err = k.error(ch, decl)
    assert err.explanation == "read access to exchange 'y' in vhost '/' refused for user 'u'"
    assert "x-2" not in k.broker.vhosts["/"].exchanges
    # without the argument no read or write is needed
    ch = k.channel(k.connect("u"))
    k.call(ch, spec.ExchangeDeclare(exchange="plain"))
