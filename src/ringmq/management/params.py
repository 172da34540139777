"""Request parsing and small response helpers shared by the `/api` handlers.

Handlers parse and validate a request completely before they call the facade, so a bad
request (400) never leaves the broker half-changed; the helpers here raise `BadRequestError`
with RabbitMQ-like reasons. `parse_user`, `parse_permission` and `parse_policy` check the
bodies of `PUT /api/users|permissions|policies/...` and the same sections of an imported
definitions document (`definitions`), so both take one set of rules.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Mapping
from typing import Any, cast
from urllib.parse import unquote

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ringmq.management.authz import Principal
from ringmq.management.bodies import json_object
from ringmq.management.errors import BadRequestError
from ringmq.management.records import PermissionInfo, PolicyInfo


def param(request: Request, name: str) -> str:
    return unquote(cast(str, request.path_params[name]))


def as_bool(value: Any, field: str, default: bool) -> bool:
    if value is None:
        return default
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise BadRequestError(f"{field} must be a boolean, got {value!r}")


def as_dict(value: Any, field: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise BadRequestError(f"{field} must be a JSON object, got {value!r}")
    return value


def as_str(value: Any, field: str, default: str | None = None) -> str:
    if value is None and default is not None:
        return default
    if not isinstance(value, str):
        raise BadRequestError(f"{field} must be a string, got {value!r}")
    return value


def as_int(value: Any, field: str, default: int | None = None) -> int:
    if value is None and default is not None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise BadRequestError(f"{field} must be an integer, got {value!r}")
    try:
        return int(value)
    except ValueError:
        raise BadRequestError(f"{field} must be an integer, got {value!r}") from None


def history_window(request: Request, prefix: str) -> tuple[int, int] | None:
    """RabbitMQ's `<prefix>_age` and `<prefix>_incr` query parameters (seconds) as ms, or None
    when neither is given (no samples asked for); 400 on a negative age or an increment < 1."""
    q = request.query_params
    if f"{prefix}_age" not in q and f"{prefix}_incr" not in q:
        return None
    age_s = as_int(q.get(f"{prefix}_age"), f"{prefix}_age", 60)
    incr_s = as_int(q.get(f"{prefix}_incr"), f"{prefix}_incr", 5)
    if age_s < 0 or incr_s <= 0:
        raise BadRequestError(f"{prefix}_age must be >= 0 and {prefix}_incr > 0")
    return age_s * 1000, incr_s * 1000


async def json_body(request: Request) -> dict[str, Any]:
    """The request's body as a JSON object (`{}` when empty); 400 otherwise (`bodies`)."""
    return json_object(await request.body())


def dumps(data: Any) -> str:
    # Starlette's JSONResponse encoding, for a body assembled piece by piece.
    return json.dumps(data, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def json_response(data: Any, status: int = 200) -> JSONResponse:
    return JSONResponse(data, status_code=status)


def no_content(status: int = 204) -> Response:
    return Response(status_code=status)


def caller(request: Request) -> Principal:
    """The caller `Api.guard` authenticated for this request."""
    return cast(Principal, request.state.principal)


def parse_user(body: Mapping[str, Any]) -> tuple[str | None, str | None, list[str]]:
    """(password, password_hash, tags) of a user body; RabbitMQ sends tags comma-separated."""
    raw_tags = body.get("tags", "")
    if isinstance(raw_tags, str):
        tags = [t.strip() for t in raw_tags.split(",") if t.strip()]
    elif isinstance(raw_tags, list) and all(isinstance(t, str) for t in raw_tags):
        tags = list(raw_tags)
    else:
        raise BadRequestError("tags must be a comma-separated string or a list of strings")
    algorithm = body.get("hashing_algorithm", "rabbit_password_hashing_sha256")
    if algorithm != "rabbit_password_hashing_sha256":
        raise BadRequestError(f"unsupported hashing_algorithm {algorithm!r}")
    password = body.get("password")
    password_hash = body.get("password_hash")
    if password is not None and password_hash is not None:
        raise BadRequestError("give password or password_hash, not both")
    if password is None and password_hash is None:
        raise BadRequestError("password or password_hash is required")
    if password is not None:
        password = as_str(password, "password")
    if password_hash is not None:
        password_hash = as_str(password_hash, "password_hash")
        try:
            raw = base64.b64decode(password_hash, validate=True)
        except binascii.Error:
            raise BadRequestError("password_hash is not base64") from None
        if password_hash and len(raw) != 36:
            raise BadRequestError("password_hash must be base64(4-byte salt + sha256)")
    return password, password_hash, tags


def parse_permission(vhost: str, user: str, body: Mapping[str, Any]) -> PermissionInfo:
    """Validate `{"configure", "write", "read"}` (regular expressions)."""
    fields = {}
    for key in ("configure", "write", "read"):
        value = as_str(body.get(key), key)
        try:
            re.compile(value)
        except re.error as exc:
            raise BadRequestError(f"invalid {key} pattern {value!r}: {exc}") from None
        fields[key] = value
    return PermissionInfo(user=user, vhost=vhost, **fields)


def parse_policy(vhost: str, name: str, body: Mapping[str, Any]) -> PolicyInfo:
    """Validate a policy body (`pattern`, `definition`, `priority`, `apply-to`)."""
    pattern = as_str(body.get("pattern"), "pattern")
    definition = as_dict(body.get("definition"), "definition")
    if not definition:
        raise BadRequestError("policy definition must not be empty")
    apply_to = as_str(body.get("apply-to"), "apply-to", "all")
    if apply_to not in ("all", "queues", "exchanges", "classic_queues", "quorum_queues"):
        raise BadRequestError(f"invalid apply-to {apply_to!r}")
    try:
        re.compile(pattern)
    except re.error as exc:
        raise BadRequestError(f"invalid pattern {pattern!r}: {exc}") from None
    return PolicyInfo(
        vhost=vhost,
        name=name,
        pattern=pattern,
        definition=definition,
        priority=as_int(body.get("priority"), "priority", 0),
        apply_to=apply_to,
    )
