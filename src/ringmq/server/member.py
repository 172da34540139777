"""A replicated cluster member: one node on etcd that leads its shard or follows its leader.

Theory of operation
-------------------
`ClusterMember` (what `ringmq serve --cluster-etcd` runs) owns the node's `ClusterNode`
(membership and election on etcd) for the whole process and, beside it, one of two states:

* **leading**: a full `BrokerServer` over `<data-dir>` with a replication listener on the
  cluster port, in etcd's epoch, with etcd's cluster secret, confirms waiting for the ISR
  (`IsrGate`);
* **following**: a `ReplicationFollower` keeping `<data-dir>/store` a warm copy of the
  leader's, and a follower's `BrokerServer` over an empty in-memory broker whose client ports
  (every one the leader has: AMQP, STOMP, MQTT, the stream protocol's, the WebSocket ones)
  are open and relay each connection to the leader (`server/proxy.py`, with a PROXY header
  naming the client), or refuse it naming the leader (`[cluster] proxy = false`); its
  management port answers `/api/cluster` and `/api/nodes` itself and forwards the rest of the
  API to the leader (`server/httpforward.py`). While no leader is known, client connections
  are closed at once (the client retries).

Who leads, for that side, is a `ViewLeader` (server/clusterleader.py) over the `ClusterNode`'s
view, refreshed at each role change and each step: when the leader changes, every relay to the
old one is closed (its clients reconnect, through the same follower, to the new one); a node
that becomes the leader stops its follower's server (closing its relays) and serves.

Promotion stops the follower (it saves its `SHARD` and closes its files) and then opens the
leader's server on the same directory, in the same process: `FileStore.open` replays the
journal (on a worker thread, `BrokerServer.start`: the lease renewals on this loop go on
meanwhile) exactly as `ringmq serve` does on a follower's directory in the static mode (the copy
is the leader's directory at some position, a valid data directory as after a kill -9), so
nothing is copied or fetched. Restarting the server around a fresh core was chosen over
swapping the core of a running server: every part of a `BrokerServer` (listeners' protocol
factories, timers, flow, group commit) is built around one broker, and a role change is rare.

Demotion: confirms stop at the election's fence, synchronously, because the gate asks
`ClusterNode.leads()` (false from the fence deadline on, a quarter TTL before etcd can expire
the lease) before every release; then the server stops (clients are disconnected, parked
confirms are never sent) and the follower starts. The new leader's epoch is newer than the old
leader's `SHARD`, so the old leader's directory is bulk synced: its divergent tail (records
nobody acknowledged, so nothing confirmed) is cut or replaced.

A planned step-down hands over first (`_hand_over`, `ClusterNode.handover`): confirms past
the shard log's end are held (`IsrGate.hold_above`), the ISR followers get at most
`isr_timeout_ms` to acknowledge that end, and if only some do, the ISR is written down to
those before the resign, so that a lagging follower cannot win. The report (what was waited
for) is the step-down's answer. Should no fence follow, `_unhold` lifts the hold.

A clean stop (SIGTERM, SIGINT: `request_stop`) of a leader is that step-down: `run` ends
with `ClusterNode.stop`, which hands over, fences, resigns and waits (at most the lease TTL)
until a successor leads, while this node's clients stay connected (their confirms held);
then `_stop_current` closes them and the process exits. Clients reconnect to a leader already
serving instead of waiting out the lease.

The ISR: while leading, a task asks the `IsrKeeper` (replication/isr.py) every
`_ISR_TICK_S` which followers to drop (an ISR follower holding a confirm back, or absent, for
`isr_timeout_ms`) or add (one whose acknowledgement covers every confirm so far), writes the
answer with `ClusterNode.set_isr` (a transaction on the leader key), and only then lets the
group commit release what the new set covers. A follower that stopped cleanly (its record
gone from etcd, its session closed) is dropped at its first tick (`_leavers_dropped`), not
after the deadline. The control plane's `auto_isr` is off here.

One task (`_drive`) makes every transition, one at a time, toward what the `ClusterNode` says
now: woken by each role change and every `_POLL_S` (a leader whose address etcd had not shown
yet, a secret not read yet, a start that failed).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import TypeAlias

from ringmq.cluster.agent import ClusterNode
from ringmq.cluster.etcd import EtcdUnavailableError
from ringmq.cluster.keys import NodeRecord
from ringmq.cluster.view import RoleChange
from ringmq.replication.isr import IsrKeeper
from ringmq.server.clusterleader import ViewLeader
from ringmq.server.commit import GroupCommit, ReplicaGate
from ringmq.server.configspec import ConfigError
from ringmq.server.loop import new_event_loop, tune_gc
from ringmq.server.options import ReplicationSettings, ServerOptions
from ringmq.server.replication_follower import ReplicationFollower
from ringmq.server.replication_leader import ReplicationLeader
from ringmq.server.runtime import BrokerServer

__all__ = ["ClusterMember", "IsrGate", "RoleServer", "run_member"]

RoleServer: TypeAlias = Callable[[ServerOptions, ClusterNode, ViewLeader], BrokerServer]
"""Builds a role's server for options, the node and who leads (the composition root's wiring:
the leader's over the node's store, protocols and management app; the follower's over an
empty broker, relaying clients to the leader)."""

log = logging.getLogger(__name__)

_POLL_S = 0.5
_ISR_TICK_S = 0.1
_HANDOVER_POLL_S = 0.01


class IsrGate:
    """The group commit's gate on a cluster leader: lead, and have every ISR follower's ack."""

    def __init__(self, cluster: ClusterNode, leader: ReplicationLeader, keeper: IsrKeeper) -> None:
        self.cluster = cluster
        self.leader = leader
        self.keeper = keeper
        self.hold_above: int | None = None
        """Set (a step-down hands over): nothing past this log position is confirmed."""

    def covers(self, log_position: int) -> bool:
        # leads() first: from the fence deadline on, nothing more is confirmed
        if self.hold_above is not None and log_position > self.hold_above:
            return False
        return self.cluster.leads() and self.keeper.covers(log_position, self.leader.acked)


class ClusterMember:
    """One replicated cluster node (see the module docstring)."""

    def __init__(
        self, options: ServerOptions, leader_server: RoleServer, follower_server: RoleServer
    ) -> None:
        assert options.cluster is not None
        self._leader_server = leader_server
        self._follower_server = follower_server
        self.options = _fixed_ports(options)
        cluster = self.options.cluster
        assert cluster is not None
        self.settings = cluster
        self.name = self.options.node
        self.cluster = ClusterNode(replace(cluster, auto_isr=False), self._record, self._now_ms)
        self.leader = ViewLeader(self.cluster)
        """Who leads, for the client-facing side (relays, AMQP 1.0's failover list)."""
        self.server: BrokerServer | None = None
        self.leading_epoch: int | None = None
        """The epoch of the leader's server running now (None: following)."""
        self.follower: ReplicationFollower | None = None
        self._follower_task: asyncio.Task[None] | None = None
        self._following: str | None = None
        self._isr_task: asyncio.Task[None] | None = None
        self._gate: IsrGate | None = None
        self.cluster.handover = self._hand_over
        self._wake = asyncio.Event()
        self._stopping = asyncio.Event()

    # -- lifecycle -----------------------------------------------------------------------------

    async def run(self) -> None:
        """Serve until `request_stop()`."""
        self.cluster.add_role_listener(self._role_changed)
        await self._follow_mode(None)
        await self.cluster.start()
        try:
            while not self._stopping.is_set():
                self._wake.clear()  # before the step: a change during it wakes the next one
                try:
                    await self._step()
                except Exception:
                    log.exception("cluster member: a role transition failed")
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), _POLL_S)
        finally:
            # step down first (fence, hand over), then stop serving
            await self.cluster.stop()
            await self._stop_current()

    def request_stop(self) -> None:
        log.info("shutting down")
        self._stopping.set()
        self._wake.set()

    def _role_changed(self, change: RoleChange) -> None:
        # the fence itself needs nothing here: the gate asks leads() before each release;
        # relays to a leader that no longer leads close now
        self.leader.refresh()
        self._wake.set()

    # -- transitions ---------------------------------------------------------------------------

    async def _step(self) -> None:
        c = self.cluster
        self.leader.refresh()
        if c.leads():
            epoch = c.election.epoch
            if self.leading_epoch == epoch or c.secret is None:
                return
            await self._stop_current()
            await self._lead(epoch, c.secret)
            return
        address = self._leader_address()
        if self.leading_epoch is not None:
            log.warning("cluster member: %s no longer leads; following", self.name)
            await self._stop_current()
        if self.server is None or self._following != address:
            await self._follow_mode(address)

    def _leader_address(self) -> str | None:
        view = self.cluster.view()
        if view.leader is None or view.leader == self.name:
            return None
        for n in view.nodes:
            if n.name == view.leader:
                return n.address
        return None

    async def _lead(self, epoch: int, secret: str) -> None:
        opts = replace(
            self.options,
            replication=ReplicationSettings(
                secret=secret.encode(),
                shard=str(self.settings.shard),
                port=self.settings.cluster_port,
                confirm_replicated=True,
                epoch=epoch,
            ),
        )
        srv = self._leader_server(opts, self.cluster, self.leader)
        keeper = IsrKeeper(self.name, self.cluster.election.isr, self.settings.isr_timeout_ms)

        def gate(leader: ReplicationLeader, commit: GroupCommit) -> ReplicaGate:
            self._gate = IsrGate(self.cluster, leader, keeper)
            return self._gate

        srv.gate_for = gate
        self.server = srv
        try:
            await srv.start()
        except Exception:
            log.exception("cluster member: cannot serve as the leader of epoch %d", epoch)
            await self._stop_current()
            await self.cluster.step_down()
            return
        self.leading_epoch = epoch
        log.warning("cluster member: %s serves clients as the leader of epoch %d", self.name, epoch)
        self._isr_task = asyncio.create_task(self._keep_isr(srv, keeper))

    async def _keep_isr(self, srv: BrokerServer, keeper: IsrKeeper) -> None:
        leader, commit = srv.replication, srv.commit
        assert leader is not None
        assert commit is not None
        while True:
            await asyncio.sleep(_ISR_TICK_S)
            if not self.cluster.leads():
                continue
            want = keeper.decide(
                self._now_ms(),
                leader.acked,
                commit.released_log_position,
                commit.waiting_log_position,
            ) or self._leavers_dropped(keeper, leader.acked)
            if want is None:
                continue
            ok = False
            try:
                ok = await self.cluster.set_isr(want - {self.name})
            except (EtcdUnavailableError, TimeoutError) as exc:
                log.warning("cluster member: ISR %s not written: %s", sorted(want), exc)
            keeper.written(ok)
            if ok:
                log.warning("cluster member: ISR is now %s", sorted(keeper.isr))
            commit.replicated()

    def _leavers_dropped(
        self, keeper: IsrKeeper, acked: Mapping[str, int]
    ) -> frozenset[str] | None:
        """The ISR without the followers that left cleanly (their record gone from etcd, as a
        clean stop revokes its lease, and their session closed), as `IsrKeeper.decide` answers
        (then `written`): dropped at once, not after `isr_timeout_ms`. A follower killed keeps
        its record until its lease expires, so the deadline still decides for it. Dropping a
        member is the safe direction: nothing is confirmed without it before etcd has it."""
        if keeper.proposed is not None:
            return None
        running = {n.name for n in self.cluster.view().nodes if n.running}
        left = {n for n in keeper.isr - {self.name} if n not in running and n not in acked}
        if not left:
            return None
        log.warning("cluster member: %s left the cluster: out of the ISR", ", ".join(sorted(left)))
        keeper.proposed = keeper.isr - left
        return keeper.proposed

    async def _hand_over(self) -> dict[str, object]:
        """A planned step-down's first half (`ClusterNode.step_down` then fences and resigns):
        hold every confirm past the log's end now, wait (at most `isr_timeout_ms`) until the
        ISR followers acknowledged that end, and report what was waited for."""
        gate, srv = self._gate, self.server
        if self.leading_epoch is None or gate is None or srv is None or srv.replication is None:
            return {}
        shard_log = srv.replication.log
        assert shard_log is not None
        target = shard_log.position
        gate.hold_above = target  # later writes are not confirmed: their publishers resend
        # the fence follows the hand-over at once; should it not (the request cancelled),
        # this node keeps leading and must confirm again
        asyncio.get_running_loop().call_later(
            self.settings.isr_timeout_ms / 1000 + self.settings.lease_ttl_s, self._unhold, gate
        )
        acked = srv.replication.acked
        started = self._now_ms()
        deadline = started + self.settings.isr_timeout_ms
        while True:
            waited_for = sorted(gate.keeper.counted())
            behind = {n: acked.get(n) for n in waited_for if acked.get(n, 0) < target}
            if not behind or self._now_ms() >= deadline or not self.cluster.leads():
                break
            await asyncio.sleep(_HANDOVER_POLL_S)
        caught_up = [n for n in waited_for if n not in behind]
        report: dict[str, object] = {
            "log_position": target,
            "waited_ms": self._now_ms() - started,
            "waited_for": waited_for,
            "caught_up": caught_up,
            "behind": behind,
            "timed_out": bool(behind),
        }
        if behind and caught_up and self.cluster.leads():
            # only a caught-up follower may win: the ISR shrinks to them before the resign
            # (safe: they hold every confirm, which the hold keeps below `target`); the ISR
            # task stops first, so no write of its own races this one
            await self._stop_isr_task()
            keeper = gate.keeper
            keeper.proposed = frozenset({*caught_up, self.name})  # counted with the old set
            ok = False
            with contextlib.suppress(EtcdUnavailableError, TimeoutError):
                ok = await self.cluster.set_isr(frozenset(caught_up))
            keeper.written(ok)
            if ok:
                report["isr"] = sorted(keeper.isr)
                if srv.commit is not None:
                    srv.commit.replicated()  # confirms up to `target` the laggard held back
        log.warning("cluster member: %s hands over: %s", self.name, report)
        return report

    def _unhold(self, gate: IsrGate) -> None:
        srv = self.server
        if gate is not self._gate or gate.hold_above is None or not self.cluster.leads():
            return  # stepped down (or demoted) as planned
        log.warning("cluster member: no step-down followed the hand-over; confirming again")
        gate.hold_above = None
        if srv is not None and srv.commit is not None:
            if self._isr_task is None:  # stopped to shrink the ISR: keep it again
                self._isr_task = asyncio.create_task(self._keep_isr(srv, gate.keeper))
            srv.commit.replicated()

    async def _stop_isr_task(self) -> None:
        if self._isr_task is not None:
            self._isr_task.cancel()
            with contextlib.suppress(BaseException):
                await self._isr_task
            self._isr_task = None

    async def _follow_mode(self, address: str | None) -> None:
        await self._stop_follower()
        if self.server is None:
            self.server = self._follower_server(self.options, self.cluster, self.leader)
            await self.server.start()
        secret = self.cluster.secret
        if address is None or secret is None:
            return  # nobody to follow yet (or no secret read yet): the next step tries again
        self._following = address
        host, _, port = address.rpartition(":")
        settings = ReplicationSettings(
            secret=secret.encode(), shard=str(self.settings.shard), follow=(host, int(port))
        )
        self.follower = ReplicationFollower(self.options.data_dir / "store", settings, self.name)
        self._follower_task = asyncio.create_task(self.follower.run())

    async def _stop_follower(self) -> None:
        if self.follower is not None:
            self.follower.stop()
        if self._follower_task is not None:
            with contextlib.suppress(Exception):
                await self._follower_task
        self.follower = None
        self._follower_task = None
        self._following = None

    async def _stop_current(self) -> None:
        await self._stop_isr_task()
        self._gate = None
        await self._stop_follower()
        if self.server is not None:
            await self.server.stop("cluster role change")
            self.server = None
        self.leading_epoch = None

    # -- what the ClusterNode reads ------------------------------------------------------------

    def _record(self) -> NodeRecord:
        opts = self.options
        address = self.settings.advertise or f"{opts.host}:{self.settings.cluster_port}"
        return NodeRecord(
            name=self.name,
            address=address,
            amqp=opts.amqp_port,
            http=opts.http_port,
            stomp=opts.stomp_port,
            mqtt=opts.mqtt_port,
            stream=opts.stream_port,
            web_stomp=opts.web_stomp_port,
            web_mqtt=opts.web_mqtt_port,
            web_amqp=opts.web_amqp_port,
        )

    def _now_ms(self) -> int:
        return int(asyncio.get_running_loop().time() * 1000)


