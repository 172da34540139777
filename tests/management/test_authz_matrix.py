"""Who may call what: tag x permission x endpoint, over HTTP against a real broker.

The model below is written out independently of `management.authz` (RabbitMQ's rules as its
management plugin applies them): each endpoint states the tag gate and the permission it needs
in vhost "/", and every user of the grid (four tags x three permission sets, plus a user
without a management tag) must be refused exactly when the model says so. Destructive cases
name objects that do not exist, so an allowed call answers 404 and a refused one 401/403,
whatever order the cases run in. `test_every_route_is_in_the_matrix` enumerates the routes the
app serves: a new route without a case fails it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx
import pika
import pytest
from starlette.routing import Mount, Route

from ringmq.connector.records import encode_publish
from ringmq.node import BrokerThread
from ringmq.server.runtime import ServerOptions

pytestmark = pytest.mark.integration

TAGS = ("management", "policymaker", "monitoring", "administrator")
PERMS: dict[str, dict[str, str] | None] = {
    "none": None,
    # read the one open queue, nothing else (no configure, no write)
    "ro": {"configure": "", "write": "", "read": r"^q\.open$"},
    "rw": {"configure": ".*", "write": ".*", "read": ".*"},
}
USERS = [f"{tag}-{perm}" for tag in TAGS for perm in PERMS] + ["app-rw"]
PASSWORD = "pw"
OWNER = "management-rw"
"""Owns the AMQP connection the connection/channel cases look at."""


@dataclass(frozen=True)
class Case:
    method: str
    template: str
    path: str
    gate: str
    """public, any, vhost, vhost_visible, policies, policymaker, monitor or admin."""
    perm: tuple[str, str] | None = None
    """(access, resource name) needed in vhost "/", as AMQP checks it."""
    body: Any = None
    raw: bytes | None = None
    content_type: str | None = None


Q = "/api/queues/{vhost}/{name}"
X = "/api/exchanges/{vhost}/{name}"
PAIR = "/api/bindings/{vhost}/e/{source}/{kind}/{destination}"
ST = "/api/streams/{vhost}/{queue}"
POLICY = {"pattern": "^nomatch$", "definition": {"max-length": 5}}
PUB = encode_publish([("q.open", b"\x00\x00", b"m")])

CASES = [
    Case("GET", "/metrics", "/metrics", "public"),
    Case("GET", "/metrics/per-object", "/metrics/per-object", "public"),
    Case("GET", "/metrics/detailed", "/metrics/detailed?family=queue_coarse_metrics", "public"),
    Case("GET", "/cli/rabbitmqadmin", "/cli/rabbitmqadmin", "public"),
    Case("GET", "/api/auth", "/api/auth", "public"),
    Case("GET", "/api/overview", "/api/overview", "any"),
    Case("GET", "/api/whoami", "/api/whoami", "any"),
    Case("GET", "/api/ringmq/rates", "/api/ringmq/rates", "any"),
    Case("GET", "/api/vhosts", "/api/vhosts", "any"),
    Case("GET", "/api/vhosts/{vhost}", "/api/vhosts/%2F", "vhost_visible"),
    Case("PUT", "/api/vhosts/{vhost}", "/api/vhosts/made", "admin", body={}),
    Case("DELETE", "/api/vhosts/{vhost}", "/api/vhosts/gone", "admin"),
    Case("GET", "/api/users", "/api/users", "admin"),
    Case("GET", "/api/users/{user}", "/api/users/guest", "admin"),
    Case("PUT", "/api/users/{user}", "/api/users/made", "admin", body={"password": "x"}),
    Case("DELETE", "/api/users/{user}", "/api/users/gone", "admin"),
    Case("GET", "/api/permissions", "/api/permissions", "admin"),
    Case("GET", "/api/permissions/{vhost}/{user}", "/api/permissions/%2F/guest", "admin"),
    Case("PUT", "/api/permissions/{vhost}/{user}", "/api/permissions/%2F/gone", "admin", body={}),
    Case("DELETE", "/api/permissions/{vhost}/{user}", "/api/permissions/%2F/gone", "admin"),
    Case("GET", "/api/topic-permissions", "/api/topic-permissions", "admin"),
    Case(
        "GET",
        "/api/topic-permissions/{vhost}/{user}",
        "/api/topic-permissions/%2F/guest",
        "admin",
    ),
    Case(
        "PUT",
        "/api/topic-permissions/{vhost}/{user}",
        "/api/topic-permissions/%2F/gone",
        "admin",
        body={},
    ),
    Case(
        "DELETE",
        "/api/topic-permissions/{vhost}/{user}",
        "/api/topic-permissions/%2F/gone",
        "admin",
    ),
    Case(
        "GET", "/api/users/{user}/topic-permissions", "/api/users/guest/topic-permissions", "admin"
    ),
    Case(
        "GET", "/api/vhosts/{vhost}/topic-permissions", "/api/vhosts/%2F/topic-permissions", "admin"
    ),
    Case("GET", "/api/connections", "/api/connections", "any"),
    Case("GET", "/api/connections/{name}", "/api/connections/gone", "any"),
    Case("DELETE", "/api/connections/{name}", "/api/connections/gone", "any"),
    Case("GET", "/api/channels", "/api/channels", "any"),
    Case("GET", "/api/consumers", "/api/consumers", "any"),
    Case("GET", "/api/consumers/{vhost}", "/api/consumers/%2F", "vhost_visible"),
    Case("GET", "/api/exchanges", "/api/exchanges", "any"),
    Case("GET", "/api/exchanges/{vhost}", "/api/exchanges/%2F", "vhost"),
    Case("GET", X, "/api/exchanges/%2F/x.open", "vhost"),
    Case(
        "PUT", X, "/api/exchanges/%2F/x.open", "vhost", ("configure", "x.open"), {"type": "direct"}
    ),
    Case("DELETE", X, "/api/exchanges/%2F/x.gone", "vhost", ("configure", "x.gone")),
    Case(
        "POST",
        X + "/publish",
        "/api/exchanges/%2F/x.open/publish",
        "vhost",
        ("write", "x.open"),
        {"routing_key": "q.open", "payload": "m"},
    ),
    Case(
        "POST",
        X + "/publish",
        "/api/exchanges/%2F/amq.default/publish",
        "vhost",
        ("write", "amq.default"),
        {"routing_key": "q.open", "payload": "m"},
    ),
    Case("GET", X + "/bindings/{side}", "/api/exchanges/%2F/x.open/bindings/source", "vhost"),
    Case("GET", "/api/bindings", "/api/bindings", "any"),
    Case("GET", "/api/bindings/{vhost}", "/api/bindings/%2F", "vhost"),
    Case("GET", PAIR, "/api/bindings/%2F/e/x.open/q/q.open", "vhost"),
    # binding: write on the destination and read on the source (q.open readable, x.open not)
    Case("POST", PAIR, "/api/bindings/%2F/e/x.open/q/q.open", "vhost", ("bind", ""), body={}),
    Case("GET", PAIR + "/{props}", "/api/bindings/%2F/e/x.open/q/q.open/gone", "vhost"),
    Case(
        "DELETE",
        PAIR + "/{props}",
        "/api/bindings/%2F/e/x.open/q/q.open/gone",
        "vhost",
        ("bind", ""),
    ),
    Case("GET", "/api/queues", "/api/queues", "any"),
    Case("GET", "/api/queues/{vhost}", "/api/queues/%2F", "vhost"),
    Case("GET", Q, "/api/queues/%2F/q.open", "vhost"),
    Case("PUT", Q, "/api/queues/%2F/q.made", "vhost", ("configure", "q.made"), body={}),
    Case("DELETE", Q, "/api/queues/%2F/q.gone", "vhost", ("configure", "q.gone")),
    Case("GET", Q + "/bindings", "/api/queues/%2F/q.open/bindings", "vhost"),
    Case("DELETE", Q + "/contents", "/api/queues/%2F/q.open/contents", "vhost", ("read", "q.open")),
    Case(
        "DELETE",
        Q + "/contents",
        "/api/queues/%2F/q.secret/contents",
        "vhost",
        ("read", "q.secret"),
    ),
    Case(
        "POST", Q + "/get", "/api/queues/%2F/q.open/get", "vhost", ("read", "q.open"), {"count": 1}
    ),
    Case("POST", Q + "/get", "/api/queues/%2F/q.secret/get", "vhost", ("read", "q.secret"), {}),
    Case(
        "PUT",
        Q + "/settings",
        "/api/queues/%2F/q.open/settings",
        "vhost",
        ("configure", "q.open"),
        {"max-length": 1000},
    ),
    Case("GET", Q + "/scheduled", "/api/queues/%2F/q.open/scheduled", "vhost", ("read", "q.open")),
    Case(
        "DELETE",
        Q + "/scheduled",
        "/api/queues/%2F/q.secret/scheduled",
        "vhost",
        ("read", "q.secret"),
    ),
    Case(
        "POST",
        Q + "/scheduled/deliver",
        "/api/queues/%2F/q.secret/scheduled/deliver",
        "vhost",
        ("read", "q.secret"),
        {},
    ),
    Case("GET", Q + "/groups", "/api/queues/%2F/q.open/groups", "vhost"),
    Case(
        "DELETE", Q + "/groups", "/api/queues/%2F/q.open/groups", "vhost", ("configure", "q.open")
    ),
    Case(
        "DELETE",
        Q + "/groups/{group}",
        "/api/queues/%2F/q.open/groups/g1",
        "vhost",
        ("configure", "q.open"),
    ),
    # no vhost in the path: any policymaker, who sees the policies of its own vhosts
    Case("GET", "/api/policies", "/api/policies", "policymaker"),
    Case("GET", "/api/policies/{vhost}", "/api/policies/%2F", "policies"),
    Case("GET", "/api/policies/{vhost}/{name}", "/api/policies/%2F/gone", "policies"),
    Case("PUT", "/api/policies/{vhost}/{name}", "/api/policies/%2F/p1", "policies", body=POLICY),
    Case("DELETE", "/api/policies/{vhost}/{name}", "/api/policies/%2F/gone", "policies"),
    Case("GET", "/api/parameters", "/api/parameters", "policymaker"),
    Case("GET", "/api/parameters/{component}", "/api/parameters/shovel", "policymaker"),
    Case("GET", "/api/parameters/{component}/{vhost}", "/api/parameters/shovel/%2F", "policies"),
    Case(
        "GET",
        "/api/parameters/{component}/{vhost}/{name}",
        "/api/parameters/shovel/%2F/gone",
        "policies",
    ),
    Case(
        "PUT",
        "/api/parameters/{component}/{vhost}/{name}",
        "/api/parameters/shovel/%2F/s1",
        "policies",
        body={"value": {"src-queue": "a"}},
    ),
    Case(
        "DELETE",
        "/api/parameters/{component}/{vhost}/{name}",
        "/api/parameters/shovel/%2F/gone",
        "policies",
    ),
    Case("GET", "/api/global-parameters", "/api/global-parameters", "admin"),
    Case("GET", "/api/global-parameters/{name}", "/api/global-parameters/gone", "admin"),
    Case(
        "PUT",
        "/api/global-parameters/{name}",
        "/api/global-parameters/g1",
        "admin",
        body={"value": 1},
    ),
    Case("DELETE", "/api/global-parameters/{name}", "/api/global-parameters/gone", "admin"),
    Case("GET", "/api/definitions", "/api/definitions", "admin"),
    Case("POST", "/api/definitions", "/api/definitions", "admin", body={}),
    Case("GET", "/api/definitions/{vhost}", "/api/definitions/%2F", "admin"),
    Case("POST", "/api/definitions/{vhost}", "/api/definitions/%2F", "admin", body={}),
    Case("GET", "/api/nodes", "/api/nodes", "monitor"),
    Case("GET", "/api/nodes/{name}", "/api/nodes/gone", "monitor"),
    Case("GET", "/api/cluster", "/api/cluster", "monitor"),
    # a single node: an allowed step-down answers 400 (not a cluster node)
    Case("POST", "/api/cluster/step-down", "/api/cluster/step-down", "admin", body={}),
    Case("GET", "/api/vhost-limits", "/api/vhost-limits", "monitor"),
    Case("GET", "/api/vhost-limits/{vhost}", "/api/vhost-limits/%2F", "vhost_visible"),
    Case(
        "PUT",
        "/api/vhost-limits/{vhost}/{name}",
        "/api/vhost-limits/%2F/max-queues",
        "admin",
        body={"value": -1},
    ),
    Case("DELETE", "/api/vhost-limits/{vhost}/{name}", "/api/vhost-limits/%2F/max-queues", "admin"),
    Case("GET", "/api/user-limits", "/api/user-limits", "admin"),
    Case("GET", "/api/user-limits/{user}", "/api/user-limits/guest", "admin"),
    Case(
        "PUT",
        "/api/user-limits/{user}/{name}",
        "/api/user-limits/guest/max-channels",
        "admin",
        body={"value": -1},
    ),
    Case(
        "DELETE", "/api/user-limits/{user}/{name}", "/api/user-limits/guest/max-channels", "admin"
    ),
    Case("GET", "/api/health/checks/alarms", "/api/health/checks/alarms", "any"),
    Case("GET", "/api/health/checks/local-alarms", "/api/health/checks/local-alarms", "any"),
    Case(
        "GET",
        "/api/health/checks/port-listener/{port}",
        "/api/health/checks/port-listener/1",
        "any",
    ),
    Case("GET", "/api/health/checks/virtual-hosts", "/api/health/checks/virtual-hosts", "any"),
    Case("GET", "/api/aliveness-test/{vhost}", "/api/aliveness-test/%2F", "vhost_access"),
    Case(
        "POST",
        Q + "/browse",
        "/api/queues/%2F/q.open/browse",
        "vhost",
        ("read", "q.open"),
        {"count": 1},
    ),
    Case(
        "POST", Q + "/browse", "/api/queues/%2F/q.secret/browse", "vhost", ("read", "q.secret"), {}
    ),
    Case("GET", ST, "/api/streams/%2F/q.open", "vhost", ("read", "q.open")),
    Case("GET", ST, "/api/streams/%2F/q.secret", "vhost", ("read", "q.secret")),
    Case(
        "GET", ST + "/read", "/api/streams/%2F/q.open/read?consumer=c", "vhost", ("read", "q.open")
    ),
    Case("GET", ST + "/browse", "/api/streams/%2F/q.secret/browse", "vhost", ("read", "q.secret")),
    Case("GET", ST + "/log", "/api/streams/%2F/q.open/log?lo=0&hi=1", "vhost", ("read", "q.open")),
    Case(
        "POST",
        ST + "/reserve",
        "/api/streams/%2F/q.open/reserve",
        "vhost",
        ("read", "q.open"),
        {"consumer": "c", "max": 1},
    ),
    Case(
        "POST",
        ST + "/settle",
        "/api/streams/%2F/q.secret/settle",
        "vhost",
        ("read", "q.secret"),
        {"consumer": "c", "upto": 0},
    ),
    Case(
        "DELETE",
        ST + "/leases/{consumer}",
        "/api/streams/%2F/q.open/leases/gone",
        "vhost",
        ("read", "q.open"),
    ),
    Case(
        "POST",
        ST + "/publish",
        "/api/streams/%2F/x.open/publish",
        "vhost",
        ("write", "x.open"),
        raw=PUB,
        content_type="application/x-ringmq-publish",
    ),
]


def _tag(user: str) -> str:
    return user.rsplit("-", 1)[0]


def _perm(user: str) -> str:
    return user.rsplit("-", 1)[1]


def _may(user: str, access: str, resource: str) -> bool:
    """The model of AMQP's permission check for the three permission sets of the grid."""
    perm = _perm(user)
    if perm == "rw":
        return True
    if perm == "none":
        return False
    if access == "bind":  # write on q.open (ro: no) and read on x.open (ro: no)
        return False
    return access == "read" and resource == "q.open"


