"""RabbitMQ's LDAP authorisation queries, and the grant an LDAP login resolves them into.

Theory of operation: RabbitMQ's LDAP backend (`rabbitmq_auth_backend_ldap`) decides vhost
access, resource permissions, topic access and tags with queries: `constant`, `exists` (an
entry with this DN), `in_group` (the user's DN is a member of this group), `match` and `equals`
(on strings), `and`, `or`, `not`, and `for` (one query per permission or per resource kind).
Their strings take variables: `${username}`, `${user_dn}`, `${vhost}`, `${permission}`
(configure, write, read), `${resource}` (queue, exchange; topic in the topic query) and
`${name}` (the resource's name: the exchange's in the topic query); the topic query
(`topic_access_query`, asked for publishes and bindings on topic exchanges, as RabbitMQ's
`check_topic_access`) also `${routing_key}` and, for MQTT, `${client_id}`.

The core checks permissions synchronously and never does I/O, so ringmq asks LDAP once, at
login (in a worker thread of the server, `server/ldapauth.py`): `resolve` evaluates every
`exists` and `in_group` for the user, each vhost and each permission through a lookup callback,
and leaves a residual query made of pure nodes only; `evaluate` answers each later check from
that residual and the resource's kind and name (or the exchange and routing key). So LDAP nodes
may use `${username}`, `${user_dn}`, `${vhost}` and `${permission}` but not `${resource}`,
`${name}` or `${routing_key}` (`parse_query` refuses them there). The topic query is resolved
for every vhost and for write and read only when one is configured: without it (RabbitMQ's
default, `{constant, true}`) the grant checks no routing key, and the sessions cache that.
The result is an `LdapGrant`: what the connection that logged in may do for as long as it
lives (RabbitMQ's `rabbitmq_auth_backend_cache` keeps answers for a while too; a
vhost created after the login is not in it until the user logs in again).

Queries are written as TOML inline tables (`docs/security.md`): `{ constant = true }`,
`{ exists = "ou=${vhost},ou=vhosts,dc=example,dc=com" }`,
`{ in_group = "cn=admins,ou=groups,dc=example,dc=com", attribute = "member" }`,
`{ match = ["${name}", "^user-${username}-"] }`, `{ equals = ["${vhost}", "dev"] }`,
`{ and = [...] }`, `{ or = [...] }`, `{ not = {...} }`,
`{ for = [{ permission = "configure", query = {...} }, { resource = "queue", query = {...} }] }`.

Pure: no I/O (the lookups are the caller's callback).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

PERMISSIONS: Final = ("configure", "write", "read")
TOPIC_PERMISSIONS: Final = ("write", "read")
"""What the topic query is asked for: a publish (write), a binding (read)."""
RESOURCES: Final = ("queue", "exchange")
_LDAP_VARS: Final = frozenset({"username", "user_dn", "vhost", "permission"})
_VAR = re.compile(r"\$\{(\w+)\}")


@dataclass(frozen=True, slots=True)
class Query:
    """One query node: `op` and its arguments (see the module docstring)."""

    op: str
    args: tuple[Any, ...]


TRUE: Final = Query("constant", (True,))
FALSE: Final = Query("constant", (False,))

Lookup = Callable[[str, str, str], bool]
"""`lookup(op, dn, attribute) -> bool` for "exists" and "in_group" (the server's LDAP call)."""


def parse_query(obj: object, where: str = "query") -> Query:
    """A query from its TOML form.

    Raises:
        ValueError: an unknown form, or an LDAP node using `${resource}` or `${name}`.
    """
    if not isinstance(obj, Mapping) or not obj:
        raise ValueError(f"{where}: a query is a table such as {{ constant = true }}")
    keys = set(obj)
    if "constant" in keys and keys == {"constant"} and isinstance(obj["constant"], bool):
        return TRUE if obj["constant"] else FALSE
    if keys == {"exists"} and isinstance(obj["exists"], str):
        return Query("exists", (_ldap_template(obj["exists"], where),))
    if "in_group" in keys and keys <= {"in_group", "attribute"}:
        attribute = obj.get("attribute", "member")
        if isinstance(obj["in_group"], str) and isinstance(attribute, str):
            return Query("in_group", (_ldap_template(obj["in_group"], where), attribute))
    for op in ("match", "equals"):
        if keys == {op}:
            pair = obj[op]
            if isinstance(pair, list) and len(pair) == 2 and all(isinstance(s, str) for s in pair):
                if op == "match":
                    re.compile(_VAR.sub("", pair[1]))  # a bad regex fails at start-up
                return Query(op, (pair[0], pair[1]))
    for op in ("and", "or"):
        if keys == {op} and isinstance(obj[op], list):
            items = tuple(parse_query(q, f"{where}.{op}[{i}]") for i, q in enumerate(obj[op]))
            return Query(op, items)
    if keys == {"not"}:
        return Query("not", (parse_query(obj["not"], f"{where}.not"),))
    if keys == {"for"} and isinstance(obj["for"], list):
        return Query(
            "for", tuple(_for_item(x, f"{where}.for[{i}]") for i, x in enumerate(obj["for"]))
        )
    raise ValueError(f"{where}: not a query: {dict(obj)!r}")


def _for_item(obj: object, where: str) -> tuple[str, str, Query]:
    if isinstance(obj, Mapping) and set(obj) in ({"permission", "query"}, {"resource", "query"}):
        key = "permission" if "permission" in obj else "resource"
        value = obj[key]
        allowed = PERMISSIONS if key == "permission" else (*RESOURCES, "topic")
        if value in allowed:
            return key, str(value), parse_query(obj["query"], f"{where}.query")
    raise ValueError(
        f"{where}: {{ permission = configure|write|read, query = ... }} or "
        "{ resource = queue|exchange|topic, query = ... }"
    )


def _ldap_template(dn: str, where: str) -> str:
    bad = set(_VAR.findall(dn)) - _LDAP_VARS
    if bad:
        raise ValueError(
            f"{where}: {dn!r}: ringmq asks LDAP at login, where only "
            "${username}, ${user_dn}, ${vhost} and ${permission} are known"
        )
    return dn


def fill(template: str, env: Mapping[str, str], escape: Callable[[str], str] | None = None) -> str:
    """`template` with its `${var}`s replaced (unknown ones by ""), each value `escape`d."""

    def value(m: re.Match[str]) -> str:
        v = env.get(m.group(1), "")
        return escape(v) if escape is not None else v

    return _VAR.sub(value, template)


def resolve(q: Query, env: Mapping[str, str], lookup: Lookup) -> Query:
    """`q` with every LDAP node answered (`lookup`) and `for permission` chosen by
    `env["permission"]` (when set): a residual query of pure nodes."""
    match q.op:
        case "exists":
            return TRUE if lookup("exists", fill(q.args[0], env), "") else FALSE
        case "in_group":
            return TRUE if lookup("in_group", fill(q.args[0], env), q.args[1]) else FALSE
        case "and" | "or":
            return Query(q.op, tuple(resolve(x, env, lookup) for x in q.args))
        case "not":
            return Query("not", (resolve(q.args[0], env, lookup),))
        case "for":
            items = []
            for key, value, sub in q.args:
                if key == "permission" and "permission" in env:
                    if value == env["permission"]:
                        return resolve(sub, env, lookup)
                    continue
                items.append((key, value, resolve(sub, env, lookup)))
            return Query("for", tuple(items)) if items else FALSE
        case _:
            return q


def evaluate(q: Query, env: Mapping[str, str]) -> bool:
    """The answer of a residual query (`resolve`) for `env` (resource, name, ...)."""
    match q.op:
        case "constant":
            return bool(q.args[0])
        case "match":
            return re.search(fill(q.args[1], env, re.escape), fill(q.args[0], env)) is not None
        case "equals":
            return fill(q.args[0], env) == fill(q.args[1], env)
        case "and":
            return all(evaluate(x, env) for x in q.args)
        case "or":
            return any(evaluate(x, env) for x in q.args)
        case "not":
            return not evaluate(q.args[0], env)
        case "for":
            for key, value, sub in q.args:
                if env.get(key) == value:
                    return evaluate(sub, env)
            return False
        case _:
            raise AssertionError(f"unresolved LDAP query node {q.op!r}")


@dataclass(frozen=True, slots=True)
class LdapGrant:
    """What an LDAP login resolved (see the module docstring).

    Attributes:
        user: the user name the client gave.
        user_dn: its DN (`user_dn_pattern`).
        tags: the tags whose query held.
        resources: per (vhost, permission), the residual resource query, for the vhosts the
            vhost query let the user in.
        topics: per (vhost, "write" or "read"), the residual topic query, for those vhosts;
            None without a `topic_access_query` (every routing key allowed, unchecked).
    """

    user: str
    user_dn: str
    tags: tuple[str, ...]
    resources: Mapping[tuple[str, str], Query]
    expires_ms: int | None = None
    topics: Mapping[tuple[str, str], Query] | None = None

    def allows_vhost(self, vhost: str) -> bool:
        return any(v == vhost for v, _ in self.resources)

    def allows(self, access: str, vhost: str, name: str, kind: str = "queue") -> bool:
        q = self.resources.get((vhost, access))
        env = {
            "username": self.user,
            "user_dn": self.user_dn,
            "vhost": vhost,
            "permission": access,
            "resource": kind,
            "name": name,
        }
        return q is not None and evaluate(q, env)

    def checks_topic(self, vhost: str, exchange: str) -> bool:
        """Routing keys are checked when a `topic_access_query` is configured (without one,
        RabbitMQ's default allows them all)."""
        return self.topics is not None

    def allows_topic(
        self, access: str, vhost: str, exchange: str, routing_key: str, client_id: str | None
    ) -> bool:
        """The topic query's answer for `routing_key` on `exchange` (RabbitMQ's arguments:
        `resource` is "topic", `name` the exchange; MQTT's `client_id` too)."""
        q = None if self.topics is None else self.topics.get((vhost, access))
        if q is None:
            return False
        env = {
            "username": self.user,
            "user_dn": self.user_dn,
            "vhost": vhost,
            "permission": access,
            "resource": "topic",
            "name": exchange,
            "routing_key": routing_key,
        }
        if client_id is not None:
            env["client_id"] = client_id
        return evaluate(q, env)


def ldap_grant(
    user: str,
    user_dn: str,
    vhosts: list[str],
    queries: LdapQueries,
    lookup: Lookup,
) -> LdapGrant:
    """Resolve the configured queries for a user who bound successfully (runs where LDAP
    may be asked: the server's worker thread)."""
    base = {"username": user, "user_dn": user_dn}
    tags = tuple(tag for tag, q in queries.tags if evaluate(resolve(q, base, lookup), base))
    resources: dict[tuple[str, str], Query] = {}
    # no topic query (RabbitMQ's default, constant true): no routing key is checked at all
    topics: dict[tuple[str, str], Query] | None = None if queries.topic_access == TRUE else {}
    for vhost in vhosts:
        env = {**base, "vhost": vhost}
        if not evaluate(resolve(queries.vhost_access, env, lookup), env):
            continue
        for permission in PERMISSIONS:
            penv = {**env, "permission": permission}
            resources[(vhost, permission)] = resolve(queries.resource_access, penv, lookup)
        if topics is not None:
            for permission in TOPIC_PERMISSIONS:
                tenv = {**env, "permission": permission, "resource": "topic"}
                topics[(vhost, permission)] = resolve(queries.topic_access, tenv, lookup)
    return LdapGrant(user, user_dn, tags, resources, topics=topics)


@dataclass(frozen=True, slots=True)
class LdapQueries:
    """The query settings (RabbitMQ's defaults: every vhost, resource and routing key, no
    tags)."""

    vhost_access: Query = TRUE
    resource_access: Query = TRUE
    tags: tuple[tuple[str, Query], ...] = ()
    topic_access: Query = TRUE


__all__ = [
    "FALSE",
    "PERMISSIONS",
    "TOPIC_PERMISSIONS",
    "TRUE",
    "LdapGrant",
    "LdapQueries",
    "Lookup",
    "Query",
    "evaluate",
    "fill",
    "ldap_grant",
    "parse_query",
    "resolve",
]
