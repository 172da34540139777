"""The LDAP backend: logins checked by binding to an LDAP server, off the broker's loop.

Theory of operation: LDAP calls block (ldap3's synchronous client), so they never run on the loop
thread. When the quick backends (the user table, OAuth 2 tokens) refused a password login and `ldap`
is among the backends, the connection's handler hands the credentials over
(`HandlerContext.slow_login`, which the driver backs with `LdapLogins.take`; no protocol type is
seen here) to a small thread pool, and waits (AMQP 0-9-1: in AUTHENTICATING, as while the login
throttle delays a check; later bytes stay buffered). In the worker, `check` binds as the user
(`user_dn_pattern`, RabbitMQ's `auth_ldap.user_dn_pattern`); a refused bind, an empty password (an
LDAP "unauthenticated bind" would succeed) or no reachable server is a refusal that says so. After a
successful bind it resolves the vhost, resource and tag queries for every vhost
(`core.ldapquery.ldap_grant`), over the user's connection or the `other_bind` one. The answer comes
back to the loop (`call_soon_threadsafe`): the answer, with the grant (`core.auth.Identity`), to the
handler, run as a read of its connection (server/handlers.py), which ends the login and opens the
connection with that grant (its own: the user's other connections keep theirs), the failed-login
throttle counting refusals as for passwords. A server that is down costs its
connect timeout per login; the broker keeps serving everyone else meanwhile.

Only the LDAP calls run in the pool; everything it touches on the broker happens on the loop.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Final

import ldap3
from ldap3.core.exceptions import LDAPException
from ldap3.utils.conv import escape_filter_chars
from ldap3.utils.dn import escape_rdn

from ringmq.core.auth import Identity
from ringmq.core.errors import BrokerError, Condition
from ringmq.core.ldapquery import LdapGrant, LdapQueries, fill, ldap_grant
from ringmq.server.configspec import LdapSpec

if TYPE_CHECKING:
    from ringmq.core.broker import Broker

log = logging.getLogger(__name__)

WORKERS: Final = 4
"""LDAP logins checked at once; more wait their turn in the pool's queue."""


def _refused(why: str) -> BrokerError:
    return BrokerError(Condition.ACCESS_REFUSED, f"LDAP login refused: {why}")


class LdapClient:
    """The blocking part: bind and queries against the configured servers."""

    def __init__(self, spec: LdapSpec) -> None:
        self.spec = spec
        queries = spec.queries
        self.queries: LdapQueries = queries if isinstance(queries, LdapQueries) else LdapQueries()

    def _connection(self, host: str, user: str | None, password: str | None) -> ldap3.Connection:
        s = self.spec
        timeout = max(1, math.ceil(s.timeout_s))  # ldap3 sets SO_RCVTIMEO: whole seconds
        server = ldap3.Server(
            host, port=s.port, use_ssl=s.use_ssl, connect_timeout=timeout, get_info=ldap3.NONE
        )
        return ldap3.Connection(server, user, password, receive_timeout=timeout)

    def check(self, user: str, password: str, vhosts: list[str]) -> LdapGrant:
        """Bind as `user` and resolve the queries (blocking: call from a worker thread).

        Raises:
            BrokerError: ACCESS_REFUSED saying why (bad credentials, no server reachable).
        """
        if not password:
            raise _refused("an empty password")  # LDAP would take it as an anonymous bind
        s = self.spec
        user_dn = fill(s.user_dn_pattern, {"username": user}, escape_rdn)
        errors: list[str] = []
        for host in s.servers:
            conn = self._connection(host, user_dn, password)
            try:
                if not conn.bind():
                    raise _refused(f"invalid credentials for {user_dn}")
                return self._grant(host, conn, user, user_dn, vhosts)
            except LDAPException as exc:
                errors.append(f"{host}:{s.port}: {exc}")
                log.warning("LDAP server %s:%d: %s", host, s.port, exc)
            finally:
                _close(conn)
        raise _refused(f"no LDAP server reachable ({'; '.join(errors)})")

    def _grant(
        self, host: str, conn: ldap3.Connection, user: str, user_dn: str, vhosts: list[str]
    ) -> LdapGrant:
        s = self.spec
        ask = conn
        if s.other_bind != "as_user":
            ask = self._connection(host, s.other_bind_dn, s.other_bind_password)
            if not ask.bind():
                raise _refused(f"the other_bind of {host} was refused")

        def lookup(op: str, dn: str, attribute: str) -> bool:
            if op == "exists":
                flt = "(objectClass=*)"
            else:  # in_group: the group entry lists the user's DN under `attribute`
                flt = f"({attribute}={escape_filter_chars(user_dn)})"
            found = ask.search(dn, flt, search_scope=ldap3.BASE, attributes=[])
            return bool(found and ask.entries)

        try:
            return ldap_grant(user, user_dn, vhosts, self.queries, lookup)
        finally:
            if ask is not conn:
                _close(ask)


def _close(conn: ldap3.Connection) -> None:
    # unbind when bound; ldap3 leaves the socket of a failed connect open: close it too
    try:
        conn.unbind()
    except LDAPException:
        pass
    sock = getattr(conn, "socket", None)
    if sock is not None:
        sock.close()


class LdapLogins:
    """Password logins checked by LDAP in worker threads (see the module docstring); `take`
    is the driver's slow login backend (`server.handlers.SlowBackend`), whatever the protocol."""

    def __init__(self, spec: LdapSpec, broker: Broker) -> None:
        self.client = LdapClient(spec)
        self.broker = broker
        self.pool = ThreadPoolExecutor(WORKERS, thread_name_prefix="ringmq-ldap")
        self.loop: asyncio.AbstractEventLoop | None = None

    def take(
        self, user: str, password: str, answer: Callable[[Identity | None, str], None]
    ) -> bool:
        """Check a password login the quick backends refused; `answer(who or None, why)`
        comes later, on the loop thread. False (nothing asked) before the server runs."""
        if self.loop is None:
            return False
        vhosts = sorted(self.broker.vhosts)
        future = self.pool.submit(self.client.check, user, password, vhosts)
        loop = self.loop

        def done(f: Future[LdapGrant]) -> None:
            loop.call_soon_threadsafe(self._answer, user, f, answer)

        future.add_done_callback(done)
        return True

    async def login(self, user: str, password: str) -> Identity | None:
        """`take` for a caller on the loop that can wait (the management API's login): who
        LDAP logs in (with the grant of that request), or None (refused, or the server is
        not running)."""
        waiting: asyncio.Future[Identity | None] = asyncio.get_running_loop().create_future()

        def answer(who: Identity | None, _why: str) -> None:
            if not waiting.done():
                waiting.set_result(who)

        if not self.take(user, password, answer):
            return None
        return await waiting

    def _answer(
        self, user: str, future: Future[LdapGrant], answer: Callable[[Identity | None, str], None]
    ) -> None:
        # on the loop thread: the answer, with its grant, to the connection
        try:
            grant = future.result()
        except BrokerError as exc:
            answer(None, exc.explanation)
            return
        except Exception as exc:
            log.exception("LDAP login of %r failed", user)
            answer(None, f"LDAP login refused: internal error ({exc})")
            return
        answer(Identity(grant.user, grant), "")

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)


__all__ = ["LdapClient", "LdapLogins"]
