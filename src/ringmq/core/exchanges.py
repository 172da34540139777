"""Exchanges: vhosts, exchanges and the bindings between exchanges; the one implementation of
their rules.

Theory of operation: `Exchanges` owns declaring, deleting, binding and unbinding exchanges
with RabbitMQ's checks and texts, for every caller (a protocol adapter on behalf of a client
session, passed as `grant` so its permissions are checked; the management facade and config
loading, which authorise the user themselves). Each operation validates everything before it
changes anything. Rules: the default exchange cannot be declared, bound or deleted; `amq.*`
names are reserved for new exchanges and cannot be deleted; a redeclare must be equivalent
(type, flags, arguments, RabbitMQ's texts); naming an alternate exchange needs write
permission on it; an auto-delete exchange goes with its last binding. Durable changes are
recorded (`State.touch`, `touch_binding`) and written at the end of the call. Queues and their
bindings are `topology.Topology`'s, which uses the steps here.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ringmq.core.auth import Access
from ringmq.core.errors import BrokerError, Condition
from ringmq.core.exchange import Exchange
from ringmq.core.routing import EXCHANGE, DelayedTypeError, ExchangeTypeError, parse_exchange_type
from ringmq.core.session import Session
from ringmq.core.state import State
from ringmq.core.storeport import EXCHANGE_DEF
from ringmq.core.texts import as_str, field_type, flag, fmt_value
from ringmq.core.vhost import VHost


def not_default(name: str) -> None:
    """Refuse the default exchange (403, RabbitMQ's text)."""
    if name == "":
        raise BrokerError(
            Condition.ACCESS_REFUSED, "operation not permitted on the default exchange"
        )


class Exchanges:
    """Vhosts, exchanges and exchange bindings (see the module docstring)."""

    def __init__(self, state: State) -> None:
        self.state = state

    def add_vhost(self, name: str) -> VHost:
        """Create a vhost with the standard exchanges (idempotent)."""
        vhosts = self.state.vhosts
        vh = vhosts.get(name)
        if vh is None:
            vh = VHost(name, alternate_of=self._alternate_policy)
            vhosts[name] = vh
        return vh

    def _alternate_policy(self, vhost: str, exchange: Exchange) -> str | None:
        pol = self.state.policies.match(exchange.name, "exchange", vhost=vhost)
        if pol is None:
            return None
        return as_str(pol.definition.get("alternate-exchange"))

    def vhost(self, name: str) -> VHost:
        """The vhost `name` (NOT_FOUND when missing)."""
        vh = self.state.vhosts.get(name)
        if vh is None:
            raise BrokerError(Condition.NOT_FOUND, f"no vhost '{name}'")
        return vh

    @staticmethod
    def exchange(vh: VHost, name: str) -> Exchange:
        """Exchange `name` of `vh` (NOT_FOUND when missing)."""
        x = vh.exchanges.get(name)
        if x is None:
            raise BrokerError(Condition.NOT_FOUND, f"no exchange '{name}' in vhost '{vh.name}'")
        return x

    def check_arg_exchange(
        self, s: Session, args: Mapping[str, Any], key: str, kind: str, name: str
    ) -> None:
        """RabbitMQ's rule for an exchange named in a declare argument (DLX, AE).

        Naming `x-dead-letter-exchange` on a queue or `alternate-exchange` on an exchange lets
        the declarer's resource publish into that exchange later, so the declarer needs read on
        the resource being declared and write on the named exchange (403 otherwise). A value that
        is not a string is refused with 406 first, as RabbitMQ's `r_arg` does.
        """
        if key not in args:
            return
        target = as_str(args[key])
        if target is None:
            raise BrokerError(
                Condition.PRECONDITION_FAILED,
                f"invalid type '{field_type(args[key])}' for arg '{key}'",
            )
        auth = self.state.auth
        s.check(auth, Access.READ, kind, name)
        s.check(auth, Access.WRITE, "exchange", target)

    def declare_exchange(
        self,
        vh: VHost,
        name: str,
        type_name: str,
        *,
        durable: bool,
        auto_delete: bool,
        internal: bool,
        arguments: Mapping[str, Any] | None,
        passive: bool = False,
        grant: Session | None = None,
    ) -> bool:
        """Declare exchange `name` (`passive`: only check it exists); True when created.

        With `grant`, the session's user needs configure on it (and write on a named
        alternate exchange)."""
        # Even a passive declare of the default exchange is refused (RabbitMQ: 403).
        not_default(name)
        if passive:
            self.exchange(vh, name)
            return False
        auth = self.state.auth
        try:
            kind, routing_type = parse_exchange_type(type_name, arguments)
        except ExchangeTypeError as exc:
            raise BrokerError(Condition.COMMAND_INVALID, str(exc)) from None
        except DelayedTypeError as exc:
            if grant is not None:
                grant.check(auth, Access.CONFIGURE, "exchange", name)
            raise BrokerError(Condition.PRECONDITION_FAILED, str(exc)) from None
        args = dict(arguments or {})
        if grant is not None:
            grant.check(auth, Access.CONFIGURE, "exchange", name)
            self.check_arg_exchange(grant, args, "alternate-exchange", "exchange", name)
        x = vh.exchanges.get(name)
        if x is not None:
            diff = x.equivalent(kind, durable, auto_delete, internal, args)
            if diff is None:
                return False
            given = {"durable": durable, "auto_delete": auto_delete, "internal": internal}
            if diff == "type":
                got, cur = f"'{kind.value}'", f"'{x.type.value}'"
            elif diff in given:
                got, cur = f"'{flag(given[diff])}'", f"'{flag(getattr(x, diff))}'"
            else:
                got, cur = fmt_value(args.get(diff)), fmt_value(x.arguments.get(diff))
            raise BrokerError(
                Condition.PRECONDITION_FAILED,
                f"inequivalent arg '{diff}' for exchange '{name}' in vhost '{vh.name}': "
                f"received {got} but current is {cur}",
            )
        if name.startswith("amq."):
            raise BrokerError(
                Condition.ACCESS_REFUSED,
                f"exchange name '{name}' contains reserved prefix 'amq.*'",
            )
        if grant is not None:  # a client's: made on shard 0 when this shard follows it
            self.state.elsewhere(
                grant,
                "exchange.declare",
                vh.name,
                name=name,
                type=type_name,
                durable=durable,
                auto_delete=auto_delete,
                internal=internal,
                arguments=args,
            )
        x = Exchange(
            name,
            kind,
            durable=durable,
            auto_delete=auto_delete,
            internal=internal,
            arguments=args,
            routing_type=routing_type,
        )
        vh.exchanges[name] = x
        vh.invalidate()
        self.state.touch(EXCHANGE_DEF, vh.name, name, durable=x.durable)
        return True

    def delete_exchange(
        self, vh: VHost, name: str, *, if_unused: bool, grant: Session | None = None
    ) -> None:
        """Delete exchange `name` (403 for the default and `amq.*` ones; 406 when bound and
        `if_unused`). A missing exchange is no error for a session (as RabbitMQ); the
        management facade checks existence first."""
        not_default(name)
        if name.startswith("amq."):
            raise BrokerError(
                Condition.ACCESS_REFUSED,
                f"deletion of system exchange '{name}' in vhost '{vh.name}' not allowed",
            )
        if grant is not None:
            grant.check(self.state.auth, Access.CONFIGURE, "exchange", name)
        x = vh.exchanges.get(name)
        if x is not None:
            if if_unused and x.bindings:
                raise BrokerError(
                    Condition.PRECONDITION_FAILED,
                    f"exchange '{name}' in vhost '{vh.name}' in use",
                )
            if grant is not None:
                self.state.elsewhere(
                    grant, "exchange.delete", vh.name, name=name, if_unused=if_unused
                )
            self.remove_exchange(vh, x)

    def remove_exchange(self, vh: VHost, x: Exchange) -> None:
        """Remove `x`, its bindings and the bindings to it (no checks)."""
        vh.exchanges.pop(x.name, None)
        self.state.touch(EXCHANGE_DEF, vh.name, x.name, durable=x.durable)
        x.clear_bindings()
        for source in vh.remove_dest((EXCHANGE, x.name)):
            self.maybe_auto_delete_exchange(vh, source)
        vh.invalidate()

    def maybe_auto_delete_exchange(self, vh: VHost, x: Exchange) -> None:
        """Remove auto-delete exchange `x` when its last binding went."""
        if x.auto_delete and not x.bindings and vh.exchanges.get(x.name) is x:
            self.remove_exchange(vh, x)

    def touch_binding(
        self,
        vh: VHost,
        x: Exchange,
        dest: tuple[str, str],
        routing_key: str,
        arguments: Mapping[str, Any] | None,
        *,
        durable_dest: bool = True,
    ) -> None:
        # One binding changed: write it after this call (stored when both ends are durable).
        self.state.touch_binding(
            vh.name, x.name, dest, routing_key, arguments, durable=x.durable and durable_dest
        )

    @staticmethod
    def bind(
        src: Exchange, dest: tuple[str, str], routing_key: str, args: Mapping[str, Any] | None
    ) -> None:
        try:
            src.bind(dest, routing_key, args)
        except ValueError as exc:
            raise BrokerError(Condition.PRECONDITION_FAILED, str(exc)) from None

    def bind_exchange(
        self,
        vh: VHost,
        source: str,
        destination: str,
        routing_key: str,
        arguments: Mapping[str, Any] | None,
        *,
        grant: Session | None = None,
    ) -> None:
        """Bind exchange `destination` to exchange `source` (write on the destination, read
        on the source for a session)."""
        not_default(source)
        not_default(destination)
        if grant is not None:
            auth = self.state.auth
            grant.check(auth, Access.WRITE, "exchange", destination)
            grant.check(auth, Access.READ, "exchange", source)
        src = self.exchange(vh, source)
        if grant is not None:  # the binding key by the user's topic permission on the source
            grant.check_topic(self.state.auth, src, "read", routing_key)
        self.exchange(vh, destination)
        if grant is not None and not src.has_binding(
            (EXCHANGE, destination), routing_key, arguments
        ):
            self.state.elsewhere(
                grant,
                "exchange.bind",
                vh.name,
                source=source,
                destination=destination,
                routing_key=routing_key,
                arguments=dict(arguments or {}),
            )
        self.bind(src, (EXCHANGE, destination), routing_key, arguments)
        vh.invalidate()
        self.touch_binding(vh, src, (EXCHANGE, destination), routing_key, arguments)

    def unbind_exchange(
        self,
        vh: VHost,
        source: str,
        destination: str,
        routing_key: str,
        arguments: Mapping[str, Any] | None,
        *,
        grant: Session | None = None,
    ) -> bool:
        """Remove an exchange-to-exchange binding; a missing end or binding is no error (the
        binding is gone either way: RabbitMQ's rabbit_binding:remove reports only an absent
        queue, never not_found). False when there was no such binding."""
        not_default(source)
        not_default(destination)
        if grant is not None:
            auth = self.state.auth
            grant.check(auth, Access.WRITE, "exchange", destination)
            grant.check(auth, Access.READ, "exchange", source)
        src = vh.exchanges.get(source)
        if grant is not None and src is not None:
            grant.check_topic(self.state.auth, src, "read", routing_key)
            if destination in vh.exchanges and src.has_binding(
                (EXCHANGE, destination), routing_key, arguments
            ):
                self.state.elsewhere(
                    grant,
                    "exchange.unbind",
                    vh.name,
                    source=source,
                    destination=destination,
                    routing_key=routing_key,
                    arguments=dict(arguments or {}),
                )
        if (
            src is not None
            and destination in vh.exchanges
            and src.unbind((EXCHANGE, destination), routing_key, arguments)
        ):
            vh.invalidate()
            self.touch_binding(vh, src, (EXCHANGE, destination), routing_key, arguments)
            self.maybe_auto_delete_exchange(vh, src)
            return True
        return False
