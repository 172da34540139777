"""A node's cluster settings: the `[cluster]` table and the `--cluster-*` options (plain data)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

__all__ = [
    "DEFAULT_CLUSTER_PORT",
    "DEFAULT_ISR_TIMEOUT_MS",
    "DEFAULT_LEASE_TTL_S",
    "ClusterSettings",
    "parse_endpoints",
]

DEFAULT_CLUSTER_PORT: Final = 5679  # LavinMQ's clustering port
DEFAULT_LEASE_TTL_S: Final = 5
DEFAULT_ISR_TIMEOUT_MS: Final = 3000
MIN_LEASE_TTL_S: Final = 2  # etcd raises shorter TTLs to about 1.5 election timeouts anyway


@dataclass(frozen=True, slots=True)
class ClusterSettings:
    """How a node joins a cluster.

    Attributes:
        etcd: etcd client URLs (`http://HOST:PORT`), tried in order.
        node_name: this node's name, unique in the cluster (None: `--node-name` must say).
        cluster_port: the replication listener's port (0 picks a free one).
        advertise: HOST:PORT other nodes use to reach this one's cluster port (None: the
            listen host and the cluster port).
        name: the cluster's name, the etcd key prefix `/ringmq/<name>/`.
        shard: the shard this node runs (0 in this version).
        lease_ttl_s: the leader lease's TTL: a dead leader is replaced within about this long.
        on_role_change: a command run as `<command> <role> <epoch> <leader>` when this node's
            role changes (LavinMQ's `on_leader_elected`); None: no hook.
        auto_isr: the leader keeps every registered node in the ISR (the control plane alone;
            a node that replicates its log turns it off and keeps the ISR from the followers'
            acknowledgements instead).
        isr_timeout_ms: how long a confirm waits for an ISR follower's acknowledgement before
            the leader removes that follower from the ISR in etcd and confirms without it.
    """

    etcd: tuple[str, ...] = ()
    node_name: str | None = None
    cluster_port: int = DEFAULT_CLUSTER_PORT
    advertise: str | None = None
    name: str = "ringmq"
    shard: int = 0
    lease_ttl_s: int = DEFAULT_LEASE_TTL_S
    on_role_change: str | None = None
    auto_isr: bool = True
    isr_timeout_ms: int = DEFAULT_ISR_TIMEOUT_MS


def parse_endpoints(text: str) -> tuple[str, ...]:
    """`http://a:2379,http://b:2379` -> the URLs; ValueError for one that is not http(s)."""
    urls = tuple(u.strip() for u in text.split(",") if u.strip())
    if not urls:
        raise ValueError("no etcd endpoint given")
    for u in urls:
        if not u.startswith(("http://", "https://")):
            raise ValueError(f"etcd endpoint {u!r} must be an http:// or https:// URL")
    return urls