def allowed(case: Case, user: str) -> bool:
    tag, has_perms = _tag(user), _perm(user) != "none"
    if case.gate == "public":
        return True
    if tag == "app":
        return False
    admin, monitor = tag == "administrator", tag in ("administrator", "monitoring")
    gate = {
        "any": True,
        "admin": admin,
        "monitor": monitor,
        "vhost_access": has_perms,
        "vhost": admin or has_perms,
        "vhost_visible": monitor or has_perms,
        "policies": admin or (tag == "policymaker" and has_perms),
        "policymaker": admin or tag == "policymaker",
    }[case.gate]
    return gate and (case.perm is None or _may(user, *case.perm))


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerThread, str]]:
    b = BrokerThread(
        ServerOptions(
            host="127.0.0.1", amqp_port=0, http_port=0, data_dir=tmp_path_factory.mktemp("authz")
        )
    )
    b.start()
    url = f"http://127.0.0.1:{b.server.http_port}"
    with httpx.Client(base_url=url, auth=("guest", "guest"), timeout=10) as admin:
        for user in USERS:
            tags = "" if user.startswith("app") else _tag(user)
            r = admin.put(f"/api/users/{user}", json={"password": PASSWORD, "tags": tags})
            assert r.status_code == 201, r.text
            perm = PERMS[_perm(user)]
            if perm is not None:
                assert admin.put(f"/api/permissions/%2F/{user}", json=perm).status_code == 201
        assert admin.put("/api/vhosts/other", json={}).status_code == 201
        for vhost in ("other",):
            r = admin.put(f"/api/permissions/{vhost}/guest", json=PERMS["rw"])
            assert r.status_code == 201
        for q in ("q.open", "q.secret"):
            assert admin.put(f"/api/queues/%2F/{q}", json={}).status_code == 201
        assert admin.put("/api/queues/other/q.other", json={}).status_code == 201
        r = admin.put("/api/exchanges/%2F/x.open", json={"type": "direct"})
        assert r.status_code == 201
    conn = pika.BlockingConnection(
        pika.ConnectionParameters(
            "127.0.0.1", b.port, credentials=pika.PlainCredentials(OWNER, PASSWORD)
        )
    )
    conn.channel()
    try:
        yield b, url
    finally:
        conn.close()
        b.stop()


