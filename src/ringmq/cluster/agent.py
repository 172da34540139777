"""The asyncio side of a cluster node: drives the `Election` machine against etcd.

Theory of operation: `ClusterNode` owns one `Election` (sans-IO, `election.py`) and one etcd
gateway client (`etcd.py`). One task (`_run`) ticks the machine at its next deadline, or
sooner when an answer arrives, and starts each effect as its own task; each task feeds etcd's
answer back into the machine and wakes the loop. So a request that hangs (an etcd member
without quorum holds requests until its timeout) never delays the fence: the fence is a
deadline of the machine, met by the loop's timer alone.

Beside the election it registers the node (`/ringmq/<cluster>/nodes/<name>` with the node's
lease, re-put after each new lease), creates the cluster secret on first start, reads the
cluster (`Observe`) for `view()`, and, while it leads with `auto_isr`, keeps the ISR equal to
the registered nodes. The replicated log replaces that last rule by calling `set_isr` with the
followers that acknowledge in time.

A planned `step_down` first runs `handover` (set by the replicated member: the followers catch
up, server/member.py), then fences and resigns. A clean stop of a leader (SIGTERM) is that
step-down, then a wait (bounded by the lease TTL) until a successor holds the leader key, and
only then the lease's revocation; the member closes its clients after it.

Role changes go to the listeners (`add_role_listener`, see `view.RoleChange`): the one place
where the replication wiring learns to lead (stream to followers) or to follow (connect to the
leader's `leader_address`, presenting `secret`), and where a fenced leader stops confirming.
The `on_role_change` command runs too.

Runs on the broker's event loop; touches nothing of the broker.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import shlex
from collections.abc import Awaitable, Callable
from typing import Any

from ringmq.cluster import etcd as gw
from ringmq.cluster.election import (
    Campaign,
    Effect,
    Election,
    GrantLease,
    Observe,
    RenewLease,
    Resign,
    Role,
    RoleChanged,
)
from ringmq.cluster.etcd import Etcd, EtcdUnavailableError
from ringmq.cluster.keys import (
    ClusterKeys,
    NodeRecord,
    encode_isr,
    leader_value,
    parse_isr,
    parse_leader,
)
from ringmq.cluster.settings import ClusterSettings
from ringmq.cluster.view import ClusterView, NodeView, RoleChange, RoleListener

__all__ = ["ClusterNode"]

log = logging.getLogger(__name__)


class ClusterNode:
    """One node's membership and leadership of its shard (see the module docstring).

    Args:
        settings: the `[cluster]` settings; `settings.node_name` must be set.
        record: this node's advertised record, read when it registers (after the listeners
            opened, so that it carries their ports).
        now_ms: a monotonic clock in milliseconds.
    """

    def __init__(
        self,
        settings: ClusterSettings,
        record: Callable[[], NodeRecord],
        now_ms: Callable[[], int],
    ) -> None:
        assert settings.node_name, "a cluster node needs a name"
        self.settings = settings
        self.name = settings.node_name
        self.keys = ClusterKeys(settings.name, settings.shard)
        self.election = Election(self.name, ttl_ms=settings.lease_ttl_s * 1000)
        self._record = record
        self._now_ms = now_ms
        self._etcd: Etcd | None = None
        self._task: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._wake = asyncio.Event()
        self._closing = False
        self._listeners: list[RoleListener] = []
        self.handover: Callable[[], Awaitable[dict[str, object]]] | None = None
        """Run by a planned `step_down` before the fence (the replicated member's: hold
        confirms, let the ISR catch up; its report is returned with the step-down's)."""
        self._registered = False
        self._nodes: dict[str, NodeRecord] = {}
        self._etcd_ok = False
        self.secret: str | None = None
        """The cluster secret followers present to the leader (None until read from etcd)."""

    # -- lifecycle -----------------------------------------------------------------------------

    async def start(self) -> None:
        """Start registering and campaigning (returns at once; etcd may be down)."""
        timeout_s = max(0.2, self.election.renew_ms / 1000)
        self._etcd = Etcd(self.settings.etcd, timeout_s=timeout_s)
        self._closing = False
        self._task = asyncio.create_task(self._run(), name=f"cluster {self.name}")
        self._spawn(self._watch())
        log.info(
            "cluster %r: node %s joins shard %d through etcd %s",
            self.settings.name,
            self.name,
            self.settings.shard,
            ",".join(self.settings.etcd),
        )

    async def stop(self) -> None:
        """Leave the cluster (revoke the lease) and stop. A leader hands over first: the
        planned `step_down` (its followers catch up, confirms stop, the leader key goes), then
        it waits, at most the lease TTL, until another node leads (`_successor`), so that its
        clients, disconnected next, find a leader rather than an election under way."""
        if self._task is None:
            return
        bound_s = self.settings.lease_ttl_s  # etcd may be down: do not hold the shutdown up
        handed: dict[str, object] | None = None
        started = self._now_ms()
        if self.leads():
            # the hand-over waits at most `isr_timeout_ms` itself; the resign is one request
            with contextlib.suppress(TimeoutError, EtcdUnavailableError):
                handed = await asyncio.wait_for(
                    self.step_down(), self.settings.isr_timeout_ms / 1000 + bound_s
                )
        effects = self.election.stop(self._now_ms())  # campaign no more (and, had the
        # step-down not completed, fence and resign now: the stop's old, immediate path)
        lease = self.election.lease_id
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._apply_now(effects), bound_s)
        if handed is not None:
            # only a registered ISR member may succeed: with none, nobody will before we go
            heirs = (self.election.isr - {self.name}) & set(self._nodes)
            successor = await self._successor(bound_s) if heirs else None
            log.warning(
                "cluster: %s stopped: handed over epoch %s; %s in %d ms (%s)",
                self.name,
                handed.get("epoch"),
                f"{successor[0]} leads epoch {successor[1]}" if successor else "no successor",
                self._now_ms() - started,
                {k: v for k, v in handed.items() if k not in ("node", "epoch")},
            )
        # Python 3.11's wait_for swallows a cancel that lands as the awaited event fires
        # (`_run` waits on `_wake`): the loop then went on and the stop waited on it for ever
        # (seen after SIGTERM under load). So `_run` also ends on `_closing`, and the wait for
        # the tasks is bounded.
        self._closing = True
        self._wake.set()
        self._task.cancel()
        for t in list(self._tasks):
            t.cancel()
        await asyncio.wait({self._task, *self._tasks}, timeout=bound_s)
        assert self._etcd is not None
        if lease is not None:
            with contextlib.suppress(EtcdUnavailableError, TimeoutError):
                # deletes our node key (and a leader key we still held) at once
                await asyncio.wait_for(self._etcd.revoke(lease), bound_s)
        await self._etcd.aclose()
        self._task = None

    async def _successor(self, bound_s: float) -> tuple[str, int] | None:
        # Read the leader key until another node holds it (an ISR follower campaigns as soon
        # as its watch shows ours gone), at most `bound_s`. Read here, not through the
        # election: a stopped election reads nothing more. Every 20 ms: a few dozen requests.
        assert self._etcd is not None
        deadline = self._now_ms() + bound_s * 1000
        while self._now_ms() < deadline:
            with contextlib.suppress(EtcdUnavailableError, TimeoutError, ValueError):
                _rev, kvs = await self._etcd.range_prefix(self.keys.leader)
                leader, epoch = parse_leader(kvs[0].value if kvs else None)
                if leader is not None and leader != self.name:
                    return leader, epoch
            await asyncio.sleep(0.02)
        return None

    # -- what others ask -----------------------------------------------------------------------

    def add_role_listener(self, listener: RoleListener) -> None:
        self._listeners.append(listener)

    def leads(self) -> bool:
        """True while this node leads its shard (false from the fence deadline on)."""
        return self.election.leads(self._now_ms())

    async def step_down(self) -> dict[str, object] | None:
        """Planned switchover: hand over (`handover`), fence, delete our leader key.

        Returns:
            What was done: `node`, the `epoch` given up and the handover's report (what it
            waited for); None when this node does not lead.
        """
        if not self.leads():
            return None
        report = await self.handover() if self.handover is not None else {}
        epoch = self.election.epoch
        effects = self.election.step_down(self._now_ms())
        if not effects:
            return None  # lost the lead while handing over
        await self._apply_now(effects)
        return {"node": self.name, "epoch": epoch, **report}

    async def set_isr(self, names: frozenset[str]) -> bool:
        """Write the shard's ISR, only while this node leads (etcd compares the leader key):
        True when written. The replicated log calls this before confirming without a
        follower."""
        e = self.election
        if not e.leads(self._now_ms()):
            return False
        assert self._etcd is not None
        res = await self._etcd.txn(
            [gw.value_is(self.keys.leader, leader_value(self.name, e.epoch))],
            [gw.put(self.keys.isr, encode_isr(names | {self.name}))],
        )
        if res.succeeded:
            e.isr = names | {self.name}
        return res.succeeded

    def view(self) -> ClusterView:
        e = self.election
        now = self._now_ms()
        leader = self.name if e.leads(now) else e.leader
        names = set(self._nodes) | set(e.isr) | {self.name}
        nodes = []
        for name in sorted(names):
            rec = self._nodes.get(name)
            nodes.append(
                NodeView(
                    name=name,
                    role=Role.LEADER.value if name == leader else Role.FOLLOWER.value,
                    running=name == self.name or rec is not None,
                    epoch=e.epoch,
                    in_sync=name in e.isr,
                    address=rec.address if rec else None,
                    amqp_port=rec.amqp if rec else None,
                    http_port=rec.http if rec else None,
                    stomp_port=rec.stomp if rec else None,
                    mqtt_port=rec.mqtt if rec else None,
                    stream_port=rec.stream if rec else None,
                    web_stomp_port=rec.web_stomp if rec else None,
                    web_mqtt_port=rec.web_mqtt if rec else None,
                    web_amqp_port=rec.web_amqp if rec else None,
                )
            )
        return ClusterView(
            cluster=self.settings.name,
            shard=self.settings.shard,
            node=self.name,
            role=(Role.LEADER if e.leads(now) else Role.FOLLOWER).value,
            epoch=e.epoch,
            leader=leader,
            isr=tuple(sorted(e.isr)),
            nodes=tuple(nodes),
            etcd_ok=self._etcd_ok,
            lease_ttl_s=self.settings.lease_ttl_s,
        )

    # -- the loop ------------------------------------------------------------------------------

    async def _run(self) -> None:
        e = self.election
        while not self._closing:
            now = self._now_ms()
            self._apply(e.tick(now))
            delay_ms = max(1, e.next_deadline_ms() - now)
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), delay_ms / 1000)

    async def _watch(self) -> None:
        # a change under the shard's keys (the leader key deleted, an ISR written) triggers a
        # read at once; the periodic read stays the safety net when the watch is down
        assert self._etcd is not None
        retry_s = self.election.retry_ms / 1000
        while True:
            try:
                async for _revision in self._etcd.watch(self.keys.shard_prefix):
                    self.election.changed()
                    self._wake.set()
            except (EtcdUnavailableError, ValueError) as exc:
                log.debug("cluster: watch failed: %s", exc)
            await asyncio.sleep(retry_s)

    def _apply(self, effects: list[Effect]) -> None:
        for eff in effects:
            if isinstance(eff, RoleChanged):
                self._role_changed(eff)
            else:
                self._spawn(self._carry_out(eff))

    async def _apply_now(self, effects: list[Effect]) -> None:
        # step-down and stop: the fence first (synchronously), then wait for the resign
        for eff in effects:
            if isinstance(eff, RoleChanged):
                self._role_changed(eff)
            else:
                await self._carry_out(eff)

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _carry_out(self, eff: Effect) -> None:
        e = self.election
        etcd = self._etcd
        assert etcd is not None
        sent = self._now_ms()
        try:
            match eff:
                case GrantLease(ttl_ms=ttl_ms):
                    lease, _granted_s = await etcd.grant(max(1, ttl_ms // 1000))
                    # a TTL raised by etcd lives longer than we count on: still safe
                    e.lease_granted(lease, sent)
                    self._registered = False
                    await self._register(etcd, lease)
                case RenewLease(lease_id=lease):
                    ttl_s = await etcd.keepalive(lease)
                    if ttl_s > 0:
                        e.lease_renewed(lease, sent)
                        if not self._registered:
                            await self._register(etcd, lease)
                    else:
                        log.warning("cluster: lease %x expired in etcd", lease)
                        self._apply(e.lease_expired(lease))
                case Campaign(lease_id=lease, epoch=epoch):
                    await self._campaign(etcd, lease, epoch)
                case Resign(epoch=epoch):
                    log.info("cluster: %s resigns the leader key of epoch %d", self.name, epoch)
                    await etcd.txn(
                        [gw.value_is(self.keys.leader, leader_value(self.name, epoch))],
                        [gw.delete(self.keys.leader)],
                    )
                case Observe():
                    await self._observe(etcd)
                case _:
                    raise AssertionError(eff)
        except Exception as exc:  # every failure must answer the machine
            # etcd unreachable or without quorum (EtcdUnavailableError), or an answer we cannot
            # read: either way the request failed, and the machine must hear so (it allows one
            # request of each kind in flight)
            if isinstance(exc, EtcdUnavailableError | KeyError | ValueError):
                log.debug("cluster: %s failed: %s", type(eff).__name__, exc)
            else:
                log.exception("cluster: %s failed", type(eff).__name__)
            now = self._now_ms()
            match eff:
                case GrantLease() | RenewLease():
                    e.lease_failed(now)
                case Campaign():
                    e.campaign_failed()
                case Observe():
                    self._etcd_ok = False
                    e.observe_failed(now)
                case _:
                    pass
        self._wake.set()

    async def _register(self, etcd: Etcd, lease: int) -> None:
        await etcd.put(self.keys.node(self.name), self._record().encode(), lease)
        self._registered = True

    async def _campaign(self, etcd: Etcd, lease: int, epoch: int) -> None:
        k = self.keys
        nxt = epoch + 1
        same_epoch = gw.absent(k.epoch) if epoch == 0 else gw.value_is(k.epoch, str(epoch).encode())
        res = await etcd.txn(
            [gw.absent(k.leader), same_epoch],
            [
                gw.put(k.leader, leader_value(self.name, nxt), lease),
                gw.put(k.epoch, str(nxt).encode()),
                gw.get(k.isr),
            ],
            [gw.get(k.leader), gw.get(k.epoch)],
        )
        now = self._now_ms()
        if res.succeeded:
            isr_kvs = res.ranges[0]
            isr = parse_isr(isr_kvs[0].value if isr_kvs else None)
            self._apply(self.election.campaign_won(nxt, isr, res.revision, now))
            if not self.election.leads(now):
                # won out of the ISR (read in the same transaction), too close to the fence, or
                # while stopping: the key is resigned and the next election takes epoch + 1
                log.warning(
                    "cluster: %s won epoch %d and gave it back (ISR %s)",
                    self.name,
                    nxt,
                    ",".join(sorted(isr)) or "empty",
                )
            elif self.settings.auto_isr:
                await self._auto_isr(etcd)
            return
        leader_kvs, epoch_kvs = res.ranges
        leader, _ = parse_leader(leader_kvs[0].value if leader_kvs else None)
        current = int(epoch_kvs[0].value) if epoch_kvs else 0
        self._apply(self.election.campaign_lost(leader, current, res.revision))

    async def _observe(self, etcd: Etcd) -> None:
        k = self.keys
        revision, kvs = await etcd.range_prefix(k.root)
        by_key = {kv.key: kv for kv in kvs}
        self._etcd_ok = True
        if k.secret not in by_key:
            await self._create_secret(etcd)
        else:
            self.secret = by_key[k.secret].value.decode()
        nodes = {}
        for kv in kvs:
            if kv.key.startswith(k.nodes):
                rec = NodeRecord.decode(kv.value)
                if rec is not None:
                    nodes[rec.name] = rec
        self._nodes = nodes
        leader_kv = by_key.get(k.leader)
        leader, _ = parse_leader(leader_kv.value if leader_kv else None)
        epoch_kv = by_key.get(k.epoch)
        epoch = int(epoch_kv.value) if epoch_kv else 0
        isr_kv = by_key.get(k.isr)
        isr = parse_isr(isr_kv.value if isr_kv else None)
        self._apply(self.election.observed(leader, epoch, isr, revision, self._now_ms()))
        if self.settings.auto_isr and self.leads():
            await self._auto_isr(etcd)

    async def _auto_isr(self, etcd: Etcd) -> None:
        # without the replicated log, "in sync" is "registered": every live node may lead
        want = frozenset(self._nodes) | {self.name}
        if want != self.election.isr:
            await self.set_isr(want)

    async def _create_secret(self, etcd: Etcd) -> None:
        k = self.keys
        res = await etcd.txn(
            [gw.absent(k.secret)],
            [gw.put(k.secret, secrets.token_hex(32).encode())],
            [gw.get(k.secret)],
        )
        if not res.succeeded and res.ranges and res.ranges[0]:
            self.secret = res.ranges[0][0].value.decode()

    # -- role changes --------------------------------------------------------------------------

    def _role_changed(self, eff: RoleChanged) -> None:
        rec = self._nodes.get(eff.leader) if eff.leader else None
        change = RoleChange(
            role=eff.role.value,
            epoch=eff.epoch,
            leader=eff.leader,
            leader_address=rec.address if rec else None,
            shard=self.settings.shard,
        )
        if eff.role is Role.LEADER:
            log.warning(
                "cluster: %s leads shard %d in epoch %d", self.name, change.shard, eff.epoch
            )
        else:
            log.info(
                "cluster: %s follows %s in epoch %d", self.name, eff.leader or "nobody", eff.epoch
            )
        for listener in self._listeners:
            try:
                listener(change)
            except Exception:
                log.exception("cluster: role listener failed")
        if self.settings.on_role_change:
            self._spawn(self._run_hook(self.settings.on_role_change, change))

    async def _run_hook(self, command: str, change: RoleChange) -> None:
        argv = [*shlex.split(command), change.role, str(change.epoch), change.leader or ""]
        try:
            proc = await asyncio.create_subprocess_exec(*argv)
            code = await proc.wait()
        except OSError as exc:
            log.error("cluster: on_role_change %r could not run: %s", command, exc)
            return
        if code != 0:
            log.warning("cluster: on_role_change %r exited with %d", command, code)
