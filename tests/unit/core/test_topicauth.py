"""Topic authorisation rules (`core.topicauth`), as RabbitMQ's internal backend applies them."""

from __future__ import annotations

import pytest

from ringmq.core.auth import AuthDB
from ringmq.core.errors import BrokerError, Condition
from ringmq.core.topicauth import TopicPermissions, check_topic

VARS = {"username": "alice", "vhost": "prod", "client_id": "dev.1"}


def test_no_permission_allows_everything_and_empty_matches_only_empty() -> None:
    t = TopicPermissions()
    assert t.rule("alice", "prod", "amq.topic") is None
    t.set("alice", "prod", "amq.topic", "", "^a")
    rule = t.rule("alice", "prod", "amq.topic")
    assert rule is not None
    assert rule.allows("write", "", VARS)
    assert not rule.allows("write", "x", VARS)
    assert rule.allows("read", "ab", VARS)  # searched, not anchored at the end
    assert not rule.allows("read", "ba", VARS)
    assert t.rule("alice", "prod", "other") is None
    assert t.rule("bob", "prod", "amq.topic") is None


def test_variables_are_substituted_before_compiling() -> None:
    t = TopicPermissions()
    t.set("alice", "prod", "x", "^{username}\\.{vhost}\\.{client_id}$", "{nope}")
    rule = t.rule("alice", "prod", "x")
    assert rule is not None
    assert rule.allows("write", "alice.prod.dev.1", VARS)
    assert not rule.allows("write", "bob.prod.dev.1", VARS)
    assert not rule.allows("write", "alice.prod.dev.1", {"username": "alice", "vhost": "qa"})
    with pytest.raises(BrokerError) as exc:
        check_topic(rule, "write", "bob.x", VARS)
    assert exc.value.condition is Condition.ACCESS_REFUSED
    assert exc.value.explanation == (
        "write access to topic 'bob.x' in exchange 'x' in vhost 'prod' refused for user 'alice'"
    )


def test_bad_patterns_refused_and_clearing() -> None:
    t = TopicPermissions()
    with pytest.raises(ValueError, match="invalid write regex"):
        t.set("alice", "prod", "x", "(", ".*")
    t.set("alice", "prod", "x", ".*", ".*")
    t.set("alice", "prod", "y", ".*", ".*")
    t.set("alice", "qa", "x", ".*", ".*")
    assert len(t) == 3
    assert t.clear("alice", "prod", "x")
    assert not t.clear("alice", "prod", "x")
    t.forget_vhost("qa")
    assert [p.exchange for p in t] == ["y"]
    t.forget_user("alice")
    assert len(t) == 0


def test_authdb_bumps_generation_and_skips_other_backends() -> None:
    auth = AuthDB()
    auth.add_user("alice", password="pw")
    gen = auth.generation
    auth.set_topic_permission("alice", "/", "amq.topic", "^a", "^a")
    assert auth.generation > gen
    assert auth.topic_rule("alice", "/", "amq.topic") is not None
    auth.delete_user("alice")
    assert auth.topic_rule("alice", "/", "amq.topic") is None