def _call(c: httpx.Client, case: Case, user: str) -> httpx.Response:
    headers = {"Content-Type": case.content_type} if case.content_type else {}
    return c.request(
        case.method,
        case.path,
        json=case.body,
        content=case.raw,
        headers=headers,
        auth=(user, PASSWORD),
    )


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c.method} {c.path}")
def test_matrix(live: tuple[BrokerThread, str], case: Case) -> None:
    _, url = live
    wrong: list[str] = []
    # RabbitMQ's 401 not_authorised; the ringmq-native streams API keeps its 403 access_refused
    streams = case.template.startswith("/api/streams")
    refusal, refused = (403, "access_refused") if streams else (401, "not_authorised")
    with httpx.Client(base_url=url, timeout=10) as c:
        for user in USERS:
            r = _call(c, case, user)
            want = allowed(case, user)
            if want and r.status_code in (401, 403, 415):
                wrong.append(f"{user}: refused {r.status_code} {r.text}")
            elif not want:
                # a user without a management tag fails authentication itself
                app = user.startswith("app")
                status, error = (401, "not_authorized") if app else (refusal, refused)
                if r.status_code != status or r.json().get("error") != error:
                    wrong.append(f"{user}: allowed {r.status_code} {r.text[:120]}")
    assert not wrong, "\n".join(wrong)


