"""A planned step-down hands over: the followers catch up first (`-m cluster`).

The leader holds every confirm past its log's end when asked, waits (at most the ISR timeout)
until its ISR followers acknowledged that end, then gives up its lease: whichever of them
wins holds everything the old leader confirmed. The answer says what it waited for.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable

import httpx
import pytest

from tests.cluster.conftest import EtcdCluster, Node
from tests.cluster.test_election_etcd import one_leader, wait_for
from tests.cluster.test_replicated_cluster import check, drain, publish, start_three

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(120)]


def test_step_down_waits_for_the_isr_and_the_new_leader_has_every_confirmed_message(
    etcd_cluster: Callable[[int], EtcdCluster], start_node: Callable[..., Node]
) -> None:
    nodes, leader = start_three(etcd_cluster, start_node)
    epoch = leader.cluster()["epoch"]
    followers = sorted(n.name for n in nodes if n is not leader)
    confirmed = publish(leader, range(300))
    r = httpx.post(
        f"http://127.0.0.1:{leader.http_port}/api/cluster/step-down",
        auth=("guest", "guest"),
        timeout=30,
    )
    assert r.status_code == 200, r.text
    report = r.json()
    print("step-down:", report)
    assert (report["node"], report["epoch"]) == (leader.name, epoch)
    # it waited for both ISR followers to reach its log's end, and both did
    assert report["waited_for"] == followers
    assert (report["caught_up"], report["behind"], report["timed_out"]) == (followers, {}, False)
    assert report["log_position"] > 0
    assert report["waited_ms"] >= 0
    name, new_epoch = wait_for(
        "another leader", lambda: (v := one_leader(nodes)) and v[0] != leader.name and v
    )
    assert name in report["caught_up"]
    assert new_epoch > epoch
    check(confirmed, drain(next(n for n in nodes if n.name == name)))


def test_the_cli_step_down_says_what_it_waited_for(
    etcd_cluster: Callable[[int], EtcdCluster], start_node: Callable[..., Node]
) -> None:
    nodes, leader = start_three(etcd_cluster, start_node)
    follower = next(n for n in nodes if n is not leader)
    publish(leader, range(10))
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
    assert f"{leader.name} stepped down" in done.stdout
    assert "to reach log position" in done.stdout, done.stdout
    wait_for("another leader", lambda: (v := one_leader(nodes)) and v[0] != leader.name and v)
