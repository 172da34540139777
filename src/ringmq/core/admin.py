"""A small synchronous facade the management API and config loading call (`Broker.admin`).

Theory of operation: `Admin` wraps one `Broker` and exposes management operations by vhost and
name, without AMQP channels. Every call runs on the broker's loop thread (no locks). Reads return
plain dicts whose keys match the management port's record fields (`QueueInfo(**d)` works);
writes validate first and raise `BrokerError` (NOT_FOUND, PRECONDITION_FAILED, ACCESS_REFUSED...)
or `ValueError` (bad input) with nothing changed. Operations that affect clients (deleting a
queue cancels its consumers; publishing or requeueing dispatches to them) produce effects; they
are passed to `emit` when the server has set it, else kept in `pending` for `drain_effects()`.

API (all names are stable):
  vhosts, add_vhost, delete_vhost, users, authenticate, add_user, delete_user, permissions,
  set_permissions, clear_permissions;
  (from `QueueAdmin`, core/adminqueues.py) queues, queue, declare_queue, delete_queue,
  purge_queue, get_messages, begin_get, update_queue,
  scheduled, purge_scheduled, deliver_scheduled_now;
  exchanges, declare_exchange, delete_exchange, publish, bindings, bind, unbind;
  policies, set_policy, clear_policy, replace_address_settings;
  connections, channels, consumers, close_connection;
  drain_effects.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ringmq.core.adminqueues import QueueAdmin, writes_all_definitions, writes_definitions
from ringmq.core.auth import verify_password
from ringmq.core.effects import CloseConnection
from ringmq.core.errors import BrokerError, Condition
from ringmq.core.message import FORM_AMQP091, form
from ringmq.core.routing import EXCHANGE, QUEUE
from ringmq.core.session import ChannelMode
from ringmq.core.settings import SettingsError


class Admin(QueueAdmin):
    """Management operations over a `Broker` (see the module docstring); the queue operations
    and the call plumbing are `QueueAdmin`'s."""

    # ---------------------------------------------------------------- users and vhosts
    def vhosts(self) -> list[str]:
        """Vhost names, sorted."""
        return sorted(self.broker.vhosts)

    @writes_definitions
    def add_vhost(self, name: str) -> bool:
        """Create a vhost; False when it existed."""
        if not name:
            raise ValueError("vhost name must not be empty")
        existed = name in self.broker.vhosts
        self.broker.add_vhost(name)
        return not existed

    @writes_all_definitions
    def delete_vhost(self, name: str, *, now_ms: int) -> None:
        """Delete a vhost: its connections are closed (320) and its queues dropped."""
        vh = self._vh(name)
        self.begin(now_ms)
        b = self.broker
        for conn in list(b.conns.values()):
            if conn.vhost == name:
                self._out.append(
                    CloseConnection(conn.conn_id, Condition.CONNECTION_FORCED, "vhost deleted")
                )
        for q in list(vh.queues.values()):
            b.topology.delete_queue(vh, q, now_ms)
        del b.vhosts[name]
        for user, vhost in list(b.auth.permissions):
            if vhost == name:
                b.auth.clear_permissions(user, vhost)
        self.end(now_ms)

    def users(self) -> list[dict[str, Any]]:
        """Users as {name, tags, password_hash}."""
        return [
            {"name": u.name, "tags": list(u.tags), "password_hash": u.password_hash or ""}
            for u in sorted(self.broker.auth.users.values(), key=lambda u: u.name)
        ]

    def authenticate(self, user: str, password: str) -> dict[str, Any] | None:
        """The user record when the password matches (no loopback rule: HTTP has its own)."""
        u = self.broker.auth.users.get(user)
        if u is None or u.password_hash is None or not verify_password(password, u.password_hash):
            return None
        return {"name": u.name, "tags": list(u.tags), "password_hash": u.password_hash}

    @writes_definitions
    def add_user(
        self,
        name: str,
        *,
        password: str | None = None,
        password_hash: str | None = None,
        tags: tuple[str, ...] = (),
    ) -> None:
        """Create or replace a user."""
        if not name:
            raise ValueError("user name must not be empty")
        self.broker.auth.add_user(name, password=password, password_hash=password_hash, tags=tags)

    @writes_definitions
    def delete_user(self, name: str) -> bool:
        """Delete a user and its permissions (open connections stay, as in RabbitMQ 3.x)."""
        return self.broker.auth.delete_user(name)

    def permissions(self) -> list[dict[str, Any]]:
        """Permissions as {user, vhost, configure, write, read}."""
        return [
            {"user": u, "vhost": v, "configure": p.configure, "write": p.write, "read": p.read}
            for (u, v), p in sorted(self.broker.auth.permissions.items())
        ]

    @writes_definitions
    def set_permissions(self, user: str, vhost: str, configure: str, write: str, read: str) -> None:
        """Grant permissions (ValueError-like re.error on a bad regex)."""
        if user not in self.broker.auth.users:
            raise BrokerError(Condition.NOT_FOUND, f"no user '{user}'")
        self._vh(vhost)
        self.broker.auth.set_permissions(user, vhost, configure, write, read)

    @writes_definitions
    def clear_permissions(self, user: str, vhost: str) -> bool:
        """Remove a user's permissions in a vhost."""
        return self.broker.auth.clear_permissions(user, vhost)

    # ---------------------------------------------------------------- exchanges and bindings
    def exchanges(self, vhost: str | None = None) -> list[dict[str, Any]]:
        """Exchanges as {vhost, name, type, durable, auto_delete, internal, arguments}."""
        out: list[dict[str, Any]] = []
        for vh in sorted(self.broker.vhosts.values(), key=lambda v: v.name):
            if vhost is not None and vh.name != vhost:
                continue
            for _, x in sorted(vh.exchanges.items()):
                out.append(
                    {
                        "vhost": vh.name,
                        "name": x.name,
                        "type": x.type.value,
                        "durable": x.durable,
                        "auto_delete": x.auto_delete,
                        "internal": x.internal,
                        "arguments": dict(x.arguments),
                    }
                )
        return out

    @writes_all_definitions
    def declare_exchange(
        self,
        vhost: str,
        name: str,
        *,
        type: str = "direct",
        durable: bool = True,
        auto_delete: bool = False,
        internal: bool = False,
        arguments: Mapping[str, Any] | None = None,
        now_ms: int = 0,
    ) -> bool:
        """Declare an exchange; True when created (406 when an inequivalent one exists).

        The rules are `Topology.declare_exchange`'s, as for a client's declare; the caller
        has authorised the user."""
        return self.broker.exchanges.declare_exchange(
            self._vh(vhost),
            name,
            type,
            durable=durable,
            auto_delete=auto_delete,
            internal=internal,
            arguments=arguments,
        )

    @writes_definitions
    def delete_exchange(
        self, vhost: str, name: str, *, if_unused: bool = False, now_ms: int = 0
    ) -> None:
        """Delete an exchange (403 for the default and amq.* ones, 404 when missing, 406 if
        used and if_unused)."""
        vh = self._vh(vhost)
        if name and not name.startswith("amq."):
            self._x(vhost, name)
        self.broker.exchanges.delete_exchange(vh, name, if_unused=if_unused)

    def publish(
        self,
        vhost: str,
        exchange: str,
        routing_key: str,
        body: bytes,
        properties: Mapping[str, Any] | None = None,
        *,
        now_ms: int,
    ) -> bool:
        """Publish a message as the management API does; True when it was routed somewhere.

        `properties` are AMQP 0-9-1 basic properties by name, as RabbitMQ's API takes them
        (ValueError for a bad one)."""
        vh = self._vh(vhost)
        x = self._x(vhost, exchange)
        msg = form(FORM_AMQP091).compose(exchange, routing_key, properties or {}, body, now_ms)
        self.begin(now_ms)
        b = self.broker
        before = b.stats["unroutable"]
        b.stats["published"] += 1  # received, as a client's publish counts
        b.publisher.route(vh, x, msg, False, None, now_ms)
        routed = b.stats["unroutable"] == before
        self.end(now_ms)
        return routed

    def bindings(self, vhost: str | None = None) -> list[dict[str, Any]]:
        """Bindings as {vhost, source, destination, destination_type, routing_key, arguments}.

        The implicit default-exchange binding of each queue is listed first, as RabbitMQ does.
        """
        out: list[dict[str, Any]] = []
        for vh in sorted(self.broker.vhosts.values(), key=lambda v: v.name):
            if vhost is not None and vh.name != vhost:
                continue
            for qname in sorted(vh.queues):
                out.append(  # noqa: PERF401 - two loops feed one list
                    {
                        "vhost": vh.name,
                        "source": "",
                        "destination": qname,
                        "destination_type": "queue",
                        "routing_key": qname,
                        "arguments": {},
                    }
                )
            for _, x in sorted(vh.exchanges.items()):
                for bd in x.bindings.values():
                    out.append(  # noqa: PERF401 - two loops feed one list
                        {
                            "vhost": vh.name,
                            "source": x.name,
                            "destination": bd.dest[1],
                            "destination_type": "queue" if bd.dest[0] == QUEUE else "exchange",
                            "routing_key": bd.routing_key,
                            "arguments": dict(bd.arguments),
                        }
                    )
        return out

    def _binding_parts(
        self, binding: Any, source: str | None, destination: str | None, kw: dict[str, Any]
    ) -> tuple[str, str, str, str, str, dict[str, Any]]:
        if binding is not None and not isinstance(binding, str):
            return (
                binding.vhost,
                binding.source,
                binding.destination,
                binding.destination_type,
                binding.routing_key,
                dict(binding.arguments or {}),
            )
        vhost = binding if isinstance(binding, str) else kw.get("vhost", "/")
        return (
            vhost,
            source or "",
            destination or "",
            kw.get("destination_type", "queue"),
            kw.get("routing_key", ""),
            dict(kw.get("arguments") or {}),
        )

    @writes_all_definitions
    def bind(
        self,
        binding: Any,
        source: str | None = None,
        destination: str | None = None,
        *,
        now_ms: int = 0,
        **kw: Any,
    ) -> None:
        """Create a binding: `bind(record)` (attributes as in `bindings()`), or
        `bind(vhost, source, destination, destination_type=, routing_key=, arguments=)`."""
        vhost, src, dst, dtype, rk, args = self._binding_parts(binding, source, destination, kw)
        vh = self._vh(vhost)
        if not src:
            raise BrokerError(
                Condition.ACCESS_REFUSED, "operation not permitted on the default exchange"
            )
        x = self._x(vhost, src)
        if dtype == "queue":
            self._q(vhost, dst)
            dest = (QUEUE, dst)
        elif dtype == "exchange":
            self._x(vhost, dst)
            dest = (EXCHANGE, dst)
        else:
            raise ValueError(f"destination_type must be queue or exchange, got {dtype!r}")
        try:
            x.bind(dest, rk, args)
        except ValueError as exc:
            raise BrokerError(Condition.PRECONDITION_FAILED, str(exc)) from None
        vh.invalidate()

    @writes_all_definitions
    def unbind(
        self,
        binding: Any,
        source: str | None = None,
        destination: str | None = None,
        *,
        now_ms: int = 0,
        **kw: Any,
    ) -> None:
        """Remove a binding (same arguments as `bind`); 404 when it does not exist."""
        vhost, src, dst, dtype, rk, args = self._binding_parts(binding, source, destination, kw)
        vh = self._vh(vhost)
        x = self._x(vhost, src)
        dest = (QUEUE if dtype == "queue" else EXCHANGE, dst)
        if not x.unbind(dest, rk, args):
            raise BrokerError(Condition.NOT_FOUND, f"no binding {src} -> {dst} '{rk}'")
        vh.invalidate()
        self.broker.exchanges.maybe_auto_delete_exchange(vh, x)

    # ---------------------------------------------------------------- policies
    def policies(self, vhost: str | None = None) -> list[dict[str, Any]]:
        """Policies as {vhost, name, pattern, definition, priority, apply_to}."""
        return [
            {
                "vhost": p.vhost,
                "name": p.name,
                "pattern": p.pattern,
                "definition": dict(p.definition),
                "priority": p.priority,
                "apply_to": str(p.apply_to),
            }
            for p in self.broker.policies.list(vhost)
        ]

    @writes_definitions
    def set_policy(self, policy: Any = None, *, now_ms: int = 0, **kw: Any) -> bool:
        """Create or replace a policy (a record with the `policies()` fields, or keywords);
        re-resolves and applies the settings of every queue in its vhost. True when created.

        Raises ValueError (PolicyError) for a bad definition; a queue whose settings would
        become invalid keeps its old ones (logged by the caller's response)."""
        if policy is not None:
            fields = {k: getattr(policy, k) for k in ("vhost", "name", "pattern", "definition")}
            fields["priority"] = getattr(policy, "priority", 0)
            fields["apply_to"] = getattr(policy, "apply_to", "all")
        else:
            fields = dict(kw)
        vhost = fields.get("vhost", "/")
        self._vh(vhost)
        existed = self.broker.policies.get(fields["name"], vhost=vhost) is not None
        self.broker.policies.set(
            fields["name"],
            fields["pattern"],
            fields["definition"],
            vhost=vhost,
            apply_to=fields.get("apply_to", "all"),
            priority=fields.get("priority", 0),
        )
        self._reapply(vhost, now_ms)
        return not existed

    @writes_definitions
    def clear_policy(self, vhost: str, name: str, *, now_ms: int = 0) -> None:
        """Delete a policy (404 when missing) and re-apply settings in its vhost."""
        if not self.broker.policies.clear(name, vhost=vhost):
            raise BrokerError(Condition.NOT_FOUND, f"no policy '{name}' in vhost '{vhost}'")
        self._reapply(vhost, now_ms)

    def replace_address_settings(
        self, settings: Mapping[str, Mapping[str, Any]], *, now_ms: int = 0
    ) -> None:
        """Replace every address setting and re-apply queue settings in every vhost."""
        table = self.broker.address_settings
        for match in list(table.list()):
            table.clear(match)
        for match, values in settings.items():
            table.set(match, values)
        for vhost in list(self.broker.vhosts):
            self._reapply(vhost, now_ms)

    def _reapply(self, vhost: str, now_ms: int) -> None:
        vh = self._vh(vhost)
        self.begin(now_ms)
        for q in vh.queues.values():
            try:
                new = self.broker.resolve_settings(vhost, q.name, q.arguments)
            except SettingsError:
                continue
            if new != q.settings:
                q.settings = new
                q.queue.update_settings(new, now_ms)
                self.broker.state.track_timers(q)
                self.broker.state.mark(q)
        vh.invalidate()
        self.end(now_ms)

    # ---------------------------------------------------------------- sessions
    def connections(self) -> list[dict[str, Any]]:
        """Connections as the core knows them: {conn_id, user, vhost, peer, channels, ...}."""
        return [
            {
                "conn_id": c.conn_id,
                "user": c.user,
                "vhost": c.vhost,
                "peer": c.peer,
                "channels": len(c.sessions),
                "client_properties": dict(c.client_properties),
                "connected_at_ms": c.opened_ms,
                "writable": c.writable,
            }
            for c in sorted(self.broker.conns.values(), key=lambda c: c.conn_id)
        ]

    def close_connection(self, conn_id: int, reason: str = "closed via management") -> bool:
        """Ask the server to close a connection with 320 CONNECTION_FORCED."""
        if conn_id not in self.broker.conns:
            return False
        effect = CloseConnection(conn_id, Condition.CONNECTION_FORCED, reason)
        if self.emit is not None:
            self.emit([effect])
        else:
            self.pending.append(effect)
        return True

    def channels(self) -> list[dict[str, Any]]:
        """Channels as {conn_id, number, consumer_count, messages_unacknowledged, ...}."""
        out: list[dict[str, Any]] = []
        for c in sorted(self.broker.conns.values(), key=lambda c: c.conn_id):
            for number, s in sorted(c.sessions.items()):
                out.append(
                    {
                        "conn_id": c.conn_id,
                        "number": number,
                        "consumer_count": len(s.consumers),
                        "messages_unacknowledged": len(s.unacked),
                        "prefetch_count": s.prefetch_count,
                        "global_prefetch_count": s.global_prefetch,
                        "confirm": s.mode is ChannelMode.CONFIRM,
                        "transactional": s.mode is ChannelMode.TX,
                        "state": "running",
                    }
                )
        return out

    def consumers(self) -> list[dict[str, Any]]:
        """Consumers as {conn_id, channel, consumer_tag, vhost, queue, ack_required, ...}."""
        out: list[dict[str, Any]] = []
        for c in sorted(self.broker.conns.values(), key=lambda c: c.conn_id):
            for number, s in sorted(c.sessions.items()):
                for tag, consumer in s.consumers.items():
                    q = consumer.queue
                    cs = q.consumers
                    out.append(
                        {
                            "conn_id": c.conn_id,
                            "channel": number,
                            "consumer_tag": tag,
                            "vhost": q.vhost,
                            "queue": q.name,
                            "ack_required": not consumer.no_ack,
                            "exclusive": consumer.exclusive,
                            "prefetch_count": consumer.prefetch,
                            "arguments": dict(consumer.arguments),
                            "active": not cs.single_active or cs.active is consumer,
                        }
                    )
        return out