def test_every_route_is_in_the_matrix(live: tuple[BrokerThread, str]) -> None:
    b, _ = live
    assert b.server.http_server is not None
    app: Any = b.server.http_server.config.app
    served: set[tuple[str, str]] = set()
    for route in app.routes:
        if isinstance(route, Mount):
            assert route.path == "", route.path  # the console's static files only
            continue
        assert isinstance(route, Route)
        served |= {(m, route.path) for m in route.methods or () if m != "HEAD"}
    covered = {(c.method, c.template) for c in CASES}
    assert served - covered == set(), "routes without a matrix case"
    assert covered - served == set(), "matrix cases for routes the app does not serve"


def _get(url: str, path: str, user: str) -> Any:
    r = httpx.get(url + path, auth=(user, PASSWORD))
    assert r.status_code == 200, r.text
    return r.json()


def test_listings_are_filtered_as_rabbitmq_filters_them(live: tuple[BrokerThread, str]) -> None:
    _, url = live

    def queues(user: str) -> set[tuple[str, str]]:
        return {(q["vhost"], q["name"]) for q in _get(url, "/api/queues", user)}

    assert ("other", "q.other") in queues("administrator-none")
    for user in ("management-rw", "monitoring-rw", "policymaker-ro"):
        assert {v for v, _ in queues(user)} == {"/"}, user
    assert queues("management-none") == set()
    assert queues("monitoring-none") == set()
    # vhost names: monitors see every vhost, others their own
    names = {v["name"] for v in _get(url, "/api/vhosts", "monitoring-none")}
    assert {"/", "other"} <= names
    assert [v["name"] for v in _get(url, "/api/vhosts", "management-ro")] == ["/"]
    assert _get(url, "/api/vhosts", "management-none") == []
    # connections and channels: monitors see all, others only their own
    for user in ("monitoring-none", "administrator-none", OWNER):
        assert [c["user"] for c in _get(url, "/api/connections", user)] == [OWNER], user
        assert len(_get(url, "/api/channels", user)) == 1, user
    for user in ("management-ro", "policymaker-rw"):
        assert _get(url, "/api/connections", user) == []
        assert _get(url, "/api/channels", user) == []
    assert _get(url, "/api/overview", "management-none")["object_totals"]["queues"] == 0
    assert _get(url, "/api/overview", "monitoring-none")["object_totals"]["connections"] == 1


