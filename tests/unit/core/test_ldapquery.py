"""RabbitMQ's LDAP queries (`core.ldapquery`): parsing their TOML form, resolving the LDAP
nodes once at login (through a lookup callback), and answering checks from the residue."""

from __future__ import annotations

import pytest

from ringmq.core.ldapquery import (
    FALSE,
    TRUE,
    LdapQueries,
    evaluate,
    ldap_grant,
    parse_query,
    resolve,
)

ADMINS = "cn=admins,ou=groups,dc=ex"


def _directory(
    members: dict[str, set[str]], entries: set[str]
) -> tuple[list[tuple[str, str]], object]:
    asked: list[tuple[str, str]] = []

    def lookup(op: str, dn: str, attribute: str) -> bool:
        asked.append((op, dn))
        if op == "exists":
            return dn in entries
        return "cn=alice,ou=People,dc=ex" in members.get(dn, set()) and attribute == "member"

    return asked, lookup


def test_parse_forms() -> None:
    assert parse_query({"constant": True}) is TRUE
    assert parse_query({"constant": False}) is FALSE
    q = parse_query({"in_group": ADMINS})
    assert (q.op, q.args) == ("in_group", (ADMINS, "member"))
    q = parse_query(
        {
            "for": [
                {"permission": "read", "query": {"constant": True}},
                {"resource": "queue", "query": {"not": {"constant": True}}},
            ]
        }
    )
    assert q.op == "for"
    assert len(q.args) == 2


@pytest.mark.parametrize(
    ("obj", "needle"),
    [
        ({}, "a query is a table"),
        ({"constant": "yes"}, "not a query"),
        ({"exists": "cn=${name},dc=ex"}, "only"),  # ${name} is unknown at login
        ({"in_group": "cn=${resource}"}, "only"),
        ({"match": ["${name}"]}, "not a query"),
        ({"for": [{"permission": "delete", "query": {"constant": True}}]}, "configure"),
        ({"and": [{"constant": True}, {"nope": 1}]}, r"and\[1\]"),
    ],
)
def test_parse_errors(obj: object, needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        parse_query(obj)


def test_resolve_asks_ldap_once_and_leaves_pure_nodes() -> None:
    asked, lookup = _directory({ADMINS: {"cn=alice,ou=People,dc=ex"}}, {"ou=dev,ou=vhosts,dc=ex"})
    q = parse_query(
        {
            "or": [
                {"in_group": ADMINS},
                {
                    "and": [
                        {"exists": "ou=${vhost},ou=vhosts,dc=ex"},
                        {"match": ["${name}", "^${username}-"]},
                    ]
                },
            ]
        }
    )
    env = {"username": "alice", "user_dn": "cn=alice,ou=People,dc=ex", "vhost": "dev"}
    residue = resolve(q, env, lookup)  # type: ignore[arg-type]
    assert asked == [("in_group", ADMINS), ("exists", "ou=dev,ou=vhosts,dc=ex")]
    assert evaluate(residue, {**env, "name": "anything"})


def test_match_escapes_the_variables_it_fills_in() -> None:
    q = parse_query({"match": ["${name}", "^${username}-"]})
    assert evaluate(q, {"username": "a.b", "name": "a.b-q"})
    assert not evaluate(q, {"username": "a.b", "name": "axb-q"})  # "." is literal


def test_the_grant_of_a_login() -> None:
    _, lookup = _directory({ADMINS: {"cn=alice,ou=People,dc=ex"}}, set())
    queries = LdapQueries(
        vhost_access=parse_query({"not": {"equals": ["${vhost}", "secret"]}}),
        resource_access=parse_query(
            {
                "for": [
                    {"permission": "configure", "query": {"in_group": ADMINS}},
                    {
                        "permission": "write",
                        "query": {"for": [{"resource": "exchange", "query": {"constant": True}}]},
                    },
                    {"permission": "read", "query": {"match": ["${name}", "^pub\\."]}},
                ]
            }
        ),
        tags=(("administrator", parse_query({"in_group": ADMINS})), ("monitoring", FALSE)),
    )
    g = ldap_grant("alice", "cn=alice,ou=People,dc=ex", ["/", "secret"], queries, lookup)  # type: ignore[arg-type]
    assert g.tags == ("administrator",)
    assert g.allows_vhost("/")
    assert not g.allows_vhost("secret")
    assert g.allows("configure", "/", "anything")
    assert g.allows("write", "/", "x", "exchange")
    assert not g.allows("write", "/", "x", "queue")
    assert g.allows("read", "/", "pub.news")
    assert not g.allows("read", "/", "private")
    assert not g.allows("read", "secret", "pub.news")


def test_the_topic_query() -> None:
    # RabbitMQ's topic_access_query: ${routing_key}, ${name} (the exchange), ${permission},
    # ${client_id}; LDAP nodes answered at login for each vhost and for write and read
    asked, lookup = _directory({ADMINS: {"cn=alice,ou=People,dc=ex"}}, set())
    topic = parse_query(
        {
            "for": [
                {
                    "permission": "write",
                    "query": {
                        "or": [
                            {"in_group": "cn=${vhost}-admins,ou=groups,dc=ex"},
                            {"match": ["${routing_key}", "^${username}\\.${client_id}\\."]},
                        ]
                    },
                },
                {
                    "permission": "read",
                    "query": {
                        "and": [
                            {"equals": ["${name}", "amq.topic"]},
                            {"for": [{"resource": "topic", "query": {"constant": True}}]},
                        ]
                    },
                },
            ]
        }
    )
    queries = LdapQueries(topic_access=topic)
    g = ldap_grant("alice", "cn=alice,ou=People,dc=ex", ["/"], queries, lookup)  # type: ignore[arg-type]
    assert ("in_group", "cn=/-admins,ou=groups,dc=ex") in asked
    assert g.checks_topic("/", "amq.topic")
    assert g.allows_topic("write", "/", "amq.topic", "alice.dev1.t", "dev1")
    assert not g.allows_topic("write", "/", "amq.topic", "alice.dev2.t", "dev1")
    assert not g.allows_topic("write", "/", "amq.topic", "alice.dev1.t", None)
    assert g.allows_topic("read", "/", "amq.topic", "anything.#", None)
    assert not g.allows_topic("read", "/", "events", "anything.#", None)
    assert not g.allows_topic("read", "other", "amq.topic", "x", None)  # no such vhost
    # no topic query: RabbitMQ's default allows, and nothing is checked (sessions cache that)
    assert not ldap_grant("alice", "cn=alice", ["/"], LdapQueries(), lookup).checks_topic(  # type: ignore[arg-type]
        "/", "amq.topic"
    )
    with pytest.raises(ValueError, match="only"):  # the routing key is not known at login
        parse_query({"in_group": "cn=${routing_key},dc=ex"})
