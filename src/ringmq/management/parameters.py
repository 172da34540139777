"""`/api/parameters` and `/api/global-parameters`: RabbitMQ's runtime parameters.

Shapes as RabbitMQ's HTTP API: `GET /api/parameters[/{component}[/{vhost}[/{name}]]]` answers
`{"vhost", "component", "name", "value"}` objects, `PUT .../{component}/{vhost}/{name}` takes
`{"value": ...}`, `DELETE` removes one; `GET /api/global-parameters[/{name}]` answers
`{"name", "value"}`, with `PUT` and `DELETE` by name. Each listed parameter also says whether
ringmq acts on it (`acted_on`, and `not_acted_on` with the reason when it does not:
`core/parameters.py`). The `vhost-limits` component is the vhost's limits (`/api/vhost-limits`):
read from and written to them. The definitions export and import use `vhost_parameters` and
`global_parameters` here.

Stateless: one call into the facade (`admin.CoreAdmin`) per request, on the loop thread.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ringmq.core.limits import LimitError
from ringmq.core.parameters import LIMITS_COMPONENT, not_acted_on
from ringmq.management.admin import CoreAdmin
from ringmq.management.api import Resource
from ringmq.management.errors import BadRequestError, NotFoundError
from ringmq.management.params import caller, json_body, json_response, no_content, param


def _noted(item: dict[str, Any], component: str | None) -> dict[str, Any]:
    why = not_acted_on(component, item["name"])
    return item | {"acted_on": why is None} | ({"not_acted_on": why} if why else {})


def vhost_parameters(admin: CoreAdmin, vhost: str | None = None) -> list[dict[str, Any]]:
    """Every vhost-scoped parameter (of `vhost`, or all), RabbitMQ's shape, sorted: the vhost
    limits as component `vhost-limits`, then the ones kept from definitions."""
    out = [
        {"vhost": v, "component": LIMITS_COMPONENT, "name": "limits", "value": dict(vals)}
        for v, vals in admin.limits().vhosts.items()
        if vals and (vhost is None or v == vhost)
    ]
    out += [
        {"vhost": v, "component": c, "name": n, "value": value}
        for (v, c, n), value in admin.parameters().vhost.items()
        if vhost is None or v == vhost
    ]
    return sorted(out, key=lambda p: (p["vhost"], p["component"], p["name"]))


def global_parameters(admin: CoreAdmin) -> list[dict[str, Any]]:
    """Every global parameter kept, RabbitMQ's shape, by name."""
    return [{"name": n, "value": v} for n, v in sorted(admin.parameters().globals.items())]


def set_vhost_parameter(
    admin: CoreAdmin, vhost: str, component: str, name: str, value: Any
) -> None:
    """Keep (or, for `vhost-limits`, apply) one parameter; BadRequestError for a bad one."""
    if component == LIMITS_COMPONENT:
        if not isinstance(value, dict):
            raise BadRequestError("vhost-limits value must be an object of limits")
        try:
            for limit, n in value.items():
                admin.set_limit("vhost", vhost, str(limit), n)
        except LimitError as exc:
            raise BadRequestError(str(exc)) from None
    else:
        admin.set_parameter(vhost, component, name, value)


def set_global_parameter(admin: CoreAdmin, name: str, value: Any) -> None:
    admin.set_parameter(None, "", name, value)


class Parameters(Resource):
    """Runtime parameters, per vhost and global."""

    def routes(self) -> list[Route]:
        r = self.api.route
        return [
            r("/api/parameters", self.parameters, ["GET"]),
            r("/api/parameters/{component}", self.parameters, ["GET"]),
            r("/api/parameters/{component}/{vhost}", self.parameters, ["GET"]),
            r(
                "/api/parameters/{component}/{vhost}/{name}",
                self.parameter,
                ["GET", "PUT", "DELETE"],
            ),
            r("/api/global-parameters", self.globals, ["GET"]),
            r("/api/global-parameters/{name}", self.global_, ["GET", "PUT", "DELETE"]),
        ]

    async def parameters(self, request: Request) -> Response:
        vhost = self.api.vhost_of(request)
        component = request.path_params.get("component")
        who = caller(request)  # a policymaker sees the parameters of its own vhosts
        items = [
            _noted(p, p["component"])
            for p in vhost_parameters(self.admin, vhost)
            if (component is None or p["component"] == component) and who.sees_vhost(p["vhost"])
        ]
        return self.api.listing(request, items)

    async def parameter(self, request: Request) -> Response:
        vhost = self.api.vhost_of(request)
        assert vhost is not None
        component, name = param(request, "component"), param(request, "name")
        if request.method == "PUT":
            body = await json_body(request)
            if "value" not in body:
                raise BadRequestError("a parameter needs a 'value'")
            set_vhost_parameter(self.admin, vhost, component, name, body["value"])
            return no_content()
        if request.method == "DELETE":
            if component == LIMITS_COMPONENT:
                for limit in list(self.admin.limits().vhosts.get(vhost, {})):
                    self.admin.clear_limit("vhost", vhost, limit)
            elif not self.admin.clear_parameter(vhost, component, name):
                raise NotFoundError(f"no parameter {component}/{name} in vhost {vhost!r}")
            return no_content()
        for p in vhost_parameters(self.admin, vhost):
            if p["component"] == component and p["name"] == name:
                return json_response(_noted(p, component))
        raise NotFoundError(f"no parameter {component}/{name} in vhost {vhost!r}")

    async def globals(self, request: Request) -> Response:
        items = [_noted(g, None) for g in global_parameters(self.admin)]
        return self.api.listing(request, items)

    async def global_(self, request: Request) -> Response:
        name = param(request, "name")
        table = self.admin.parameters()
        if request.method == "PUT":
            body = await json_body(request)
            if "value" not in body:
                raise BadRequestError("a global parameter needs a 'value'")
            set_global_parameter(self.admin, name, body["value"])
            return no_content()
        if request.method == "DELETE":
            if not self.admin.clear_parameter(None, "", name):
                raise NotFoundError(f"no global parameter {name!r}")
            return no_content()
        if name not in table.globals:
            raise NotFoundError(f"no global parameter {name!r}")
        return json_response(_noted({"name": name, "value": table.globals[name]}, None))
