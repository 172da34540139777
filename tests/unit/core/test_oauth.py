"""OAuth 2 tokens (`core.oauth`) and the backend chain and grants of `AuthDB`: RabbitMQ's
oauth2 backend semantics, with the clock as an argument."""

from __future__ import annotations

import time

import pytest

from ringmq.core.auth import Access, AuthDB, Identity
from ringmq.core.errors import BrokerError
from ringmq.core.exchange import Exchange
from ringmq.core.oauth import OAuth2Settings, TokenBackend
from ringmq.core.routing import ExchangeType
from ringmq.core.session import Conn
from tests.idp import SigningKey

NOW_MS = int(time.time() * 1000)
"""Tokens are minted around now; tests judge them at this fixed time, whatever the clock."""


@pytest.fixture(scope="module")
def key() -> SigningKey:
    return SigningKey("k1")


def _backend(key: SigningKey, **settings: object) -> TokenBackend:
    return TokenBackend(
        OAuth2Settings("rabbitmq", **settings),  # type: ignore[arg-type]
        {key.kid: key.private.public_key()},
    )


def test_scopes_become_permissions(key: SigningKey) -> None:
    scope = (
        "rabbitmq.read:%2F/q-* rabbitmq.write:prod/x.* rabbitmq.configure:*/tmp-*/rk "
        "rabbitmq.tag:administrator openid other.read:*/*"
    )
    g = _backend(key).verify(key.token(sub="svc", scope=scope), NOW_MS)
    assert g.user == "svc"
    assert g.tags == ("administrator",)
    assert g.allows("read", "/", "q-1")
    assert not g.allows("read", "/", "p-1")
    assert not g.allows("write", "/", "q-1")
    assert g.allows("write", "prod", "x.orders")
    assert not g.allows("write", "dev", "x.orders")
    assert g.allows("configure", "any", "tmp-1")  # a routing-key part is accepted
    assert all(g.allows_vhost(v) for v in ("/", "prod", "dev"))
    assert g.expires_ms is not None
    assert g.expires_ms > NOW_MS


def test_routing_key_scopes_check_topic_exchanges(key: SigningKey) -> None:
    # RabbitMQ's rabbit_oauth2_scope:topic_access: only three-part scopes allow routing keys
    scope = (
        "rabbitmq.write:*/*/{sub}.* rabbitmq.read:%2F/amq.topic/{vhost}.* "
        "rabbitmq.write:*/*/{username}-{team}-{nothing} rabbitmq.read:*/*"
    )
    g = _backend(key).verify(key.token(sub="dev1", scope=scope, team="blue"), NOW_MS)
    assert g.checks_topic("/", "amq.topic")
    assert g.allows_topic("write", "/", "amq.topic", "dev1.temp", None)
    assert not g.allows_topic("write", "/", "amq.topic", "dev2.temp", None)
    assert g.allows_topic("write", "/", "amq.topic", "dev1-blue-nothing", None)
    assert g.allows_topic("read", "/", "amq.topic", "/.x", None)  # {vhost} is "/"
    assert not g.allows_topic("read", "/", "events", "/.x", None)
    assert not g.allows_topic("read", "/", "amq.topic", "dev1.temp", None)  # two-part: no keys
    assert g.allows("read", "/", "anything")  # the two-part scope still grants resources
    # through AuthDB's one topic check, with RabbitMQ's refusal
    auth = AuthDB()
    topic, direct = Exchange("amq.topic", ExchangeType.TOPIC), Exchange("d", ExchangeType.DIRECT)
    assert auth.check_topic("dev1", "/", topic, "write", "dev1.x", grant=g)
    assert not auth.check_topic("dev1", "/", direct, "write", "other", grant=g)  # not checked
    with pytest.raises(BrokerError) as refused:
        auth.check_topic("dev1", "/", topic, "write", "other.x", grant=g)
    assert refused.value.explanation == (
        "write access to topic 'other.x' in exchange 'amq.topic' in vhost '/' "
        "refused for user 'dev1'"
    )
    # a star in a claim's value is no wildcard
    g = _backend(key).verify(key.token(sub="*", scope="rabbitmq.write:*/*/{sub}"), NOW_MS)
    assert g.allows_topic("write", "/", "t", "*", None)
    assert not g.allows_topic("write", "/", "t", "x", None)


def test_scope_list_prefix_and_additional_scopes_key(key: SigningKey) -> None:
    backend = _backend(key, scope_prefix="mq/", additional_scopes_key="realm_access.roles")
    token = key.token(
        scope=["mq/read:*/a"], realm_access={"roles": ["mq/write:*/b", "rabbitmq.read:*/c"]}
    )
    g = backend.verify(token, NOW_MS)
    assert g.allows("read", "/", "a")
    assert g.allows("write", "/", "b")
    assert not g.allows("read", "/", "c")  # not the configured prefix


def test_username_claims_in_order(key: SigningKey) -> None:
    backend = _backend(key, preferred_username_claims=("user_name", "client_id"))
    assert backend.verify(key.token(client_id="cid"), NOW_MS).user == "cid"
    assert backend.verify(key.token(user_name="u", client_id="cid"), NOW_MS).user == "u"
    with pytest.raises(BrokerError, match="none of user_name, client_id"):
        backend.verify(key.token(), NOW_MS)


