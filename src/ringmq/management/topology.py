"""`/api/exchanges` and `/api/bindings`: declare, delete, list and publish to exchanges; bind and
unbind queues and exchanges (RabbitMQ's management routes and JSON shapes).

Stateless: each handler validates the request, then makes one facade call (`admin.CoreAdmin`).
"""

from __future__ import annotations

import base64
import binascii

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ringmq.core.errors import BrokerError
from ringmq.core.routing import parse_exchange_type
from ringmq.management import shapes
from ringmq.management.api import Resource
from ringmq.management.authz import NotAuthorisedError
from ringmq.management.errors import BadRequestError, NotFoundError
from ringmq.management.params import (
    as_bool,
    as_dict,
    as_str,
    caller,
    json_body,
    json_response,
    no_content,
    param,
)
from ringmq.management.records import BindingInfo


class Topology(Resource):
    """Exchanges and bindings."""

    def routes(self) -> list[Route]:
        r = self.api.route
        return [
            r("/api/exchanges", self.exchanges, ["GET"]),
            r("/api/exchanges/{vhost}", self.exchanges, ["GET"]),
            r("/api/exchanges/{vhost}/{name}", self.exchange, ["GET", "PUT", "DELETE"]),
            r("/api/exchanges/{vhost}/{name}/publish", self.publish, ["POST"]),
            r("/api/exchanges/{vhost}/{name}/bindings/{side}", self.exchange_bindings, ["GET"]),
            r("/api/bindings", self.bindings, ["GET"]),
            r("/api/bindings/{vhost}", self.bindings, ["GET"]),
            r(
                "/api/bindings/{vhost}/e/{source}/{kind}/{destination}",
                self.binding_pair,
                ["GET", "POST"],
            ),
            r(
                "/api/bindings/{vhost}/e/{source}/{kind}/{destination}/{props}",
                self.binding_one,
                ["GET", "DELETE"],
            ),
        ]

    # -- exchanges -----------------------------------------------------------------------

    async def exchanges(self, request: Request) -> Response:
        vhost = self.api.vhost_of(request)
        who = caller(request)
        return self.api.listing(
            request,
            [
                shapes.exchange(x, self.sampler)
                for x in self.admin.exchanges(vhost)
                if who.sees_vhost(x.vhost)
            ],
        )

    async def exchange(self, request: Request) -> Response:
        vhost = self.api.vhost_of(request)
        assert vhost is not None
        name = self.api.exchange_name(param(request, "name"))
        if request.method == "GET":
            return json_response(self.api.find_exchange(vhost, name))
        if request.method == "DELETE":
            self.api.find_exchange(vhost, name)
            if_unused = as_bool(request.query_params.get("if-unused"), "if-unused", False)
            self.admin.delete_exchange(vhost, name, if_unused=if_unused, now_ms=self.clock_ms())
            return no_content()
        body = await json_body(request)
        if not name:
            raise BadRequestError("cannot redeclare the default exchange")
        if name.startswith("amq.") and not any(x.name == name for x in self.admin.exchanges(vhost)):
            # AMQP's rule (403 ACCESS_REFUSED on exchange.declare), as a bad request here.
            raise BadRequestError(f"ACCESS_REFUSED - exchange name {name!r} uses reserved 'amq.'")
        xtype = as_str(body.get("type"), "type")
        try:
            parse_exchange_type(xtype, as_dict(body.get("arguments"), "arguments"))
        except ValueError as exc:
            raise BadRequestError(str(exc)) from None
        created = self.admin.declare_exchange(
            vhost,
            name,
            type=xtype,
            durable=as_bool(body.get("durable"), "durable", True),
            auto_delete=as_bool(body.get("auto_delete"), "auto_delete", False),
            internal=as_bool(body.get("internal"), "internal", False),
            arguments=as_dict(body.get("arguments"), "arguments"),
            now_ms=self.clock_ms(),
        )
        return no_content(201 if created else 204)

    async def publish(self, request: Request) -> Response:
        vhost = self.api.vhost_of(request)
        assert vhost is not None
        name = self.api.exchange_name(param(request, "name"))
        body = await json_body(request)
        routing_key = as_str(body.get("routing_key"), "routing_key")
        properties = as_dict(body.get("properties"), "properties")
        text = as_str(body.get("payload"), "payload")
        encoding = as_str(body.get("payload_encoding"), "payload_encoding", "string")
        if encoding == "string":
            raw = text.encode("utf-8")
        elif encoding == "base64":
            try:
                raw = base64.b64decode(text, validate=True)
            except binascii.Error:
                raise BadRequestError("payload is not valid base64") from None
        else:
            raise BadRequestError(f"payload_encoding must be string or base64, got {encoding!r}")
        if name:
            self.api.find_exchange(vhost, name)
        self._topic(request, vhost, name, "write", routing_key)
        routed = self.admin.publish(
            vhost, name, routing_key, raw, properties, now_ms=self.clock_ms()
        )
        return json_response({"routed": routed})

    def _topic(self, request: Request, vhost: str, exchange: str, access: str, key: str) -> None:
        # the caller's topic permission on `exchange` (docs/security.md): 401 not_authorised
        try:
            who = caller(request)
            self.admin.check_topic(who.name, vhost, exchange, access, key, who.user.grant)
        except BrokerError as exc:
            raise NotAuthorisedError(exc.explanation) from None

    async def exchange_bindings(self, request: Request) -> Response:
        vhost = self.api.vhost_of(request)
        assert vhost is not None
        name = self.api.exchange_name(param(request, "name"))
        side = param(request, "side")
        if side not in ("source", "destination"):
            raise NotFoundError()
        self.api.find_exchange(vhost, name)
        items = [
            shapes.binding(b)
            for b in self.admin.bindings(vhost)
            if (
                b.source == name
                if side == "source"
                else (b.destination_type == "exchange" and b.destination == name)
            )
        ]
        return self.api.listing(request, items)

    # -- bindings ------------------------------------------------------------------------

    async def bindings(self, request: Request) -> Response:
        vhost = self.api.vhost_of(request)
        who = caller(request)
        return self.api.listing(
            request,
            [shapes.binding(b) for b in self.admin.bindings(vhost) if who.sees_vhost(b.vhost)],
        )

    def _pair(self, request: Request) -> tuple[str, str, str, str]:
        vhost = self.api.vhost_of(request)
        assert vhost is not None
        kind = param(request, "kind")
        if kind not in ("q", "e"):
            raise NotFoundError()
        source = self.api.exchange_name(param(request, "source"))
        destination = param(request, "destination")
        self.api.find_exchange(vhost, source)
        if kind == "q":
            self.api.find_queue(vhost, destination)
        else:
            self.api.find_exchange(vhost, destination)
        return vhost, source, "queue" if kind == "q" else "exchange", destination

    def _pair_bindings(self, vhost: str, source: str, dtype: str, dest: str) -> list[BindingInfo]:
        return [
            b
            for b in self.admin.bindings(vhost)
            if b.source == source and b.destination_type == dtype and b.destination == dest
        ]

    async def binding_pair(self, request: Request) -> Response:
        vhost, source, dtype, dest = self._pair(request)
        if request.method == "GET":
            items = [shapes.binding(b) for b in self._pair_bindings(vhost, source, dtype, dest)]
            return self.api.listing(request, items)
        body = await json_body(request)
        routing_key = as_str(body.get("routing_key"), "routing_key", "")
        arguments = as_dict(body.get("arguments"), "arguments")
        if not source:
            raise BadRequestError("cannot bind to the default exchange")
        self._topic(request, vhost, source, "read", routing_key)
        binding = BindingInfo(
            vhost=vhost,
            source=source,
            destination=dest,
            destination_type="queue" if dtype == "queue" else "exchange",
            routing_key=routing_key,
            arguments=arguments,
        )
        self.admin.bind(binding, now_ms=self.clock_ms())
        location = shapes.properties_key(routing_key, arguments)
        return Response(status_code=201, headers={"Location": location})

    async def binding_one(self, request: Request) -> Response:
        vhost, source, dtype, dest = self._pair(request)
        props = param(request, "props")
        found = next(
            (
                b
                for b in self._pair_bindings(vhost, source, dtype, dest)
                if shapes.properties_key(b.routing_key, b.arguments) == props
            ),
            None,
        )
        if found is None:
            raise NotFoundError(f"no binding {props!r}")
        if request.method == "GET":
            return json_response(shapes.binding(found))
        self.admin.unbind(found, now_ms=self.clock_ms())
        return no_content()
