"""Users, password hashes, vhost access and configure/write/read permissions.

Theory of operation: `AuthDB` owns the user table and the per-(user, vhost) permission table.
Passwords are stored as RabbitMQ stores them (`rabbit_password_hashing_sha256`): base64 of a
4-byte salt followed by SHA-256(salt + UTF-8 password), so hashes move between the two brokers.
Permission patterns are regular expressions searched (not anchored), as RabbitMQ does; an empty
pattern grants nothing. Compiled patterns are cached per permission entry.

Beside the table (additive; the table's rules are unchanged): `login_external` logs in by
client certificate (`core.certlogin`); `login_any` tries the `backends` in order, as RabbitMQ's
`auth_backends` ("internal": this table; "oauth2": `core.oauth`; "ldap" is asked off the loop by
the server and answers with its own grant). A login by a backend other than the table gives an
`ExternalGrant` that belongs to the connection that logged in (`Identity.grant`, then
`Conn.grant`; the management API keeps one per request): it answers that connection's vhost,
resource and topic checks instead of the permission and topic tables, until its token expires
(`expire_grants`, from the broker's tick, names the connections to close) or an update-secret
replaces it on that connection alone (`update_secret`). Two connections of one user with two
tokens thus keep two sets of permissions, as RabbitMQ's per-connection `auth_user`.

Checks raise `BrokerError` with RabbitMQ's conditions and texts: login failures are
ACCESS_REFUSED (0-9-1 code 403), vhost access NOT_ALLOWED (530), resource permissions
ACCESS_REFUSED.
This module is pure: no I/O, no clock.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Protocol

from ringmq.core.certlogin import CertLogin, cert_user
from ringmq.core.errors import BrokerError, Condition
from ringmq.core.oauth import Grant, TokenBackend
from ringmq.core.routing import ExchangeType
from ringmq.core.topicauth import TopicPermission, TopicPermissions, check_topic, topic_refused

if TYPE_CHECKING:
    from ringmq.core.exchange import Exchange

_SALT_BYTES = 4


def hash_password(password: str, salt: bytes | None = None) -> str:
    """Hash a password the way RabbitMQ's `rabbit_password_hashing_sha256` does.

    Args:
        password: the clear-text password.
        salt: 4 salt bytes; random when omitted.

    Returns:
        base64(salt + sha256(salt + password)).
    """
    if salt is None:
        salt = secrets.token_bytes(_SALT_BYTES)
    digest = hashlib.sha256(salt + password.encode("utf-8")).digest()
    return base64.b64encode(salt + digest).decode("ascii")


def verify_password(password: str, password_hash: str) -> bool:
    """True when `password` matches a hash produced by `hash_password` (constant time)."""
    try:
        raw = base64.b64decode(password_hash.encode("ascii"), validate=True)
    except ValueError:
        return False
    if len(raw) != _SALT_BYTES + hashlib.sha256().digest_size:
        return False
    salt, want = raw[:_SALT_BYTES], raw[_SALT_BYTES:]
    got = hashlib.sha256(salt + password.encode("utf-8")).digest()
    return hmac.compare_digest(got, want)


class Access(Enum):
    """The three RabbitMQ permission kinds."""

    CONFIGURE = "configure"
    WRITE = "write"
    READ = "read"


@dataclass(slots=True)
class User:
    """A user record; `password_hash` None means password login is impossible."""

    name: str
    password_hash: str | None
    tags: tuple[str, ...] = ()
    loopback_only: bool = False


@dataclass(slots=True)
class Permission:
    """Regexes of one user in one vhost, compiled once."""

    configure: str
    write: str
    read: str
    _compiled: dict[Access, re.Pattern[str] | None] = field(default_factory=dict)

    def allows(self, access: Access, name: str) -> bool:
        """True when `name` matches the regex for `access` (empty regex: never)."""
        try:
            pattern = self._compiled[access]
        except KeyError:
            source = getattr(self, access.value)
            pattern = re.compile(source) if source else None
            self._compiled[access] = pattern
        return pattern is not None and pattern.search(name) is not None


class ExternalGrant(Protocol):
    """What a backend other than the user table (OAuth 2 token, LDAP) decided at a login: it
    answers the checks of the connection (or management request) that logged in, instead of
    the permission and topic tables."""

    @property
    def user(self) -> str: ...
    @property
    def tags(self) -> tuple[str, ...]: ...
    @property
    def expires_ms(self) -> int | None: ...
    def allows_vhost(self, vhost: str) -> bool: ...
    def allows(self, access: str, vhost: str, name: str, kind: str = "queue") -> bool: ...
    def checks_topic(self, vhost: str, exchange: str) -> bool:
        """Whether routing keys on topic exchange `exchange` are checked at all (False: all
        allowed, and callers may cache that)."""
        ...

    def allows_topic(
        self, access: str, vhost: str, exchange: str, routing_key: str, client_id: str | None
    ) -> bool:
        """Whether `routing_key` may be published ("write") or bound ("read") on `exchange`."""
        ...


@dataclass(frozen=True, slots=True)
class Identity:
    """Who a login let in: the user name and, when a backend other than the user table
    decided (a token, LDAP), its grant, which belongs to the connection that logged in."""

    user: str
    grant: ExternalGrant | None = None


class AuthDB:
    """User and permission tables with RabbitMQ's checks."""

    def __init__(self) -> None:
        self.users: dict[str, User] = {}
        self.permissions: dict[tuple[str, str], Permission] = {}
        self.generation = 0
        """Bumped on every user or permission change (callers may cache successful checks)."""
        self.cert_login: CertLogin | None = None
        """How a client certificate names its user; None: certificate logins (SASL EXTERNAL)
        are off (`core.certlogin`)."""
        self.backends: tuple[str, ...] = ("internal",)
        """The password-checking backends, tried in order (RabbitMQ's `auth_backends`):
        "internal" (this user table), "oauth2" (`tokens`)."""
        self.tokens: TokenBackend | None = None
        """The OAuth 2 token check (`core.oauth`); None: no "oauth2" backend."""
        self._expiring: dict[int, int] = {}
        """Connections whose grant expires (a token's `exp`), by id: when."""
        self._next_expiry: int | None = None
        self._expiry_stale = False
        self.topics = TopicPermissions()
        """RabbitMQ's topic permissions (`core.topicauth`): change them through
        `set_topic_permission` / `clear_topic_permission`, which bump `generation`."""

    # -- administration -------------------------------------------------------------------
    def add_user(
        self,
        name: str,
        *,
        password: str | None = None,
        password_hash: str | None = None,
        tags: tuple[str, ...] = (),
        loopback_only: bool = False,
    ) -> User:
        """Create or replace a user; a clear-text `password` is hashed here."""
        if password is not None:
            password_hash = hash_password(password)
        user = User(name, password_hash, tuple(tags), loopback_only)
        self.users[name] = user
        self.generation += 1
        return user

    def delete_user(self, name: str) -> bool:
        """Remove a user and its permissions; False when it did not exist."""
        if self.users.pop(name, None) is None:
            return False
        for key in [k for k in self.permissions if k[0] == name]:
            del self.permissions[key]
        self.topics.forget_user(name)
        self.generation += 1
        return True

    def set_permissions(
        self, user: str, vhost: str, configure: str = ".*", write: str = ".*", read: str = ".*"
    ) -> None:
        """Grant `user` the three regexes in `vhost` (replacing earlier ones)."""
        for pattern in (configure, write, read):
            re.compile(pattern)  # reject bad regexes at definition time
        self.permissions[(user, vhost)] = Permission(configure, write, read)
        self.generation += 1

    def clear_permissions(self, user: str, vhost: str) -> bool:
        """Remove `user`'s permissions in `vhost`; False when there were none."""
        self.generation += 1
        return self.permissions.pop((user, vhost), None) is not None

    def set_topic_permission(
        self, user: str, vhost: str, exchange: str, write: str, read: str
    ) -> None:
        """Set `user`'s topic permission on `exchange` of `vhost` (`core.topicauth`).

        Raises:
            ValueError: a pattern is not a valid regular expression.
        """
        self.topics.set(user, vhost, exchange, write, read)
        self.generation += 1

    def clear_topic_permission(self, user: str, vhost: str, exchange: str | None = None) -> bool:
        """Remove `user`'s topic permission on `exchange` of `vhost` (None: all of that vhost);
        False when there was none."""
        self.generation += 1
        return self.topics.clear(user, vhost, exchange)

    def check_topic(
        self,
        user: str,
        vhost: str,
        x: Exchange,
        access: str,
        routing_key: str | None,
        client_id: str | None = None,
        grant: ExternalGrant | None = None,
    ) -> bool:
        """Topic authorisation (`core.topicauth`): raise ACCESS_REFUSED unless `user` may
        `access` ("write" or "read") `routing_key` on `x`. False when `x` is not a topic
        exchange or nothing checks the user's keys on it (callers may cache that); True when
        something does and the key passed (or `routing_key` is None: only asked whether).
        `client_id` (MQTT's) fills `{client_id}`. `grant`: the connection's grant (a token's
        routing-key scopes, LDAP's `topic_access_query`), which answers instead of the table."""
        if x.type is not ExchangeType.TOPIC:
            return False
        if grant is not None:
            if not grant.checks_topic(vhost, x.name):
                return False
            if routing_key is not None and not grant.allows_topic(
                access, vhost, x.name, routing_key, client_id
            ):
                raise topic_refused(access, routing_key, x.name, vhost, user)
            return True
        rule = self.topics.rule(user, vhost, x.name)
        if rule is None:
            return False
        if routing_key is not None:
            variables = {"username": user, "vhost": vhost}
            if client_id is not None:
                variables["client_id"] = client_id
            check_topic(rule, access, routing_key, variables)
        return True

    def topic_rule(self, user: str, vhost: str, exchange: str) -> TopicPermission | None:
        """The topic permission of the table that checks `user`'s routing keys on topic
        exchange `exchange`, or None (none set: everything allowed). Connections with a grant
        are checked by it instead (`check_topic`)."""
        return self.topics.rule(user, vhost, exchange)

    # -- checks -----------------------------------------------------------------------------
    def authenticate(self, username: str, password: str) -> User | None:
        """The user when `password` is theirs (no loopback rule: `login` adds it; the
        management API has its own), else None."""
        user = self.users.get(username)
        if (
            user is None
            or user.password_hash is None
            or not verify_password(password, user.password_hash)
        ):
            return None
        return user

    def login(self, mechanism: str, username: str, password: str, peer_loopback: bool) -> User:
        """Authenticate; raise ACCESS_REFUSED with RabbitMQ's text on any failure."""
        user = self.authenticate(username, password)
        if user is None or not (peer_loopback or not user.loopback_only):
            raise BrokerError(
                Condition.ACCESS_REFUSED,
                f"Login was refused using authentication mechanism {mechanism}. "
                "For details see the broker logfile.",
            )
        return user

    def login_any(
        self, mechanism: str, username: str, password: str, peer_loopback: bool, now_ms: int
    ) -> Identity:
        """Try each of `backends` in order, as RabbitMQ's `auth_backends` chain; return who the
        first that accepts lets in (an OAuth 2 token names its own user and carries the grant
        of the connection logging in).

        Raises:
            BrokerError: ACCESS_REFUSED when none accepts (the last backend's reason).
        """
        error: BrokerError | None = None
        for backend in self.backends:
            try:
                if backend == "oauth2" and self.tokens is not None:
                    # the token is the password (or the user name when there is none)
                    grant = self.tokens.verify(password or username, now_ms)
                    return Identity(grant.user, grant)
                if backend == "internal":
                    self.login(mechanism, username, password, peer_loopback)
                    return Identity(username)
            except BrokerError as exc:
                error = exc
        raise error or BrokerError(
            Condition.ACCESS_REFUSED,
            f"Login was refused using authentication mechanism {mechanism}.",
        )

    def update_secret(
        self, conn_id: int, user: str, grant: ExternalGrant | None, secret: str, now_ms: int
    ) -> Grant:
        """Connection `conn_id` of `user`, holding `grant`, sends a fresh token (AMQP 0-9-1
        update-secret): it must be valid and name the same user. Returns its grant, now
        watched for that connection alone (the user's other connections keep theirs); the
        caller puts it on the connection (`Conn.regrant`, whose sessions then check again).

        Raises:
            BrokerError: ACCESS_REFUSED when the connection did not log in with a token, or
                the new one is refused or names another user.
        """
        if self.tokens is None or not isinstance(grant, Grant):
            raise BrokerError(Condition.ACCESS_REFUSED, "no token to update on this connection")
        fresh = self.tokens.verify(secret, now_ms)
        if fresh.user != user:
            raise BrokerError(
                Condition.ACCESS_REFUSED,
                f"the new token names user {fresh.user!r}, not {user!r}",
            )
        self.watch(conn_id, fresh)
        return fresh

    def watch(self, conn_id: int, grant: ExternalGrant | None) -> None:
        """Connection `conn_id` now holds `grant` (None: it closed, or holds none): its expiry
        joins (or leaves) what `expire_grants` looks at."""
        expires = None if grant is None else grant.expires_ms
        if expires is None:
            if self._expiring.pop(conn_id, None) is None:
                return
        else:
            self._expiring[conn_id] = expires
        self._expiry_stale = True

    def next_expiry_ms(self) -> int | None:
        """When the earliest connection's grant expires (None: none will). Asked after every
        batch (the server's deadline timer): recomputed only after a change (`watch`)."""
        if self._expiry_stale:
            self._next_expiry = min(self._expiring.values()) if self._expiring else None
            self._expiry_stale = False
        return self._next_expiry

    def expire_grants(self, now_ms: int) -> list[int]:
        """The connections whose token expired by `now_ms` (the broker closes them: "credential
        expired"); they leave the watch."""
        due = self.next_expiry_ms()
        if due is None or due > now_ms:
            return []
        gone = [c for c, t in self._expiring.items() if t <= now_ms]
        for c in gone:
            del self._expiring[c]
        self._expiry_stale = True
        return gone

    def login_external(self, cert_der: bytes | None, peer_loopback: bool) -> User:
        """Log in by client certificate (SASL EXTERNAL, `core.certlogin`): the user the
        verified certificate `cert_der` names must exist; no password is checked.

        Raises:
            BrokerError: ACCESS_REFUSED when certificate logins are off, there is no
                certificate, it names no user, the user does not exist, or is loopback-only
                and the peer is not.
        """
        how = self.cert_login
        name: str | None = None
        if how is not None and cert_der is not None:
            try:
                name = cert_user(cert_der, how)
            except ValueError:
                name = None
        user = self.users.get(name) if name is not None else None
        if user is None or not (peer_loopback or not user.loopback_only):
            why = (
                "certificate logins are off"
                if how is None
                else "no client certificate"
                if cert_der is None
                else f"the certificate names no user ({how.login_from.value})"
                if name is None
                else f"user {name!r} (from the client certificate) refused"
            )
            raise BrokerError(
                Condition.ACCESS_REFUSED,
                f"Login was refused using authentication mechanism EXTERNAL: {why}",
            )
        return user

    def check_vhost_access(
        self, username: str, vhost: str, grant: ExternalGrant | None = None
    ) -> None:
        """Raise NOT_ALLOWED unless `username` has any permissions in `vhost` (by `grant`, the
        connection's, when it has one)."""
        if grant is not None:
            allowed = grant.allows_vhost(vhost)
        else:
            allowed = (username, vhost) in self.permissions
        if not allowed:
            raise BrokerError(
                Condition.NOT_ALLOWED, f"access to vhost '{vhost}' refused for user '{username}'"
            )

    def check(
        self,
        username: str,
        vhost: str,
        access: Access,
        kind: str,
        name: str,
        grant: ExternalGrant | None = None,
    ) -> None:
        """Raise ACCESS_REFUSED unless `username` may `access` resource `kind` `name`.

        Args:
            username: the connection's user.
            vhost: the vhost of the resource.
            access: configure, write or read.
            kind: "queue" or "exchange" (used in the error text).
            name: the resource name ("" for the default exchange is checked as "amq.default").
            grant: the connection's grant (a token, LDAP), which answers instead of the
                permission table; None: the table answers.
        """
        resource = name if name or kind != "exchange" else "amq.default"
        if grant is not None:
            allowed = grant.allows(access.value, vhost, resource, kind)
        else:
            perm = self.permissions.get((username, vhost))
            allowed = perm is not None and perm.allows(access, resource)
        if not allowed:
            raise BrokerError(
                Condition.ACCESS_REFUSED,
                f"{access.value} access to {kind} '{resource}' in vhost '{vhost}' "
                f"refused for user '{username}'",
            )