def test_a_connection_is_closed_only_by_its_owner_or_an_administrator(
    live: tuple[BrokerThread, str],
) -> None:
    b, url = live
    conn = pika.BlockingConnection(
        pika.ConnectionParameters(
            "127.0.0.1", b.port, credentials=pika.PlainCredentials("policymaker-rw", PASSWORD)
        )
    )
    try:
        name = next(
            c["name"]
            for c in _get(url, "/api/connections", "monitoring-none")
            if c["user"] == "policymaker-rw"
        )
        path = f"/api/connections/{quote(name, safe='')}"
        assert httpx.get(url + path, auth=("management-rw", PASSWORD)).status_code == 401
        assert httpx.get(url + path, auth=("monitoring-none", PASSWORD)).status_code == 200
        for user in ("management-rw", "monitoring-rw"):
            r = httpx.delete(url + path, auth=(user, PASSWORD))
            assert (r.status_code, r.json()["error"]) == (401, "not_authorised"), user
        assert httpx.delete(url + path, auth=("policymaker-rw", PASSWORD)).status_code == 204
    finally:
        if conn.is_open:
            try:
                conn.close()
            except pika.exceptions.AMQPError:
                pass


def test_no_password_hash_and_no_self_promotion_for_non_administrators(
    live: tuple[BrokerThread, str],
) -> None:
    _, url = live
    doc = {"users": [{"name": "policymaker-rw", "password_hash": "", "tags": "administrator"}]}
    for user in ("management-rw", "policymaker-rw", "monitoring-rw"):
        for path in ("/api/users", "/api/users/guest", "/api/definitions", "/api/definitions/%2F"):
            r = httpx.get(url + path, auth=(user, PASSWORD))
            assert r.status_code == 401, (user, path)
            assert "password_hash" not in r.text, (user, path)
        r = httpx.post(url + "/api/definitions", json=doc, auth=("policymaker-rw", PASSWORD))
        assert r.status_code == 401
    whoami = _get(url, "/api/whoami", "policymaker-rw")
    assert whoami["tags"] == ["policymaker"]


