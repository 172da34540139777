"""ringmq nodes elect one leader through a real etcd, fail over, fence (`-m cluster`).

Nodes are `ringmq serve` processes with a 2 s lease; etcd is Debian's `etcd-server`. Waits are
bounded (against hanging), never timed: the failover times are printed, not asserted.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from tests.cluster.conftest import LEASE_TTL_S, EtcdCluster, Node

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(180)]

BOUND_S = 60.0  # against hanging only


def wait_for(what: str, check: Callable[[], Any], timeout_s: float = BOUND_S) -> Any:
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except httpx.HTTPError as exc:
            last = exc
            time.sleep(0.1)
            continue
        if last:
            return last
        time.sleep(0.1)
    raise AssertionError(f"{what}: still {last!r} after {timeout_s} s")


def leaders(nodes: list[Node]) -> list[tuple[str, int]]:
    """(name, epoch) of every running node that says it leads."""
    out = []
    for n in nodes:
        if n.running():
            v = n.cluster()
            if v["role"] == "leader":
                out.append((v["node"], v["epoch"]))
    return out


def one_leader(nodes: list[Node]) -> tuple[str, int] | None:
    found = leaders(nodes)
    if len(found) != 1:
        return None
    name, epoch = found[0]
    # and every running node agrees on it
    views = [n.cluster() for n in nodes if n.running()]
    if all(v["leader"] == name and v["epoch"] == epoch for v in views):
        return name, epoch
    return None


def test_three_nodes_elect_one_leader_and_list_each_other(
    etcd_cluster: Callable[[int], EtcdCluster], start_node: Callable[..., Node]
) -> None:
    etcd = etcd_cluster(1)
    nodes = [start_node(name, etcd.endpoints) for name in ("n1", "n2", "n3")]
    leader, epoch = wait_for("one leader", lambda: one_leader(nodes))
    assert epoch >= 1
    # every node is registered and, with no replicated log yet, in the ISR
    view = wait_for(
        "three nodes in sync",
        lambda: (v := nodes[0].cluster())["isr"] == ["n1", "n2", "n3"] and v,
    )
    assert [n["name"] for n in view["nodes"]] == ["n1", "n2", "n3"]

    # /api/nodes lists every node with RabbitMQ's fields and the cluster's (n2 reads etcd on
    # its own schedule: wait for it to see the same ISR)
    def nodes_of_n2() -> list[dict[str, Any]] | None:
        got: list[dict[str, Any]] = httpx.get(
            f"http://127.0.0.1:{nodes[1].http_port}/api/nodes", auth=("guest", "guest")
        ).json()
        return got if all(n["in_sync"] for n in got) and len(got) == 3 else None

    listed = wait_for("n2 sees three nodes in sync", nodes_of_n2)
    assert sorted(n["name"] for n in listed) == ["n1", "n2", "n3"]
    by_name = {n["name"]: n for n in listed}
    assert [n for n in by_name if by_name[n]["role"] == "leader"] == [leader]
    assert all(n["running"] and n["in_sync"] and n["epoch"] == epoch for n in listed)
    assert "mem_used" in by_name["n2"]  # the local node's own figures
    metrics = httpx.get(f"http://127.0.0.1:{nodes[1].http_port}/metrics").text
    assert f"ringmq_cluster_epoch {epoch}" in metrics
    assert "ringmq_cluster_isr_size 3" in metrics
    assert f"ringmq_cluster_role {int(leader == 'n2')}" in metrics


def test_kill_9_of_the_leader_elects_another_with_a_higher_epoch(
    etcd_cluster: Callable[[int], EtcdCluster], start_node: Callable[..., Node]
) -> None:
    etcd = etcd_cluster(1)
    nodes = [start_node(name, etcd.endpoints) for name in ("n1", "n2", "n3")]
    leader, epoch = wait_for("one leader", lambda: one_leader(nodes))
    wait_for("three in sync", lambda: len(nodes[0].cluster()["isr"]) == 3)
    for _round in range(2):
        victim = next(n for n in nodes if n.name == leader and n.running())
        killed_at = time.monotonic()
        victim.kill()
        new_leader, new_epoch = wait_for("a new leader", lambda: one_leader(nodes))
        print(f"failover {leader} -> {new_leader}: {time.monotonic() - killed_at:.2f} s")
        assert new_leader != leader
        assert new_epoch > epoch
        leader, epoch = new_leader, new_epoch


def test_step_down_hands_over_to_another_node(
    etcd_cluster: Callable[[int], EtcdCluster], start_node: Callable[..., Node]
) -> None:
    etcd = etcd_cluster(1)
    nodes = [start_node(name, etcd.endpoints) for name in ("n1", "n2")]
    leader, epoch = wait_for("one leader", lambda: one_leader(nodes))
    wait_for("both in sync", lambda: len(nodes[0].cluster()["isr"]) == 2)
    follower = next(n for n in nodes if n.name != leader)
    # asked of the follower: the CLI finds the leader and posts there
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "ringmq",
            "cluster",
            "step-down",
            "--url",
            f"http://127.0.0.1:{follower.http_port}",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    new_leader, new_epoch = wait_for("the other node leads", lambda: one_leader(nodes))
    assert (new_leader, new_epoch > epoch) == (follower.name, True)
    status = subprocess.run(
        [
            sys.executable,
            "-m",
            "ringmq",
            "cluster",
            "status",
            "--json",
            "--url",
            f"http://127.0.0.1:{follower.http_port}",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert f'"leader": "{follower.name}"' in status.stdout
    # the on_role_change hooks ran with the new roles: the old leader led then followed
    old = next(n for n in nodes if n.name == leader)
    wait_for("the hooks ran", lambda: f"leader {new_epoch} {follower.name}" in _text(follower))
    assert f"leader {epoch} {leader}" in _text(old)
    assert "follower" in _text(old).split(f"leader {epoch} {leader}", 1)[1]


def _text(node: Node) -> str:
    return node.hook_log.read_text() if node.hook_log.exists() else ""


def test_etcd_losing_one_of_three_members_keeps_the_cluster_serving(
    etcd_cluster: Callable[[int], EtcdCluster], start_node: Callable[..., Node]
) -> None:
    etcd = etcd_cluster(3)
    # the default TTL: renewals every 1.7 s, fence 3.75 s after the last one, which rides out
    # the etcd election that losing etcd's own leader causes (about a second)
    nodes = [start_node(name, etcd.endpoints, ttl_s=5) for name in ("n1", "n2")]
    leader, epoch = wait_for("one leader", lambda: one_leader(nodes))
    wait_for("both in sync", lambda: len(nodes[0].cluster()["isr"]) == 2)
    etcd.leader().kill()  # the harder case: etcd must elect a new leader of its own
    # the leader keeps its lease through the two remaining members, for two TTLs
    for _ in range(2 * 5 * 5):
        assert one_leader(nodes) == (leader, epoch)
        time.sleep(0.2)
    # and a failover still works with two of three members
    next(n for n in nodes if n.name == leader).kill()
    new_leader, new_epoch = wait_for("a new leader", lambda: one_leader(nodes))
    assert new_leader != leader
    assert new_epoch > epoch


def test_etcd_losing_quorum_fences_the_leader_and_nobody_leads(
    etcd_cluster: Callable[[int], EtcdCluster], start_node: Callable[..., Node]
) -> None:
    etcd = etcd_cluster(3)
    nodes = [start_node(name, etcd.endpoints) for name in ("n1", "n2")]
    leader, epoch = wait_for("one leader", lambda: one_leader(nodes))
    etcd.members[1].kill()
    etcd.members[2].kill()
    # the leader cannot renew: it stops leading (before its lease could expire), nobody leads
    wait_for("the leader fenced", lambda: leaders(nodes) == [])
    for _ in range(2 * LEASE_TTL_S * 5):
        assert leaders(nodes) == []
        views = {n.name: n.cluster() for n in nodes}
        assert views[leader]["leader"] is None  # the fenced leader knows of no leader
        assert not any(v["etcd_ok"] for v in views.values())  # and all say why
        time.sleep(0.2)
    # etcd back: a leader again, in a new epoch
    etcd.members[1].restart()
    etcd.members[2].restart()
    _new_leader, new_epoch = wait_for("a leader again", lambda: one_leader(nodes))
    assert new_epoch > epoch
