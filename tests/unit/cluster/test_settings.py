"""The `[cluster]` table and the `--cluster-*` options: merged, validated, refused loudly."""

from __future__ import annotations

import pytest

from ringmq.cluster.keys import ClusterKeys, NodeRecord, leader_value, parse_isr, parse_leader
from ringmq.cluster.settings import ClusterSettings
from ringmq.server.configfile import ConfigError, FileConfig, parse_toml
from ringmq.server.options import options_from


def test_without_cluster_options_a_node_is_a_single_node() -> None:
    opts = options_from(FileConfig())
    assert opts.cluster is None
    assert opts.node == "ringmq@localhost"


def test_the_file_table_and_the_command_line_merge() -> None:
    cfg = parse_toml(
        '[cluster]\netcd = ["http://e1:2379", "http://e2:2379"]\nnode_name = "a"\n'
        'lease_ttl_s = 3\non_role_change = "hook --x"\n'
    )
    assert cfg.cluster == ClusterSettings(
        etcd=("http://e1:2379", "http://e2:2379"),
        node_name="a",
        lease_ttl_s=3,
        on_role_change="hook --x",
    )
    opts = options_from(
        cfg,
        cluster_etcd="http://x:1,http://y:2",
        node_name="b",
        cluster_port=7000,
        cluster_advertise="10.0.0.2:7000",
    )
    assert opts.cluster == ClusterSettings(
        etcd=("http://x:1", "http://y:2"),
        node_name="b",
        cluster_port=7000,
        advertise="10.0.0.2:7000",
        lease_ttl_s=3,
        on_role_change="hook --x",
    )
    assert opts.node == "b"


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ('[cluster]\netcd = "http://e:1"\nnode_name = "a"\nleader_ttl = 5\n', "unknown key"),
        ('[cluster]\netcd = "e:1"\nnode_name = "a"\n', "must be an http"),
        ('[cluster]\netcd = "http://e:1"\nlease_ttl_s = 1\n', "must be >= 2"),
    ],
)
def test_bad_cluster_settings_are_refused(toml: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_toml(toml)


def test_a_cluster_needs_etcd_and_a_node_name() -> None:
    with pytest.raises(ConfigError, match="needs a name"):
        options_from(FileConfig(), cluster_etcd="http://e:1")
    with pytest.raises(ConfigError, match="needs etcd"):
        options_from(parse_toml('[cluster]\nnode_name = "a"\n'))
    with pytest.raises(ConfigError, match="need --cluster-etcd"):
        options_from(FileConfig(), cluster_port=7000)


def test_keys_and_values() -> None:
    k = ClusterKeys("c", shard=3)
    assert (k.leader, k.epoch, k.isr) == (
        "/ringmq/c/shards/3/leader",
        "/ringmq/c/shards/3/epoch",
        "/ringmq/c/shards/3/isr",
    )
    assert k.node("n1") == "/ringmq/c/nodes/n1"
    assert parse_leader(leader_value("n1", 7)) == ("n1", 7)
    assert parse_leader(b"junk") == (None, 0)
    assert parse_isr(b'["b", "a"]') == frozenset({"a", "b"})
    rec = NodeRecord("n1", "h:5679", amqp=5672, http=None)
    assert NodeRecord.decode(rec.encode()) == rec
