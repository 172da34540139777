"""A cluster member's planned hand-over, against stand-ins for etcd and the replication side.

`ClusterMember._hand_over` (a step-down's first half) holds confirms past the log's end, waits
for the ISR followers' acknowledgements (at most `isr_timeout_ms`), and, when only some caught
up, shrinks the ISR in etcd to them so that no lagging follower can win. The deterministic
cases here; tests/cluster/test_step_down_handover.py runs it on etcd with three nodes.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from ringmq.cluster.agent import ClusterNode
from ringmq.cluster.settings import ClusterSettings
from ringmq.replication.isr import IsrKeeper
from ringmq.server.member import ClusterMember, IsrGate
from ringmq.server.options import ServerOptions
from ringmq.server.replication_leader import ReplicationLeader
from ringmq.server.runtime import BrokerServer


@dataclass
class FakeCluster:
    """What the hand-over asks of the `ClusterNode`: leads, and a conditional ISR write."""

    written: list[frozenset[str]] = field(default_factory=list)

    def leads(self) -> bool:
        return True

    async def set_isr(self, names: frozenset[str]) -> bool:
        self.written.append(names)
        return True


@dataclass
class FakeLog:
    position: int


@dataclass
class FakeReplication:
    log: FakeLog
    acked: dict[str, int]


@dataclass
class FakeCommit:
    releases: int = 0

    def replicated(self) -> None:
        self.releases += 1


@dataclass
class FakeServer:
    replication: FakeReplication
    commit: FakeCommit = field(default_factory=FakeCommit)


def member_leading(
    tmp_path: Path, acked: dict[str, int], end: int, isr_timeout_ms: int
) -> tuple[ClusterMember, FakeCluster, IsrGate]:
    settings = ClusterSettings(
        etcd=("http://127.0.0.1:1",),
        node_name="n1",
        cluster_port=0,
        isr_timeout_ms=isr_timeout_ms,
    )
    options = ServerOptions(
        host="127.0.0.1",
        amqp_port=None,
        http_port=None,
        data_dir=tmp_path,
        node="n1",
        cluster=settings,
    )

    def no_server(*_: Any) -> BrokerServer:
        raise AssertionError("not started here")

    member = ClusterMember(options, no_server, no_server)
    fake = FakeCluster()
    member.cluster = cast("ClusterNode", fake)
    replication = FakeReplication(FakeLog(end), acked)
    keeper = IsrKeeper("n1", frozenset({"n1", "n2", "n3"}), isr_timeout_ms)
    gate = IsrGate(member.cluster, cast("ReplicationLeader", replication), keeper)
    member.server = cast("BrokerServer", FakeServer(replication))
    member._gate = gate
    member.leading_epoch = 3
    return member, fake, gate


def test_a_follower_that_does_not_catch_up_is_left_out_of_the_isr(tmp_path: Path) -> None:
    async def main() -> tuple[dict[str, object], FakeCluster, IsrGate]:
        member, fake, gate = member_leading(tmp_path, {"n2": 40, "n3": 25}, 40, 50)
        return await member._hand_over(), fake, gate

    report, fake, gate = asyncio.run(main())
    assert report["log_position"] == 40
    assert report["waited_for"] == ["n2", "n3"]
    assert (report["caught_up"], report["behind"], report["timed_out"]) == (
        ["n2"],
        {"n3": 25},
        True,
    )
    # only the caught-up follower may campaign now
    assert fake.written == [frozenset({"n2"})]
    assert report["isr"] == ["n1", "n2"]
    # confirms up to the log's end no longer wait for the laggard (released at once); those
    # past it stay held (their publishers resend to the new leader)
    assert gate.covers(40)
    assert not gate.covers(41)


def test_it_waits_until_the_isr_followers_acknowledged_the_end(tmp_path: Path) -> None:
    order: list[str] = []

    async def main() -> tuple[dict[str, object], FakeCluster]:
        # a bound of 10 s only against hanging: the followers catch up long before
        member, fake, _ = member_leading(tmp_path, {"n2": 39, "n3": 25}, 40, 10_000)
        acked = cast("FakeServer", member.server).replication.acked

        async def followers() -> None:
            for pos in range(25, 41):  # acknowledgements arrive one loop turn after another
                await asyncio.sleep(0)
                acked["n2"], acked["n3"] = max(acked["n2"], pos), pos
            order.append("caught up")

        task = asyncio.create_task(followers())
        report = await member._hand_over()
        order.append("handed over")
        await task
        return report, fake

    report, fake = asyncio.run(main())
    assert order == ["caught up", "handed over"]
    assert (report["caught_up"], report["behind"], report["timed_out"]) == (
        ["n2", "n3"],
        {},
        False,
    )
    assert fake.written == []  # nothing to shrink


def test_a_hand_over_that_no_step_down_followed_confirms_again(tmp_path: Path) -> None:
    async def main() -> tuple[IsrGate, FakeCommit]:
        member, _, gate = member_leading(tmp_path, {"n2": 40, "n3": 40}, 40, 50)
        await member._hand_over()
        cast("FakeServer", member.server).replication.acked.update(n2=41, n3=41)
        assert not gate.covers(41)  # held, though acknowledged
        member._unhold(gate)  # what the hand-over's timer does when the fence never came
        commit = cast("FakeServer", member.server).commit
        return gate, commit

    gate, commit = asyncio.run(main())
    assert gate.covers(41)
    assert commit.releases == 1
