"""The `[cluster]` table of a configuration file: the client-facing keys and etcd's.

Theory of operation: one TOML table holds two sets of keys. The client-facing ones (`proxy`,
`proxy_protocol_from`, `[cluster.leader]`, `[[cluster.nodes]]`: `server/proxy.py` and
`server/proxyheader.py`) always make a `ProxySpec`; the etcd control plane's (`ringmq.cluster`)
make `ClusterSettings` only when one of `_ETCD_CLUSTER_KEYS` is given (`options_from` refuses a
cluster without etcd). Every key is read once; the caller's `done()` reports the rest.
"""

from __future__ import annotations

import ipaddress
from typing import Final

from ringmq.cluster.settings import (
    DEFAULT_CLUSTER_PORT,
    DEFAULT_ISR_TIMEOUT_MS,
    DEFAULT_LEASE_TTL_S,
    MIN_LEASE_TTL_S,
    ClusterSettings,
    parse_endpoints,
)
from ringmq.server.configspec import MAX_PORT, ConfigError, NodeSpec, ProxySpec
from ringmq.server.configtable import Table

__all__ = ["parse_cluster"]


def parse_cluster(t: Table) -> tuple[ProxySpec, ClusterSettings | None]:
    """The client-facing settings and, when any etcd key is set, the control plane's."""
    proxy = _proxy(t)
    return proxy, (_cluster(t) if t.has_any(_ETCD_CLUSTER_KEYS) else None)


def _proxy(t: Table) -> ProxySpec:
    # [cluster]: the client-facing keys (server/proxy.py)
    trusted = t.str_list("proxy_protocol_from")
    for entry in trusted:
        try:
            ipaddress.ip_network(entry, strict=False)
        except ValueError:
            raise ConfigError(f"{t.where}.proxy_protocol_from: bad address {entry!r}") from None
    leader = t.table("leader")
    raw_nodes = t.value("nodes", (list,), "an array of tables ([[cluster.nodes]])") or []
    nodes = [_node(Table(n, f"{t.where}.nodes[{i}]")) for i, n in enumerate(raw_nodes)]
    return ProxySpec(
        proxy=bool(t.opt_bool("proxy", True)),
        proxy_protocol_from=trusted,
        leader=_node(Table(leader, f"{t.where}.leader")) if leader else None,
        nodes=tuple(nodes),
    )


def _node(t: Table) -> NodeSpec:
    node = NodeSpec(
        name=t.opt_str("name", "leader") or "leader",
        host=t.req_str("host"),
        amqp_port=t.opt_int("amqp_port", maximum=MAX_PORT),
        stomp_port=t.opt_int("stomp_port", maximum=MAX_PORT),
        mqtt_port=t.opt_int("mqtt_port", maximum=MAX_PORT),
        http_port=t.opt_int("http_port", maximum=MAX_PORT),
    )
    t.done()
    return node


_ETCD_CLUSTER_KEYS: Final = (
    "etcd",
    "node_name",
    "cluster_port",
    "advertise",
    "name",
    "lease_ttl_s",
    "on_role_change",
)
"""The `[cluster]` keys of the etcd control plane (`_cluster`); the others are the proxy's."""


def _cluster(t: Table) -> ClusterSettings:
    # [cluster]: etcd is a list of URLs or one comma-separated string, as --cluster-etcd
    # (or absent: --cluster-etcd then says; options_from refuses a cluster without etcd)
    raw = t.value("etcd", (str, list), "a list of etcd URLs")
    etcd: tuple[str, ...] = ()
    if raw is not None:
        try:
            etcd = parse_endpoints(raw if isinstance(raw, str) else ",".join(map(str, raw)))
        except ValueError as exc:
            raise ConfigError(f"{t.where}.etcd: {exc}") from None
    port = t.opt_int("cluster_port", DEFAULT_CLUSTER_PORT, maximum=MAX_PORT)
    return ClusterSettings(
        etcd=etcd,
        node_name=t.opt_str("node_name"),
        cluster_port=_given(port),
        advertise=t.opt_str("advertise"),
        name=t.opt_str("name", "ringmq") or "ringmq",
        lease_ttl_s=_given(t.opt_int("lease_ttl_s", DEFAULT_LEASE_TTL_S, minimum=MIN_LEASE_TTL_S)),
        on_role_change=t.opt_str("on_role_change"),
        isr_timeout_ms=_given(t.opt_int("isr_timeout_ms", DEFAULT_ISR_TIMEOUT_MS, minimum=100)),
    )


def _given(v: int | None) -> int:
    assert v is not None  # every caller passes a default
    return v