@pytest.mark.parametrize(
    ("claims", "why"),
    [
        ({"exp_in_s": -3600}, "expired"),
        ({"nbf": NOW_MS // 1000 + 3600}, "not valid yet"),
        ({"aud": ["a", "b"]}, "audience"),
        ({"kid": "k9"}, "no signing key 'k9'"),
    ],
)
def test_refusals(key: SigningKey, claims: dict[str, object], why: str) -> None:
    backend = _backend(key)
    with pytest.raises(BrokerError, match=why):
        backend.verify(key.token(**claims), NOW_MS)  # type: ignore[arg-type]


def test_expiry_is_judged_at_now_ms_not_by_the_clock(key: SigningKey) -> None:
    token = key.token(exp=NOW_MS // 1000 + 60)
    backend = _backend(key)
    assert backend.verify(token, NOW_MS).user == "app"
    with pytest.raises(BrokerError, match="expired"):
        backend.verify(token, NOW_MS + 60_000)


def test_audience_unchecked_when_verify_aud_is_off(key: SigningKey) -> None:
    assert _backend(key, verify_aud=False).verify(key.token(aud="x"), NOW_MS).user == "app"


def _wants_keys(backend: TokenBackend) -> bool:
    return backend.wants_keys


def test_forged_signature_and_unknown_kid_asks_for_keys(key: SigningKey) -> None:
    backend = _backend(key)
    forger = SigningKey("k1")
    with pytest.raises(BrokerError, match="signature"):
        backend.verify(forger.token(), NOW_MS)
    assert not _wants_keys(backend)
    with pytest.raises(BrokerError, match="no signing key"):
        backend.verify(key.token(kid="new"), NOW_MS)
    assert _wants_keys(backend)
    backend.set_jwks_keys({"new": key.private.public_key()})
    assert not _wants_keys(backend)
    assert backend.verify(key.token(kid="new"), NOW_MS).user == "app"


def test_the_backend_chain_grants_and_expiry(key: SigningKey) -> None:
    auth = AuthDB()
    auth.add_user("guest", password="guest")
    auth.set_permissions("guest", "/")
    token = key.token(sub="svc", scope="rabbitmq.read:*/q", exp=NOW_MS // 1000 + 10)
    with pytest.raises(BrokerError, match="Login was refused"):
        auth.login_any("PLAIN", "", token, True, NOW_MS)  # internal only
    auth.backends = ("internal", "oauth2")
    auth.tokens = _backend(key)
    assert auth.login_any("PLAIN", "guest", "guest", True, NOW_MS) == Identity("guest")
    who = auth.login_any("PLAIN", "", token, True, NOW_MS)
    assert who.user == "svc"
    grant = who.grant
    assert grant is not None
    auth.check_vhost_access("svc", "/", grant)
    auth.check("svc", "/", Access.READ, "queue", "q", grant)
    with pytest.raises(BrokerError, match="write access to queue 'q'"):
        auth.check("svc", "/", Access.WRITE, "queue", "q", grant)
    with pytest.raises(BrokerError):  # the grant is the connection's: none, no table entry
        auth.check_vhost_access("svc", "/")
    with pytest.raises(BrokerError, match="expired"):  # the last backend's reason
        auth.login_any("PLAIN", "", key.token(exp_in_s=-3600), True, NOW_MS)


def test_grants_belong_to_connections(key: SigningKey) -> None:
    auth = AuthDB()
    auth.add_user("guest", password="guest")
    auth.backends = ("internal", "oauth2")
    auth.tokens = _backend(key)
    exp = NOW_MS // 1000 + 10
    late = NOW_MS // 1000 + 1000
    reader = auth.login_any(
        "PLAIN", "", key.token(sub="svc", scope="rabbitmq.read:*/*", exp=late), True, NOW_MS
    )
    writer = auth.login_any(
        "PLAIN", "", key.token(sub="svc", scope="rabbitmq.write:*/*", exp=exp), True, NOW_MS
    )
    c1 = Conn(1, "svc", "/", grant=reader.grant)
    c2 = Conn(2, "svc", "/", grant=writer.grant)
    c3 = Conn(3, "guest", "/")
    for c in (c1, c2, c3):
        auth.watch(c.conn_id, c.grant)
    with pytest.raises(BrokerError, match="write access"):
        auth.check("svc", "/", Access.WRITE, "exchange", "x", c1.grant)
    auth.check("svc", "/", Access.WRITE, "exchange", "x", c2.grant)
    assert auth.next_expiry_ms() == exp * 1000  # c2's, the earliest
    # update-secret on c2: c2's grant and expiry alone change
    fresh = key.token(sub="svc", scope="rabbitmq.read:*/*", exp=NOW_MS // 1000 + 300)
    c2.regrant(auth.update_secret(2, "svc", c2.grant, fresh, NOW_MS))
    assert c1.grant is reader.grant
    assert auth.next_expiry_ms() == (NOW_MS // 1000 + 300) * 1000
    with pytest.raises(BrokerError, match="write access"):
        auth.check("svc", "/", Access.WRITE, "exchange", "x", c2.grant)
    with pytest.raises(BrokerError, match="names user 'eve'"):
        auth.update_secret(2, "svc", c2.grant, key.token(sub="eve"), NOW_MS)
    with pytest.raises(BrokerError, match="no token"):
        auth.update_secret(3, "guest", c3.grant, key.token(sub="guest"), NOW_MS)
    assert auth.expire_grants(NOW_MS + 400_000) == [2]
    assert auth.next_expiry_ms() == late * 1000
    auth.watch(1, None)  # c1 closed: nothing left to watch
    assert auth.next_expiry_ms() is None
    assert auth.expire_grants(NOW_MS + 36_000_000) == []
