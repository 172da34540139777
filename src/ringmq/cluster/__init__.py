"""A ringmq cluster on etcd: membership, leader election and fencing per shard.

`election` is the sans-IO machine; `agent` drives it against etcd (`etcd`, the v3 JSON
gateway over httpx) on the broker's event loop; `keys` is the etcd layout; `view` the records
management and role listeners see; `settings` the `[cluster]` settings. This package imports
no other ringmq layer: the composition root (`ringmq.node`) wires it to the server.
"""

from __future__ import annotations

from ringmq.cluster.settings import ClusterSettings
from ringmq.cluster.view import ClusterView, NodeView, RoleChange, RoleListener

__all__ = ["ClusterSettings", "ClusterView", "NodeView", "RoleChange", "RoleListener"]
