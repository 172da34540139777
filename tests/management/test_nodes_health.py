"""`/api/nodes`, `/api/health/checks/*` and `/api/aliveness-test` in RabbitMQ's shapes."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from ringmq.core.broker import Broker
from ringmq.management.records import PermissionInfo
from ringmq.node import BrokerThread
from ringmq.server.runtime import ServerOptions

from .conftest import Clock


async def test_nodes_lists_the_one_node_with_rabbitmq_field_names(
    client: httpx.AsyncClient, clock: Clock
) -> None:
    clock.advance(90_000)
    (node,) = (await client.get("/api/nodes")).json()
    assert node["name"] == "ringmq@test"
    assert node["type"] == "disc"
    assert node["running"] is True
    assert node["uptime"] == 90_000
    assert node["mem_alarm"] is False
    assert node["disk_free_alarm"] is False
    assert 0 < node["fd_used"] <= node["fd_total"]
    assert node["ringmq_version"]
    for key in ("mem_used", "mem_limit", "disk_free", "disk_free_limit", "sockets_used"):
        assert isinstance(node[key], int), key
    one = (await client.get("/api/nodes/ringmq@test")).json()
    assert one["name"] == "ringmq@test"
    assert (await client.get("/api/nodes/rabbit@elsewhere")).status_code == 404


async def test_a_single_node_is_its_own_cluster_leader(client: httpx.AsyncClient) -> None:
    # the cluster's fields on every /api/nodes entry; a single node leads, in epoch 0
    (node,) = (await client.get("/api/nodes")).json()
    assert (node["role"], node["epoch"], node["in_sync"]) == ("leader", 0, True)
    assert (await client.get("/api/cluster")).json() == {
        "clustered": False,
        "node": "ringmq@test",
        "role": "leader",
    }
    r = await client.post("/api/cluster/step-down", json={})
    assert (r.status_code, r.json()["error"]) == (400, "bad_request")
    metrics = (await client.get("/metrics")).text
    assert "ringmq_cluster_role 1" in metrics
    assert "ringmq_cluster_epoch 0" in metrics


async def test_nodes_need_the_monitoring_tag(client: httpx.AsyncClient) -> None:
    body = {"password": "pw", "tags": "management"}
    assert (await client.put("/api/users/mgmt", json=body)).status_code in (201, 204)
    body = {"password": "pw", "tags": "monitoring"}
    assert (await client.put("/api/users/mon", json=body)).status_code in (201, 204)
    assert (await client.get("/api/nodes", auth=("mgmt", "pw"))).status_code == 401
    assert (await client.get("/api/nodes", auth=("mon", "pw"))).status_code == 200
    # health checks: any management user
    got = await client.get("/api/health/checks/alarms", auth=("mgmt", "pw"))
    assert got.json() == {"status": "ok"}


async def test_alarm_checks_fail_with_503_while_an_alarm_is_on(
    client: httpx.AsyncClient, broker: Broker
) -> None:
    for path in ("/api/health/checks/alarms", "/api/health/checks/local-alarms"):
        res = await client.get(path)
        assert (res.status_code, res.json()) == (200, {"status": "ok"})
    broker.set_alarm("disk", "disk alarm: 10 MiB free, limit 50 MiB")
    for path in ("/api/health/checks/alarms", "/api/health/checks/local-alarms"):
        res = await client.get(path)
        assert res.status_code == 503
        assert res.json() == {
            "status": "failed",
            "reason": "There are alarms in effect on the node",
            "alarms": [{"resource": "disk", "node": "ringmq@test"}],
        }
    node = (await client.get("/api/nodes")).json()[0]
    assert node["disk_free_alarm"] is True
    broker.set_alarm("disk", None)
    assert (await client.get("/api/health/checks/alarms")).status_code == 200


async def test_port_listener_check(client: httpx.AsyncClient) -> None:
    res = await client.get("/api/health/checks/port-listener/5672")
    assert (res.status_code, res.json()) == (200, {"status": "ok", "port": 5672})
    res = await client.get("/api/health/checks/port-listener/5673")
    assert res.status_code == 503
    assert res.json() == {
        "status": "failed",
        "reason": "No active listener",
        "missing": 5673,
        "ports": [5672, 15672],
    }
    assert (await client.get("/api/health/checks/port-listener/amqp")).status_code == 400


async def test_virtual_hosts_check(client: httpx.AsyncClient) -> None:
    res = await client.get("/api/health/checks/virtual-hosts")
    assert (res.status_code, res.json()) == (200, {"status": "ok"})


async def test_aliveness_test_round_trips_a_message(
    client: httpx.AsyncClient, broker: Broker
) -> None:
    res = await client.get("/api/aliveness-test/%2F")
    assert (res.status_code, res.json()) == (200, {"status": "ok"})
    q = (await client.get("/api/queues/%2F/aliveness-test")).json()
    assert q["messages"] == 0
    assert q["durable"] is False
    assert (await client.get("/api/aliveness-test/nowhere")).status_code == 404
    # a vhost the user has no permission in
    assert (await client.put("/api/vhosts/other")).status_code in (201, 204)
    app_admin = client._transport.app.state.admin  # type: ignore[attr-defined]
    assert not any(p.vhost == "other" for p in app_admin.permissions())
    assert (await client.get("/api/aliveness-test/other")).status_code == 401
    app_admin.set_permissions(PermissionInfo("guest", "other", ".*", ".*", ".*"))
    assert (await client.get("/api/aliveness-test/other")).status_code == 200


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerThread]:
    data = tmp_path_factory.mktemp("nodes")
    b = BrokerThread(ServerOptions(host="127.0.0.1", amqp_port=0, http_port=0, data_dir=data))
    b.start()
    yield b
    b.stop()


def test_a_running_broker_reports_its_memory_and_disk(live: BrokerThread) -> None:
    url = f"http://127.0.0.1:{live.server.http_port}"
    (node,) = httpx.get(url + "/api/nodes", auth=("guest", "guest")).json()
    monitor = live.server.memory
    assert monitor is not None
    assert node["mem_limit"] == monitor.governor.watermark_bytes > 0
    assert node["mem_used"] > 0
    assert node["disk_free_limit"] == 50_000_000
    assert node["disk_free"] > 0
    assert node["uptime"] >= 0
    res = httpx.get(url + f"/api/health/checks/port-listener/{live.port}", auth=("guest", "guest"))
    assert res.json() == {"status": "ok", "port": live.port}
