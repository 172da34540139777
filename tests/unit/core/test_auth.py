"""Password hashes (RabbitMQ-compatible), logins and permission regexes."""

from __future__ import annotations

import pytest

from ringmq.core.auth import Access, AuthDB, hash_password, verify_password
from ringmq.core.errors import BrokerError, Condition


def test_hash_matches_rabbitmq_documented_example() -> None:
    # RabbitMQ's password documentation hashes "test12" to this value.
    assert verify_password("test12", "kI3GCqW5JLMJa4iX1lo7X4D6XbYqlLgxIs30+P6tENUV2POR")
    assert not verify_password("test13", "kI3GCqW5JLMJa4iX1lo7X4D6XbYqlLgxIs30+P6tENUV2POR")
    assert not verify_password("x", "not base64!")


def test_hash_roundtrip_with_fixed_salt() -> None:
    h = hash_password("pw", salt=b"\x01\x02\x03\x04")
    assert h == hash_password("pw", salt=b"\x01\x02\x03\x04")
    assert verify_password("pw", h)
    assert hash_password("pw") != hash_password("pw")  # random salts


def test_login_loopback_rule() -> None:
    db = AuthDB()
    db.add_user("guest", password="guest", loopback_only=True)
    assert db.login("PLAIN", "guest", "guest", peer_loopback=True).name == "guest"
    with pytest.raises(BrokerError):
        db.login("PLAIN", "guest", "guest", peer_loopback=False)
    with pytest.raises(BrokerError):
        db.login("PLAIN", "nobody", "guest", peer_loopback=True)


def test_permissions_are_unanchored_and_empty_means_none() -> None:
    db = AuthDB()
    db.add_user("u", password="p")
    db.set_permissions("u", "/", configure="", write="^logs", read="q")
    db.check("u", "/", Access.WRITE, "exchange", "logs.x")
    db.check("u", "/", Access.READ, "queue", "myq1")  # unanchored search
    with pytest.raises(BrokerError) as exc:
        db.check("u", "/", Access.CONFIGURE, "queue", "anything")
    assert exc.value.condition is Condition.ACCESS_REFUSED
    with pytest.raises(BrokerError) as exc:
        db.check("u", "/", Access.WRITE, "exchange", "")
    assert exc.value.explanation == (
        "write access to exchange 'amq.default' in vhost '/' refused for user 'u'"
    )
    with pytest.raises(BrokerError) as exc:
        db.check_vhost_access("u", "other")
    assert exc.value.condition is Condition.NOT_ALLOWED
    gen = db.generation
    db.clear_permissions("u", "/")
    assert db.generation > gen
