"""Who may call which management endpoint: RabbitMQ's user tags and vhost permissions.

Theory of operation: every route the management app serves has one `Rule` per HTTP method in
`RULES`, keyed by the route's path template and method. `Api.guard` (in `api.py`) looks the
rule up before any handler runs: it authenticates the caller (unless the rule is `PUBLIC`),
refuses a request body of the wrong media type (415), applies the rule's `Gate` (which tags
and which vhost access the endpoint needs, RabbitMQ's `is_authorized_*` functions) and then
each `Check` (the configure / write / read permission the operation needs on the queue or
exchange the path names). A route with no rule is refused, so an endpoint cannot be added
without deciding who may call it (and `tests/management/test_authz_matrix.py` fails).

Permission checks are the AMQP ones: `Principal.check` calls the broker's own check
(`core.auth.AuthDB.check` through `CoreAdmin.check_permission`), the one the AMQP channel
uses for declare, publish, get and bind; nothing here matches a regular expression itself.

What a handler may *see* in a listing is decided here too (`Principal.sees_vhost`,
`Principal.sees_owner`), so the listing handlers only filter with these predicates.

Convention for a new endpoint: add its `Route` in `api.py` (or `streams.py`), then one line
per method below: `_r(PATH, "GET", Gate.X)` with, when it acts on a named resource,
`Check(Access.KIND, "queue" | "exchange" | "destination", "<path parameter>")`. Refusals
answer RabbitMQ's 401 `{"error": "not_authorised", "reason": ...}`; the ringmq-native
`/api/streams` routes keep their documented 403 (`Rule.refusal`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Final
from urllib.parse import unquote

from ringmq.amqp.reply_codes import AMQPError
from ringmq.core.auth import Access
from ringmq.core.errors import BrokerError
from ringmq.management.admin import CoreAdmin
from ringmq.management.bodies import decode_json
from ringmq.management.errors import BadRequestError, HttpError
from ringmq.management.records import UserInfo

ADMINISTRATOR: Final = "administrator"
MONITORING: Final = "monitoring"
POLICYMAKER: Final = "policymaker"
MANAGEMENT: Final = "management"
MANAGEMENT_TAGS: Final = frozenset({ADMINISTRATOR, MONITORING, POLICYMAKER, MANAGEMENT})
JSON: Final = "application/json"
PUBLISH_BODY: Final = "application/x-ringmq-publish"
"""The streams bulk publish body (docs/spark.md): a batch of messages, which the Spark writer
sizes by rows, so `Api.guard` reads it without the management body limit (`bodies`)."""


class NotAuthorisedError(HttpError):
    """An authenticated user lacks the tag or permission (RabbitMQ's `not_authorised`)."""

    status = 401
    error = "not_authorised"

    def __init__(self, reason: str, status: int = 401) -> None:
        super().__init__(reason)
        self.status = status
        if status == 403:  # the /api/streams contract (docs/spark.md)
            self.error = "access_refused"


class UnsupportedMediaTypeError(HttpError):
    status = 415
    error = "unsupported_media_type"


class Gate(Enum):
    """Which users may call an endpoint at all (RabbitMQ's `rabbit_mgmt_util:is_authorized_*`)."""

    PUBLIC = "public"
    """No authentication (the Prometheus endpoint and the console's static files)."""
    ANY = "any"
    """Any management tag (`is_authorized`); handlers filter what each user sees."""
    VHOST = "vhost"
    """Administrator, or access to the path's vhost (`is_authorized_vhost`)."""
    VHOST_VISIBLE = "vhost_visible"
    """Administrator, monitoring, or access (`is_authorized_vhost_visible_for_monitoring`)."""
    POLICIES = "policies"
    """Administrator, or policymaker with access to the path's vhost (`..._policies`)."""
    VHOST_ACCESS = "vhost_access"
    """Permissions in the path's vhost, whatever the tags (the aliveness test, which declares,
    publishes and gets there as the user would over AMQP)."""
    MONITOR = "monitor"
    """Administrator or monitoring (`is_authorized_monitor`): node-wide figures."""
    ADMIN = "admin"
    """Administrator (`is_authorized_admin`)."""


_GATE_REFUSAL: Final = {
    Gate.VHOST: "User not authorised to access virtual host",
    Gate.VHOST_VISIBLE: "User not authorised to access virtual host",
    Gate.POLICIES: "User not authorised to access object",
    Gate.VHOST_ACCESS: "User not authorised to access virtual host",
    Gate.MONITOR: "Not monitor user",
    Gate.ADMIN: "Not administrator user",
}


@dataclass(frozen=True, slots=True)
class Check:
    """A permission the operation needs on the resource named by path parameter `param`.

    `kind` is "queue", "exchange" or "destination" (a binding's destination: the path's
    `kind` parameter says `q` or `e`). "amq.default" in a path is the default exchange.
    """

    access: Access
    kind: str
    param: str


@dataclass(frozen=True, slots=True)
class Rule:
    gate: Gate
    checks: tuple[Check, ...] = ()
    body: str = JSON
    """The only media type a non-empty request body may have (else 415)."""
    refusal: int = 401
    """Status of a refused gate or check (401 as RabbitMQ; 403 for /api/streams)."""
    publishes_to: tuple[str, ...] = ()
    """Body fields (`arguments.x` for a declare argument) that name an exchange the declared
    resource will publish into (DLX, AE): AMQP's rule then needs read on the resource (the
    rule's first check) and write on that exchange."""


def _c(access: Access, kind: str, param: str = "name") -> Check:
    return Check(access, kind, param)


CONFIGURE_QUEUE: Final = (_c(Access.CONFIGURE, "queue"),)
READ_QUEUE: Final = (_c(Access.READ, "queue"),)
CONFIGURE_EXCHANGE: Final = (_c(Access.CONFIGURE, "exchange"),)
WRITE_EXCHANGE: Final = (_c(Access.WRITE, "exchange"),)
BINDING: Final = (
    _c(Access.WRITE, "destination", "destination"),
    _c(Access.READ, "exchange", "source"),
)
STREAM_READ: Final = (_c(Access.READ, "queue", "queue"),)
STREAM_WRITE: Final = (_c(Access.WRITE, "exchange", "queue"),)

RULES: dict[tuple[str, str], Rule] = {}


def _r(path: str, methods: str, gate: Gate, checks: tuple[Check, ...] = (), **kw: object) -> None:
    for method in methods.split():
        RULES[(path, method)] = Rule(gate, checks, **kw)  # type: ignore[arg-type]


# -- the table --------------------------------------------------------------------------------
_r("/metrics", "GET", Gate.PUBLIC)  # Prometheus scrapes unauthenticated, as rabbitmq_prometheus
_r("/metrics/per-object", "GET", Gate.PUBLIC)
_r("/metrics/detailed", "GET", Gate.PUBLIC)
_r("/cli/rabbitmqadmin", "GET", Gate.PUBLIC)  # RabbitMQ serves its CLI as a static file
_r("/", "GET HEAD", Gate.PUBLIC)  # the console's static files (Mount "/")
_r("/api/auth", "GET", Gate.PUBLIC)  # how the console logs in: asked before any login
_r("/api/overview", "GET", Gate.ANY)
_r("/api/whoami", "GET", Gate.ANY)
_r("/api/ringmq/rates", "GET", Gate.ANY)  # node-wide history: empty for non-monitors
_r("/api/vhosts", "GET", Gate.ANY)
_r("/api/vhosts/{vhost}", "GET", Gate.VHOST_VISIBLE)
_r("/api/vhosts/{vhost}", "PUT DELETE", Gate.ADMIN)
_r("/api/users", "GET", Gate.ADMIN)
_r("/api/users/{user}", "GET PUT DELETE", Gate.ADMIN)
_r("/api/permissions", "GET", Gate.ADMIN)
_r("/api/permissions/{vhost}/{user}", "GET PUT DELETE", Gate.ADMIN)
_r("/api/topic-permissions", "GET", Gate.ADMIN)
_r("/api/topic-permissions/{vhost}/{user}", "GET PUT DELETE", Gate.ADMIN)
_r("/api/users/{user}/topic-permissions", "GET", Gate.ADMIN)
_r("/api/vhosts/{vhost}/topic-permissions", "GET", Gate.ADMIN)
_r("/api/connections", "GET", Gate.ANY)
_r("/api/connections/{name}", "GET DELETE", Gate.ANY)  # + Principal.require_owner
_r("/api/channels", "GET", Gate.ANY)
_r("/api/consumers", "GET", Gate.ANY)
_r("/api/consumers/{vhost}", "GET", Gate.VHOST_VISIBLE)
_r("/api/exchanges", "GET", Gate.ANY)
_r("/api/exchanges/{vhost}", "GET", Gate.VHOST)
_r("/api/exchanges/{vhost}/{name}", "GET", Gate.VHOST)
_r("/api/exchanges/{vhost}/{name}", "DELETE", Gate.VHOST, CONFIGURE_EXCHANGE)
_r(
    "/api/exchanges/{vhost}/{name}",
    "PUT",
    Gate.VHOST,
    CONFIGURE_EXCHANGE,
    publishes_to=("arguments.alternate-exchange",),
)
_r("/api/exchanges/{vhost}/{name}/publish", "POST", Gate.VHOST, WRITE_EXCHANGE)
_r("/api/exchanges/{vhost}/{name}/bindings/{side}", "GET", Gate.VHOST)
_r("/api/bindings", "GET", Gate.ANY)
_r("/api/bindings/{vhost}", "GET", Gate.VHOST)
_r("/api/bindings/{vhost}/e/{source}/{kind}/{destination}", "GET", Gate.VHOST)
_r("/api/bindings/{vhost}/e/{source}/{kind}/{destination}", "POST", Gate.VHOST, BINDING)
_r("/api/bindings/{vhost}/e/{source}/{kind}/{destination}/{props}", "GET", Gate.VHOST)
_r("/api/bindings/{vhost}/e/{source}/{kind}/{destination}/{props}", "DELETE", Gate.VHOST, BINDING)
_r("/api/queues", "GET", Gate.ANY)
_r("/api/queues/{vhost}", "GET", Gate.VHOST)
_r("/api/queues/{vhost}/{name}", "GET", Gate.VHOST)
_r("/api/queues/{vhost}/{name}", "DELETE", Gate.VHOST, CONFIGURE_QUEUE)
_r(
    "/api/queues/{vhost}/{name}",
    "PUT",
    Gate.VHOST,
    CONFIGURE_QUEUE,
    publishes_to=("arguments.x-dead-letter-exchange",),
)
_r("/api/queues/{vhost}/{name}/bindings", "GET", Gate.VHOST)
_r("/api/queues/{vhost}/{name}/contents", "DELETE", Gate.VHOST, READ_QUEUE)  # purge: read
_r("/api/queues/{vhost}/{name}/get", "POST", Gate.VHOST, READ_QUEUE)
_r("/api/queues/{vhost}/{name}/browse", "POST", Gate.VHOST, READ_QUEUE)  # peek in place
_r(
    "/api/queues/{vhost}/{name}/settings",
    "PUT",
    Gate.VHOST,
    CONFIGURE_QUEUE,
    publishes_to=("dead-letter-exchange", "dead_letter_exchange", "x-dead-letter-exchange"),
)
_r("/api/queues/{vhost}/{name}/scheduled", "GET DELETE", Gate.VHOST, READ_QUEUE)
_r("/api/queues/{vhost}/{name}/groups", "GET", Gate.VHOST)
_r("/api/queues/{vhost}/{name}/groups", "DELETE", Gate.VHOST, CONFIGURE_QUEUE)
_r("/api/queues/{vhost}/{name}/groups/{group}", "DELETE", Gate.VHOST, CONFIGURE_QUEUE)
_r("/api/queues/{vhost}/{name}/scheduled/deliver", "POST", Gate.VHOST, READ_QUEUE)
_r("/api/parameters", "GET", Gate.POLICIES)
_r("/api/parameters/{component}", "GET", Gate.POLICIES)
_r("/api/parameters/{component}/{vhost}", "GET", Gate.POLICIES)
_r("/api/parameters/{component}/{vhost}/{name}", "GET PUT DELETE", Gate.POLICIES)
_r("/api/global-parameters", "GET", Gate.ADMIN)
_r("/api/global-parameters/{name}", "GET PUT DELETE", Gate.ADMIN)
_r("/api/policies", "GET", Gate.POLICIES)
_r("/api/policies/{vhost}", "GET", Gate.POLICIES)
_r("/api/policies/{vhost}/{name}", "GET PUT DELETE", Gate.POLICIES)
_r("/api/definitions", "GET POST", Gate.ADMIN)
_r("/api/vhost-limits", "GET", Gate.MONITOR)
_r("/api/vhost-limits/{vhost}", "GET", Gate.VHOST_VISIBLE)
_r("/api/vhost-limits/{vhost}/{name}", "PUT DELETE", Gate.ADMIN)
_r("/api/user-limits", "GET", Gate.ADMIN)
_r("/api/user-limits/{user}", "GET", Gate.ADMIN)
_r("/api/user-limits/{user}/{name}", "PUT DELETE", Gate.ADMIN)
_r("/api/nodes", "GET", Gate.MONITOR)
_r("/api/nodes/{name}", "GET", Gate.MONITOR)
_r("/api/cluster", "GET", Gate.MONITOR)
_r("/api/cluster/step-down", "POST", Gate.ADMIN)
for _path in ("alarms", "local-alarms", "port-listener/{port}", "virtual-hosts"):
    _r("/api/health/checks/" + _path, "GET", Gate.ANY)
_r("/api/aliveness-test/{vhost}", "GET", Gate.VHOST_ACCESS)
_r("/api/definitions/{vhost}", "GET POST", Gate.ADMIN)
_STREAM = "/api/streams/{vhost}/{queue}"
for _path in ("", "/read", "/log", "/browse"):
    _r(_STREAM + _path, "GET", Gate.VHOST, STREAM_READ, refusal=403)
for _path in ("/reserve", "/settle"):
    _r(_STREAM + _path, "POST", Gate.VHOST, STREAM_READ, refusal=403)
_r(_STREAM + "/leases/{consumer}", "DELETE", Gate.VHOST, STREAM_READ, refusal=403)
_r(_STREAM + "/publish", "POST", Gate.VHOST, STREAM_WRITE, body=PUBLISH_BODY, refusal=403)


def rule_for(path: str, method: str) -> Rule | None:
    """The rule of a route template and method (HEAD follows GET)."""
    found = RULES.get((path, method))
    if found is None and method == "HEAD":
        found = RULES.get((path, "GET"))
    return found


def named_exchanges(rule: Rule, body: bytes) -> list[str]:
    """The exchanges a declare body names in the rule's `publishes_to` fields (strings only;
    a body that is not a JSON object, or a non-string value, is left to the handler's 400)."""
    if not rule.publishes_to or not body.strip():
        return []
    try:
        doc = decode_json(body)
    except BadRequestError:
        return []
    out = []
    for path in rule.publishes_to:
        value: Any = doc
        for part in path.split(".", 1) if path.startswith("arguments.") else (path,):
            value = value.get(part) if isinstance(value, dict) else None
        if isinstance(value, str):
            out.append(value)
    return out


def check_media_type(rule: Rule, content_type: str | None, body: bytes) -> None:
    """Refuse a non-empty body whose media type is not the rule's (RabbitMQ answers 415)."""
    if not body.strip():
        return
    media = (content_type or "").split(";", 1)[0].strip().lower()
    if media != rule.body:
        raise UnsupportedMediaTypeError(
            f"request body must be {rule.body}, got {media or 'no content type'}"
        )


@dataclass(slots=True)
class Principal:
    """An authenticated management user and what it may reach (see module docstring)."""

    user: UserInfo
    admin: CoreAdmin
    _access: dict[str, bool] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.user.name

    def _has(self, *tags: str) -> bool:
        return any(t in self.user.tags for t in tags)

    @property
    def is_admin(self) -> bool:
        return self._has(ADMINISTRATOR)

    @property
    def is_monitor(self) -> bool:
        return self._has(ADMINISTRATOR, MONITORING)

    @property
    def is_policymaker(self) -> bool:
        return self._has(ADMINISTRATOR, POLICYMAKER)

    def has_access(self, vhost: str) -> bool:
        """The user has permissions in `vhost` (it could open an AMQP connection there)."""
        hit = self._access.get(vhost)
        if hit is None:
            hit = self._access[vhost] = self.admin.has_vhost_access(
                self.name, vhost, self.user.grant
            )
        return hit

    def sees_vhost(self, vhost: str) -> bool:
        """Objects of `vhost` appear in listings (RabbitMQ's `filter_vhost`)."""
        return self.is_admin or self.has_access(vhost)

    def sees_vhost_name(self, vhost: str) -> bool:
        """`vhost` appears in /api/vhosts (RabbitMQ's `list_visible_vhosts`)."""
        return self.is_monitor or self.has_access(vhost)

    def sees_owner(self, user: str) -> bool:
        """Connections, channels and consumers of `user` appear (RabbitMQ's `filter_user`)."""
        return self.is_monitor or user == self.name

    def require_owner(self, user: str, method: str, refusal: int = 401) -> None:
        """GET needs monitoring or ownership, DELETE administrator or ownership."""
        allowed = self.is_admin if method == "DELETE" else self.is_monitor
        if not (allowed or user == self.name):
            raise NotAuthorisedError("User not authorised to access object", refusal)

    def gate(self, gate: Gate, vhost: str | None, refusal: int = 401) -> None:
        """Raise unless the user passes `gate` for the (existing) path vhost."""
        if gate in (Gate.PUBLIC, Gate.ANY):
            return
        if gate is Gate.ADMIN:
            ok = self.is_admin
        elif gate is Gate.MONITOR:
            ok = self.is_monitor
        elif gate is Gate.VHOST_ACCESS:
            ok = vhost is None or self.has_access(vhost)
        elif gate is Gate.POLICIES:
            ok = self.is_admin or (
                self.is_policymaker and (vhost is None or self.has_access(vhost))
            )
        elif gate is Gate.VHOST_VISIBLE:
            ok = self.is_monitor or vhost is None or self.has_access(vhost)
        else:
            ok = self.is_admin or vhost is None or self.has_access(vhost)
        if not ok:
            raise NotAuthorisedError(_GATE_REFUSAL[gate], refusal)

    def check(
        self,
        vhost: str,
        checks: Iterable[Check],
        params: dict[str, str],
        refusal: int,
        publishes_to: Iterable[str] = (),
    ) -> None:
        """Apply the rule's permission checks with the broker's AMQP check.

        `publishes_to`: exchanges the declared resource (the first check's) will publish
        into; each needs read on that resource and write on the exchange, as AMQP's declare.
        """
        resources = []
        for c in checks:
            raw = unquote(params[c.param])
            kind = c.kind
            if kind == "destination":
                kind = "queue" if unquote(params.get("kind", "")) == "q" else "exchange"
            name = "" if kind == "exchange" and raw == "amq.default" else raw
            resources.append((kind, name))
            self._amqp_check(vhost, c.access, kind, name, refusal)
        for exchange in publishes_to:
            self._amqp_check(vhost, Access.READ, *resources[0], refusal)
            self._amqp_check(vhost, Access.WRITE, "exchange", exchange, refusal)

    def _amqp_check(self, vhost: str, access: Access, kind: str, name: str, refusal: int) -> None:
        try:
            self.admin.check_permission(self.name, vhost, access, kind, name, self.user.grant)
        except (AMQPError, BrokerError) as exc:
            raise NotAuthorisedError(exc.explanation, refusal) from None