def test_only_json_bodies_are_accepted(live: tuple[BrokerThread, str]) -> None:
    # A cross-site form can post text/plain or form-encoded bodies without a CORS preflight:
    # neither is parsed, and the message is not published.
    _, url = live
    path = url + "/api/exchanges/%2F/amq.default/publish"
    body = '{"routing_key": "q.secret", "payload": "csrf", "properties": {}}'
    before = _get(url, "/api/queues/%2F/q.secret", "administrator-rw")["messages"]
    for ctype in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data"):
        r = httpx.post(path, content=body, headers={"Content-Type": ctype}, auth=("guest", "guest"))
        assert (r.status_code, r.json()["error"]) == (415, "unsupported_media_type"), ctype
        assert "www-authenticate" not in r.headers
    assert _get(url, "/api/queues/%2F/q.secret", "administrator-rw")["messages"] == before
    r = httpx.post(
        path,
        content=body,
        headers={"Content-Type": "application/json; charset=utf-8"},
        auth=("guest", "guest"),
    )
    assert r.json() == {"routed": True}
    r = httpx.get(url + "/api/overview")
    assert r.status_code == 401
    assert "www-authenticate" not in r.headers


def test_naming_a_dead_letter_or_alternate_exchange_needs_write_on_it(
    live: tuple[BrokerThread, str],
) -> None:
    # As AMQP's declare: the declared resource will publish into the named exchange, so the
    # declarer needs read on the resource and write on that exchange.
    _, url = live
    with httpx.Client(base_url=url, auth=("guest", "guest")) as admin:
        admin.put("/api/users/declarer", json={"password": PASSWORD, "tags": "management"})
        perm = {"configure": ".*", "write": r"^(q\..*|x\.mine)$", "read": ".*"}
        assert admin.put("/api/permissions/%2F/declarer", json=perm).status_code == 201
    auth = ("declarer", PASSWORD)
    dlx = {"arguments": {"x-dead-letter-exchange": "x.open"}}
    cases = [
        ("/api/queues/%2F/q.dlx", dlx),
        (
            "/api/exchanges/%2F/x.ae",
            {"type": "fanout", "arguments": {"alternate-exchange": "x.open"}},
        ),
        ("/api/queues/%2F/q.open/settings", {"dead-letter-exchange": "x.open"}),
    ]
    for path, body in cases:
        r = httpx.put(url + path, json=body, auth=auth)
        assert (r.status_code, r.json()["error"]) == (401, "not_authorised"), path
        assert "write access to exchange 'x.open'" in r.json()["reason"], path
    assert httpx.get(url + "/api/queues/%2F/q.dlx", auth=auth).status_code == 404
    assert httpx.get(url + "/api/exchanges/%2F/x.ae", auth=auth).status_code == 404
    r = httpx.put(url + "/api/queues/%2F/q.dlx", json={"arguments": {}}, auth=auth)
    assert r.status_code == 201
