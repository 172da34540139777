"""Users and permissions: the authorisation part of the management facade (`AccessFacade`, a
base of `admin.CoreAdmin`), and `writes`, the decorator every facade call that changes durable
definitions wears.

Theory of operation: the management modules call these methods on the one facade, `CoreAdmin`;
they go to the core's one owner of users, grants and permissions (`Broker.auth`, `core.auth`
and `core.topicauth`), and to `Broker.limits` when a user is deleted. What the HTTP layer adds
is here: users created here keep RabbitMQ's loopback-only rule (`loopback_users`) across
replacements and re-imports; a permission needs an existing user and vhost (NOT_FOUND
otherwise). Checks are the AMQP channel's own (`AuthDB.check`, `check_topic`), never a second
matcher. Calls that change users or permissions write the definitions after the call (`writes`).
The only state is the broker's; this class holds none of its own.

Runs on the broker's loop thread; nothing here blocks or locks.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Concatenate, ParamSpec, TypeVar

from ringmq.core.auth import Access, ExternalGrant
from ringmq.core.broker import Broker
from ringmq.core.errors import BrokerError, Condition
from ringmq.core.vhost import VHost
from ringmq.management import corerecords
from ringmq.management.records import PermissionInfo, TopicPermissionInfo, UserInfo

_A = TypeVar("_A", bound="AccessFacade")
_P = ParamSpec("_P")
_R = TypeVar("_R")


def writes(
    full: bool,
) -> Callable[[Callable[Concatenate[_A, _P], _R]], Callable[Concatenate[_A, _P], _R]]:
    """Decorate a facade call that may change durable definitions (`CoreAdmin`'s too)."""

    # After a call that may change durable definitions (even one that failed half-way), let
    # the broker write what changed to its store (a no-op without a store): incremental where
    # the owners record their changes (users, vhosts, permissions and policies are always
    # diffed whole), `full` for calls whose changes they do not record one by one.
    def decorate(
        fn: Callable[Concatenate[_A, _P], _R],
    ) -> Callable[Concatenate[_A, _P], _R]:
        @functools.wraps(fn)
        def wrapper(admin: _A, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
            try:
                return fn(admin, *args, **kwargs)
            finally:
                admin.broker.definitions_changed(full=full)

        return wrapper

    return decorate


class AccessFacade:
    """The users and permissions calls of the management facade (see the module docstring)."""

    broker: Broker

    def _vhost(self, vhost: str) -> VHost:
        return self.broker.exchanges.vhost(vhost)

    # -- users, permissions ----------------------------------------------------------------------

    def users(self) -> list[UserInfo]:
        return [corerecords.user(u) for _, u in sorted(self.broker.auth.users.items())]

    def authenticate(self, user: str, password: str) -> UserInfo | None:
        """The user when the password matches (no loopback rule: HTTP has its own)."""
        found = self.broker.auth.authenticate(user, password)
        return None if found is None else corerecords.user(found)

    def token_user(self, token: str, now_ms: int) -> UserInfo | None:
        """The user an OAuth 2 token names, when the "oauth2" backend is configured and the
        token is valid (`core.oauth`: signature, audience, expiry); its scopes give the tags
        (`rabbitmq.tag:administrator`) and, as for AMQP logins, its permissions: the grant
        travels with the returned user (this request's alone, never the user's connections').
        None otherwise."""
        auth = self.broker.auth
        if auth.tokens is None or "oauth2" not in auth.backends:
            return None
        try:
            grant = auth.tokens.verify(token, now_ms)
        except BrokerError:
            return None
        return UserInfo(name=grant.user, tags=list(grant.tags), grant=grant)

    def check_topic(
        self,
        user: str,
        vhost: str,
        exchange: str,
        access: str,
        key: str,
        grant: ExternalGrant | None = None,
    ) -> None:
        """Topic authorisation of a management publish (write) or binding (read), as an AMQP
        channel of `user` would be checked (`core.topicauth`; `grant`: the request's).

        Raises:
            BrokerError: ACCESS_REFUSED with RabbitMQ's text.
        """
        vh = self.broker.vhosts.get(vhost)
        x = vh.exchanges.get(exchange) if vh is not None else None
        if x is not None:
            self.broker.auth.check_topic(user, vhost, x, access, key, grant=grant)

    def granted_user(self, grant: ExternalGrant | None) -> UserInfo | None:
        """The user a backend other than the table (LDAP) just logged in, with the tags and
        the grant (this request's) its login gave; None without a grant."""
        if grant is None:
            return None
        return UserInfo(name=grant.user, tags=list(grant.tags), grant=grant)

    def permissions(self) -> list[PermissionInfo]:
        return corerecords.permissions(self.broker.auth)

    @writes(full=False)
    def add_user(
        self, name: str, *, password: str | None, password_hash: str | None, tags: list[str]
    ) -> None:
        """Create or replace a user; it keeps its loopback-only flag, and a new one gets
        RabbitMQ's (`loopback_users`)."""
        if not name:
            raise ValueError("user name must not be empty")
        auth = self.broker.auth
        old = auth.users.get(name)
        auth.add_user(
            name,
            password=password,
            password_hash=password_hash,
            tags=tuple(tags),
            loopback_only=(
                old.loopback_only if old is not None else name in self.broker.config.loopback_users
            ),
        )

    @writes(full=False)
    def delete_user(self, name: str) -> bool:
        """Delete a user, its permissions and limits (open connections stay, as in RabbitMQ
        3.x)."""
        self.broker.limits.forget_user(name)
        return self.broker.auth.delete_user(name)

    @writes(full=False)
    def set_permissions(self, permission: PermissionInfo) -> None:
        p = permission
        if p.user not in self.broker.auth.users:
            raise BrokerError(Condition.NOT_FOUND, f"no user '{p.user}'")
        self._vhost(p.vhost)
        self.broker.auth.set_permissions(p.user, p.vhost, p.configure, p.write, p.read)

    @writes(full=False)
    def clear_permissions(self, user: str, vhost: str) -> bool:
        return self.broker.auth.clear_permissions(user, vhost)

    def topic_permissions(self) -> list[TopicPermissionInfo]:
        return corerecords.topic_permissions(self.broker.auth)

    @writes(full=False)
    def set_topic_permission(self, t: TopicPermissionInfo) -> None:
        """Set a topic permission (`core.topicauth`); the user and vhost must exist.

        Raises:
            BrokerError: NOT_FOUND for a missing user or vhost.
            ValueError: a pattern that is not a regular expression.
        """
        if t.user not in self.broker.auth.users:
            raise BrokerError(Condition.NOT_FOUND, f"no user '{t.user}'")
        self._vhost(t.vhost)
        self.broker.auth.set_topic_permission(t.user, t.vhost, t.exchange, t.write, t.read)

    @writes(full=False)
    def clear_topic_permissions(self, user: str, vhost: str, exchange: str | None = None) -> bool:
        """Remove `user`'s topic permissions in `vhost` (one exchange's, or all)."""
        return self.broker.auth.clear_topic_permission(user, vhost, exchange)

    def has_vhost_access(self, user: str, vhost: str, grant: ExternalGrant | None = None) -> bool:
        """The user has permissions in `vhost` (AMQP's vhost access check; by `grant`, the
        request's, when it has one)."""
        try:
            self.broker.auth.check_vhost_access(user, vhost, grant)
        except BrokerError:
            return False
        return True

    def check_permission(
        self,
        user: str,
        vhost: str,
        access: Access,
        kind: str,
        name: str,
        grant: ExternalGrant | None = None,
    ) -> None:
        """Raise ACCESS_REFUSED unless `user` may `access` the resource: the AMQP channel's
        own check (`core.auth.AuthDB.check`), not a second matcher (`grant`: the request's)."""
        self.broker.auth.check(user, vhost, access, kind, name, grant)
