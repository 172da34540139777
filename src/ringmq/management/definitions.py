"""Definitions export and import in RabbitMQ's JSON format (`/api/definitions`).

Export gathers users, vhosts, permissions, policies, queues, exchanges and bindings. Import
is all-or-nothing at the HTTP level: the whole document is parsed and checked first (shapes,
types, vhosts that exist or are created by the document, valid password hashes and permission
patterns, no conflicting redeclaration of an existing queue or exchange, bindings whose ends
exist or are part of the document), and only then applied in dependency order (vhosts, users,
permissions, topic permissions, policies, exchanges, queues, bindings). Users carry RabbitMQ's
`rabbit_password_hashing_sha256` hashes, which ringmq uses too, so a RabbitMQ export imports
as is. A per-vhost import (`/api/definitions/{vhost}`) takes only the vhost-scoped sections.
Users, permissions and policies are checked by the rules `PUT /api/users|permissions|policies`
use (`params.parse_user|parse_permission|parse_policy`). Stateless.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Final

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ringmq import __version__
from ringmq.core.limits import USER_LIMITS, VHOST_LIMITS
from ringmq.core.routing import parse_exchange_type
from ringmq.core.settings import SettingsError, resolve_queue_settings
from ringmq.management import shapes
from ringmq.management.admin import CoreAdmin
from ringmq.management.api import Resource
from ringmq.management.errors import BadRequestError
from ringmq.management.parameters import (
    global_parameters,
    set_global_parameter,
    set_vhost_parameter,
    vhost_parameters,
)
from ringmq.management.params import (
    json_body,
    json_response,
    no_content,
    parse_permission,
    parse_policy,
    parse_user,
)
from ringmq.management.records import (
    BindingInfo,
    PermissionInfo,
    PolicyInfo,
    TopicPermissionInfo,
)
from ringmq.management.topicperms import parse_topic_permission
from ringmq.management.topicperms import shape as topic_shape

_BUILT_IN_PREFIX = "amq."


def export(admin: CoreAdmin, vhost: str | None = None) -> dict[str, Any]:
    """The broker's definitions (or one vhost's, without users and vhosts)."""

    def strip(item: dict[str, Any]) -> dict[str, Any]:
        if vhost is not None:
            item.pop("vhost", None)
        return item

    queues = [
        strip(
            {
                "name": q.name,
                "vhost": q.vhost,
                "durable": q.durable,
                "auto_delete": q.auto_delete,
                "arguments": q.arguments,
            }
        )
        for q in admin.queues(vhost)
        if not q.exclusive
    ]
    exchanges = [
        strip(
            {
                "name": x.name,
                "vhost": x.vhost,
                "type": x.type,
                "durable": x.durable,
                "auto_delete": x.auto_delete,
                "internal": x.internal,
                "arguments": x.arguments,
            }
        )
        for x in admin.exchanges(vhost)
        if x.name and not x.name.startswith(_BUILT_IN_PREFIX)
    ]
    bindings = [
        strip({k: v for k, v in shapes.binding(b).items() if k != "properties_key"})
        for b in admin.bindings(vhost)
        if b.source
    ]
    policies = [strip(shapes.policy(p)) for p in admin.policies(vhost)]
    out: dict[str, Any] = {
        "rabbit_version": "3.13.0",
        "rabbitmq_version": "3.13.0",
        "product_name": "RingMQ",
        "product_version": __version__,
    }
    limits = admin.limits()
    parameters = vhost_parameters(admin, vhost)  # the vhost limits and the ones kept
    if vhost is None:
        out["users"] = [
            shapes.user(u)
            | ({"limits": dict(limits.users[u.name])} if u.name in limits.users else {})
            for u in admin.users()
        ]
        out["vhosts"] = [{"name": v, "description": "", "tags": []} for v in admin.vhosts()]
        out["permissions"] = [shapes.permission(p) for p in admin.permissions()]
        out["topic_permissions"] = [topic_shape(t) for t in admin.topic_permissions()]
        out["parameters"] = parameters
        out["global_parameters"] = global_parameters(admin)
    elif parameters:
        out["parameters"] = [strip(p) for p in parameters]
    out["policies"] = policies
    out["queues"] = queues
    out["exchanges"] = exchanges
    out["bindings"] = bindings
    return out


@dataclass(slots=True)
class _User:
    name: str
    password_hash: str
    tags: list[str]


@dataclass(slots=True)
class _Plan:
    vhosts: list[str]
    users: list[_User]
    permissions: list[PermissionInfo]
    policies: list[PolicyInfo]
    exchanges: list[dict[str, Any]]
    queues: list[dict[str, Any]]
    bindings: list[BindingInfo]
    vhost_limits: dict[str, dict[str, int]]
    user_limits: dict[str, dict[str, int]]
    topic_permissions: list[TopicPermissionInfo]
    parameters: list[tuple[str, str, str, Any]]
    """(vhost, component, name, value) of the components ringmq keeps without acting on."""
    globals: dict[str, Any]


def _list(doc: dict[str, Any], key: str) -> list[dict[str, Any]]:
    value = doc.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise BadRequestError(f"definitions: {key} must be a list of objects")
    return value


def _field(item: dict[str, Any], key: str, kind: type, where: str, default: Any = None) -> Any:
    value = item.get(key, default)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise BadRequestError(f"definitions: {where}: {key} must be {kind.__name__}, got {value!r}")
    return value


class _Refusals:
    """Every refusal of one document: each item is checked in its own `each()` block, so a
    refused item is reported and the check goes on (nothing is applied if any is refused)."""

    def __init__(self) -> None:
        self.reasons: list[str] = []

    @contextmanager
    def each(self) -> Iterator[None]:
        try:
            yield
        except BadRequestError as exc:
            self.reasons.append(exc.reason.removeprefix("definitions: "))

    def check(self) -> None:
        if self.reasons:
            n = len(self.reasons)
            raise BadRequestError(
                f"definitions: {n} refused, nothing applied: " + "; ".join(self.reasons)
            )


_VHOST_LIMITS_COMPONENT: Final = "vhost-limits"


def _limits(value: Any, allowed: tuple[str, ...], where: str) -> dict[str, int]:
    if not isinstance(value, dict):
        raise BadRequestError(f"definitions: {where}: limits must be an object")
    out: dict[str, int] = {}
    for name, n in value.items():
        if name not in allowed or type(n) is not int:
            raise BadRequestError(f"definitions: {where}: bad limit {name!r}: {n!r}")
        out[name] = n
    return out


def _plan(admin: CoreAdmin, doc: dict[str, Any], only_vhost: str | None) -> _Plan:
    refusals = _Refusals()
    each = refusals.each
    known_vhosts = set(admin.vhosts())
    new_vhosts: list[str] = []
    users: list[_User] = []
    permissions: list[PermissionInfo] = []
    topic_permissions: list[TopicPermissionInfo] = []
    vhost_limits: dict[str, dict[str, int]] = {}
    user_limits: dict[str, dict[str, int]] = {}
    parameters: list[tuple[str, str, str, Any]] = []
    globals_: dict[str, Any] = {}
    if only_vhost is None:
        for v in _list(doc, "vhosts"):
            with each():
                name = _field(v, "name", str, "vhost")
                if not name:
                    raise BadRequestError("definitions: empty vhost name")
                # RabbitMQ 3.11+: the type of queues declared without x-queue-type (also in
                # 4.x's `metadata`). ringmq declares classic ones: any other is refused.
                meta = v.get("metadata")
                dqt = v.get("default_queue_type") or (
                    meta.get("default_queue_type") if isinstance(meta, dict) else None
                )
                if dqt not in (None, "classic", "undefined"):
                    raise BadRequestError(
                        f"definitions: vhost {name!r}: default_queue_type {dqt!r} is not "
                        "supported (ringmq's default is classic; declare x-queue-type)"
                    )
                if name not in known_vhosts:
                    new_vhosts.append(name)
                    known_vhosts.add(name)
        user_names = {u.name for u in admin.users()}
        for u in _list(doc, "users"):
            with each():
                name = _field(u, "name", str, "user")
                where = f"user {name!r}"
                if not name:
                    raise BadRequestError("definitions: empty user name")
                if "password" in u:
                    raise BadRequestError(f"definitions: {where}: give password_hash, not password")
                try:
                    _, password_hash, tags = parse_user(
                        {k: v for k, v in u.items() if k != "limits"}
                        | {"password_hash": u.get("password_hash")}
                    )
                except BadRequestError as exc:
                    raise BadRequestError(f"definitions: {where}: {exc.reason}") from None
                if u.get("limits"):  # RabbitMQ 3.9+: the user's limits
                    user_limits[name] = _limits(u["limits"], USER_LIMITS, where)
                users.append(_User(name, password_hash or "", tags))
                user_names.add(name)
        for p in _list(doc, "permissions"):
            with each():
                user = _field(p, "user", str, "permission")
                vhost = _field(p, "vhost", str, "permission")
                where = f"permission of {user!r} in {vhost!r}"
                if user not in user_names:
                    raise BadRequestError(f"definitions: {where}: no such user")
                if vhost not in known_vhosts:
                    raise BadRequestError(f"definitions: {where}: vhost does not exist")
                try:
                    permissions.append(parse_permission(vhost, user, p))
                except BadRequestError as exc:
                    raise BadRequestError(f"definitions: {where}: {exc.reason}") from None
        for t in _list(doc, "topic_permissions"):
            with each():
                user = _field(t, "user", str, "topic permission")
                vhost = _field(t, "vhost", str, "topic permission")
                where = f"topic permission of {user!r} in {vhost!r}"
                if user not in user_names:
                    raise BadRequestError(f"definitions: {where}: no such user")
                if vhost not in known_vhosts:
                    raise BadRequestError(f"definitions: {where}: vhost does not exist")
                try:
                    topic_permissions.append(parse_topic_permission(vhost, user, t))
                except BadRequestError as exc:
                    raise BadRequestError(f"definitions: {where}: {exc.reason}") from None
        for g in _list(doc, "global_parameters"):
            with each():  # kept and shown, acted on by none (core/parameters.py)
                name = _field(g, "name", str, "global parameter")
                if not name or "value" not in g:
                    raise BadRequestError(f"definitions: global parameter {name!r}: no value")
                globals_[name] = g["value"]

    def vhost_of(item: dict[str, Any], where: str) -> str:
        vhost = only_vhost if only_vhost is not None else item.get("vhost", "/")
        if not isinstance(vhost, str) or vhost not in known_vhosts:
            raise BadRequestError(f"definitions: {where}: vhost {vhost!r} does not exist")
        return vhost

    for prm in _list(doc, "parameters"):
        with each():
            component = prm.get("component")
            where = f"parameter {component!r}/{prm.get('name')!r}"
            component = _field(prm, "component", str, where)
            name = _field(prm, "name", str, where)
            if not component or not name or "value" not in prm:
                raise BadRequestError(f"definitions: {where}: needs component, name and value")
            vhost = vhost_of(prm, where)
            if component == _VHOST_LIMITS_COMPONENT:  # acted on: the vhost's limits
                vhost_limits[vhost] = _limits(prm.get("value"), VHOST_LIMITS, where)
            else:  # kept and shown, not acted on (federation, shovel...: core/parameters.py)
                parameters.append((vhost, component, name, prm["value"]))

    policies = []
    for p in _list(doc, "policies"):
        with each():
            where = f"policy {p.get('name')!r}"
            vhost = vhost_of(p, where)
            policies.append(parse_policy(vhost, _field(p, "name", str, where), p))

    existing_x = {(x.vhost, x.name): x for x in admin.exchanges()}
    exchanges = []
    for x in _list(doc, "exchanges"):
        with each():
            where = f"exchange {x.get('name')!r}"
            spec = {
                "vhost": vhost_of(x, where),
                "name": _field(x, "name", str, where),
                "type": _field(x, "type", str, where),
                "durable": _field(x, "durable", bool, where, True),
                "auto_delete": _field(x, "auto_delete", bool, where, False),
                "internal": _field(x, "internal", bool, where, False),
                "arguments": _field(x, "arguments", dict, where, {}),
            }
            try:
                parse_exchange_type(spec["type"], spec["arguments"])
            except ValueError as exc:
                raise BadRequestError(f"definitions: {where}: {exc}") from None
            old = existing_x.get((spec["vhost"], spec["name"]))
            if old is not None and (old.type, old.durable, old.auto_delete, old.internal) != (
                spec["type"],
                spec["durable"],
                spec["auto_delete"],
                spec["internal"],
            ):
                raise BadRequestError(f"definitions: {where} exists with different settings")
            exchanges.append(spec)

    existing_q = {(q.vhost, q.name): q for q in admin.queues()}
    queues = []
    for q in _list(doc, "queues"):
        with each():
            where = f"queue {q.get('name')!r}"
            spec = {
                "vhost": vhost_of(q, where),
                "name": _field(q, "name", str, where),
                "durable": _field(q, "durable", bool, where, True),
                "auto_delete": _field(q, "auto_delete", bool, where, False),
                "arguments": _field(q, "arguments", dict, where, {}),
            }
            if not spec["name"]:
                raise BadRequestError(f"definitions: {where}: empty queue name")
            try:  # the arguments as a declare checks them (x-queue-type, types, values)
                resolve_queue_settings(spec["name"], spec["arguments"])
            except SettingsError as exc:
                raise BadRequestError(f"definitions: {where}: {exc}") from None
            old_q = existing_q.get((spec["vhost"], spec["name"]))
            if old_q is not None and (old_q.durable, old_q.auto_delete, old_q.arguments) != (
                spec["durable"],
                spec["auto_delete"],
                spec["arguments"],
            ):
                raise BadRequestError(f"definitions: {where} exists with different settings")
            queues.append(spec)

    x_names = set(existing_x) | {(x["vhost"], x["name"]) for x in exchanges}
    q_names = set(existing_q) | {(q["vhost"], q["name"]) for q in queues}
    bindings = []
    for b in _list(doc, "bindings"):
        with each():
            where = f"binding {b.get('source')!r} -> {b.get('destination')!r}"
            vhost = vhost_of(b, where)
            dtype = _field(b, "destination_type", str, where, "queue")
            if dtype not in ("queue", "exchange"):
                raise BadRequestError(f"definitions: {where}: bad destination_type {dtype!r}")
            binding = BindingInfo(
                vhost=vhost,
                source=_field(b, "source", str, where),
                destination=_field(b, "destination", str, where),
                destination_type="queue" if dtype == "queue" else "exchange",
                routing_key=_field(b, "routing_key", str, where, ""),
                arguments=_field(b, "arguments", dict, where, {}),
            )
            if (vhost, binding.source) not in x_names:
                raise BadRequestError(f"definitions: {where}: no source exchange")
            dest_known = q_names if dtype == "queue" else x_names
            if (vhost, binding.destination) not in dest_known:
                raise BadRequestError(f"definitions: {where}: no destination {dtype}")
            bindings.append(binding)
    refusals.check()
    return _Plan(
        new_vhosts,
        users,
        permissions,
        policies,
        exchanges,
        queues,
        bindings,
        vhost_limits,
        user_limits,
        topic_permissions,
        parameters,
        globals_,
    )


def import_(
    admin: CoreAdmin, doc: dict[str, Any], vhost: str | None = None, *, now_ms: int
) -> dict[str, int]:
    """Check the whole document, then apply it; returns how many objects of each kind."""
    plan = _plan(admin, doc, vhost)
    for name in plan.vhosts:
        admin.add_vhost(name)
    for u in plan.users:
        admin.add_user(u.name, password=None, password_hash=u.password_hash, tags=u.tags)
    for perm in plan.permissions:
        admin.set_permissions(perm)
    for t in plan.topic_permissions:
        admin.set_topic_permission(t)
    for p in plan.policies:
        admin.set_policy(p, now_ms=now_ms)
    for x in plan.exchanges:
        admin.declare_exchange(
            x["vhost"],
            x["name"],
            type=x["type"],
            durable=x["durable"],
            auto_delete=x["auto_delete"],
            internal=x["internal"],
            arguments=x["arguments"],
            now_ms=now_ms,
        )
    for q in plan.queues:
        admin.declare_queue(
            q["vhost"],
            q["name"],
            durable=q["durable"],
            auto_delete=q["auto_delete"],
            arguments=q["arguments"],
            now_ms=now_ms,
        )
    for b in plan.bindings:
        admin.bind(b, now_ms=now_ms)
    for v, values in plan.vhost_limits.items():
        for name, n in values.items():
            admin.set_limit("vhost", v, name, n)
    for user, values in plan.user_limits.items():
        for name, n in values.items():
            admin.set_limit("user", user, name, n)
    for v, component, name, value in plan.parameters:
        set_vhost_parameter(admin, v, component, name, value)
    for name, value in plan.globals.items():
        set_global_parameter(admin, name, value)
    return {
        "vhosts": len(plan.vhosts),
        "users": len(plan.users),
        "permissions": len(plan.permissions),
        "topic_permissions": len(plan.topic_permissions),
        "policies": len(plan.policies),
        "exchanges": len(plan.exchanges),
        "queues": len(plan.queues),
        "bindings": len(plan.bindings),
        "parameters": len(plan.parameters) + len(plan.vhost_limits),
        "global_parameters": len(plan.globals),
    }


class Definitions(Resource):
    """`GET|POST /api/definitions[/{vhost}]`: export, import."""

    def routes(self) -> list[Route]:
        r = self.api.route
        return [
            r("/api/definitions", self.definitions, ["GET", "POST"]),
            r("/api/definitions/{vhost}", self.definitions, ["GET", "POST"]),
        ]

    async def definitions(self, request: Request) -> Response:
        vhost = self.api.vhost_of(request)
        if request.method == "GET":
            return json_response(export(self.admin, vhost))
        body = await json_body(request)
        import_(self.admin, body, vhost, now_ms=self.clock_ms())
        return no_content()