def _fixed_ports(options: ServerOptions) -> ServerOptions:
    # The leader's listeners open at each promotion, and the node's record in etcd names its
    # ports once: a port of 0 ("any") is fixed to one free port now, for the process's life
    # (the shard link's too: origins find it where it was).
    cluster = options.cluster
    assert cluster is not None

    def fix(port: int | None, host: str = options.host) -> int | None:
        return _free_port(host) if port == 0 else port

    return replace(
        options,
        shard_link_port=fix(options.shard_link_port, "127.0.0.1"),  # a loopback listener
        amqp_port=fix(options.amqp_port),
        http_port=fix(options.http_port),
        stomp_port=fix(options.stomp_port),
        mqtt_port=fix(options.mqtt_port),
        stream_port=fix(options.stream_port),
        web_stomp_port=fix(options.web_stomp_port),
        web_mqtt_port=fix(options.web_mqtt_port),
        web_amqp_port=fix(options.web_amqp_port),
        cluster=replace(cluster, cluster_port=fix(cluster.cluster_port) or 0),
    )


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port


def run_member(
    options: ServerOptions, leader_server: RoleServer, follower_server: RoleServer
) -> int:
    """`ringmq serve --cluster-etcd ...`: run a `ClusterMember` until SIGTERM/SIGINT."""
    tune_gc()
    loop = new_event_loop()
    asyncio.set_event_loop(loop)

    async def main() -> None:
        member = ClusterMember(options, leader_server, follower_server)
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, member.request_stop)
        await member.run()

    try:
        loop.run_until_complete(main())
    except (ConfigError, OSError, ValueError) as exc:
        log.error("cannot start: %s", exc)
        return 1
    finally:
        loop.close()
    return 0
