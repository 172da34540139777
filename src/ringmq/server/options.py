"""Where and how a server runs: `ServerOptions` and their defaults, from the command line and file.

Plain data: `options_from` merges command-line values over the configuration file's `[server]`
table over the defaults; nothing here opens a socket or reads the clock.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Final

from ringmq.cluster.settings import ClusterSettings, parse_endpoints
from ringmq.server.configspec import ConfigError, FileConfig
from ringmq.server.memory import MemoryLimits

if TYPE_CHECKING:
    from ringmq.server.proxy import LeaderProvider

DEFAULT_HOST: Final = "127.0.0.1"
DEFAULT_AMQP_PORT: Final = 5672
DEFAULT_HTTP_PORT: Final = 15672
DEFAULT_STOMP_PORT: Final = 61613
DEFAULT_MQTT_PORT: Final = 1883
DEFAULT_STREAM_PORT: Final = 5552
DEFAULT_WEB_STOMP_PORT: Final = 15674
DEFAULT_WEB_MQTT_PORT: Final = 15675
"""RabbitMQ's Web STOMP and Web MQTT ports (their listeners are off unless a port is given)."""
DEFAULT_WEB_AMQP_PORT: Final = 15678
"""AMQP 1.0 over WebSockets (off unless given): the port the docs suggest, next to Web STOMP's
and Web MQTT's (Artemis serves WebSockets on its all-protocols acceptor instead)."""
DEFAULT_DATA_DIR: Final = Path("./ringmq-data")


DEFAULT_NODE: Final = "ringmq@localhost"
"""The node name management reports when none is given (a cluster names its nodes)."""
MAX_SHARD_INDEX: Final = 2**32 - 1
"""The largest shard index (the shard link's frames carry it in 32 bits)."""


@dataclass(frozen=True, slots=True)
class ReplicationSettings:
    """How a node replicates (command line: `--cluster-port`, `--cluster-secret`,
    `--follow`, `--follower-fsync`).

    Attributes:
        secret: the cluster secret followers sign their hello with.
        shard: the shard id (one per node today).
        port: the leader's replication listener (None: not a leader).
        follow: `(host, port)` of the leader to follow (None: not a follower).
        follower_fsync: a follower fsyncs before it acknowledges (off: it acknowledges once
            written, as Artemis' backups do by default).
        confirm_replicated: a leader releases confirms only once the followers acknowledged
            the writes too (server/commit.py; off by default).
        epoch: the leader's epoch as etcd handed it out (None: one above the epoch its
            store's `SHARD` holds, the static mode's own count).
    """

    secret: bytes
    shard: str = "0"
    port: int | None = None
    follow: tuple[str, int] | None = None
    follower_fsync: bool = False
    confirm_replicated: bool = False
    epoch: int | None = None


@dataclass(frozen=True, slots=True)
class ServerOptions:
    """Where and how to run.

    Attributes:
        host: address of every listener without its own (`*_bind`).
        amqp_port: AMQP port; 0 picks a free one; None: no plain AMQP listener (TLS only).
        http_port: management HTTP port; 0 picks a free one; None disables it.
        stomp_port / mqtt_port / stream_port: STOMP, MQTT and stream protocol ports; 0 picks a
            free one; None: no listener (the default here; `options_from`, for `ringmq serve`,
            defaults them to 61613, 1883 and 5552). A protocol whose adapter is not wired
            (`BrokerServer(handlers=...)`) gets no listener either.
        web_stomp_port / web_mqtt_port / web_amqp_port: STOMP, MQTT and AMQP 1.0 over
            WebSockets (path /ws); 0 picks
            a free one; None (the default, as RabbitMQ's plugins are off until enabled): none.
        amqp_bind / amqps_bind / http_bind: the address of that listener (None: `host`).
        data_dir: directory for messages and definitions.
        config: the parsed configuration file (users, limits, declarations, TLS...).
        memory: memory high watermark, free-disk limit and per-queue paging bounds.
        node: node name reported to management.
        announce_to: files the running broker writes its URLs to (`ringmq.announce`; removed
            on a clean stop). `ringmq serve` names its data directory's and the user's
            runtime file; tests and embedding name none.
        replication: replicate the store to followers or follow a leader (None: single node).
        node: node name reported to management (the cluster's node name when clustered).
        cluster: how this node joins a cluster on etcd; None: a single node.
        leader: who leads the cluster (the etcd control plane's provider); None: the
            configuration file's `[cluster.leader]`, if any, else a single node.
        shard_link_port: the shard link's listener (internal, experimental: what the shards
            of one broker use to forward publishes and consumers, docs/dev/shards.md; not for
            clients), always on loopback; 0 picks a free one; None (the default): none.
        shard_link_secret: the HMAC secret a shard link's origin proves (needed with
            `shard_link_port`).
        shard_index: this shard's index among the shards of one broker (internal: what the
            shard link's owner side tells an origin in its `Welcome`); 0 by default.
        shard_peers: the other shards' link listeners, shard index -> (host, port): where
            this shard forwards what reaches their queues' copies (server/shardlinks.py;
            with `shard_link_secret`). Set by whoever starts the shards, not a user setting.
        reuse_port: the plain AMQP listener binds with SO_REUSEPORT, beside the other shards
            of one broker on the same port (`ringmq serve --shards`; internal).
    """

    host: str = DEFAULT_HOST
    amqp_port: int | None = DEFAULT_AMQP_PORT
    http_port: int | None = DEFAULT_HTTP_PORT
    stomp_port: int | None = None
    mqtt_port: int | None = None
    stream_port: int | None = None
    web_stomp_port: int | None = None
    web_mqtt_port: int | None = None
    web_amqp_port: int | None = None
    amqp_bind: str | None = None
    amqps_bind: str | None = None
    http_bind: str | None = None
    data_dir: Path = DEFAULT_DATA_DIR
    config: FileConfig = field(default_factory=FileConfig)
    memory: MemoryLimits = field(default_factory=MemoryLimits)
    node: str = DEFAULT_NODE
    announce_to: tuple[Path, ...] = ()
    replication: ReplicationSettings | None = None
    cluster: ClusterSettings | None = None
    leader: LeaderProvider | None = None
    shard_link_port: int | None = None
    shard_link_secret: bytes | None = None
    shard_index: int = 0
    shard_peers: dict[int, tuple[str, int]] = field(default_factory=dict)
    reuse_port: bool = False


def options_from(
    config: FileConfig,
    *,
    host: str | None = None,
    amqp_port: int | None = None,
    http_port: int | None = None,
    data_dir: Path | None = None,
    memory: MemoryLimits | None = None,
    amqp_bind: str | None = None,
    amqps_bind: str | None = None,
    http_bind: str | None = None,
    stomp_port: int | None = None,
    mqtt_port: int | None = None,
    stream_port: int | None = None,
    replication: ReplicationSettings | None = None,
    cluster_etcd: str | None = None,
    node_name: str | None = None,
    cluster_port: int | None = None,
    cluster_advertise: str | None = None,
    web_stomp_port: int | None = None,
    web_mqtt_port: int | None = None,
    web_amqp_port: int | None = None,
    shard_link_port: int | None = None,
    shard_link_secret: str | None = None,
    shard_index: int | None = None,
) -> ServerOptions:
    """Command-line values win over the file's `[server]` table, which wins over defaults.

    An http_port of -1 (either source) disables the management listener, an amqp_port of -1
    the plain AMQP listener (only with TLS configured: some AMQP listener must remain), a
    stomp_port or mqtt_port of -1 that protocol's listener. The shard link's listener is off
    unless a port is given, and then needs a secret.

    The cluster options (`--cluster-etcd` ...) win over the file's `[cluster]` table in the
    same way; without either this is a single node.

    Raises:
        ConfigError: the plain AMQP listener is off and no `[tls]` is configured; a shard
            link port without a secret; a shard index out of range; a cluster
            option without etcd endpoints; a cluster node without a name.
    """
    listen = config.listen
    http = http_port if http_port is not None else listen.http_port
    if http is None:
        http = DEFAULT_HTTP_PORT
    amqp = _first(amqp_port, listen.amqp_port, DEFAULT_AMQP_PORT)
    if amqp < 0 and config.tls is None:
        raise ConfigError("the plain AMQP listener is off (amqp_port off) but [tls] is not set")
    stomp = _first(stomp_port, listen.stomp_port, DEFAULT_STOMP_PORT)
    mqtt = _first(mqtt_port, listen.mqtt_port, DEFAULT_MQTT_PORT)
    stream = _first(stream_port, listen.stream_port, DEFAULT_STREAM_PORT)
    cluster = _cluster(config, cluster_etcd, node_name, cluster_port, cluster_advertise)
    node = cluster.node_name if cluster is not None else node_name
    web_stomp = _first(web_stomp_port, listen.web_stomp_port, -1)
    web_mqtt = _first(web_mqtt_port, listen.web_mqtt_port, -1)
    web_amqp = _first(web_amqp_port, listen.web_amqp_port, -1)
    shard = _first(shard_index, listen.shard_index, 0)
    if not 0 <= shard <= MAX_SHARD_INDEX:
        raise ConfigError(f"the shard index must be 0 to {MAX_SHARD_INDEX}, not {shard}")
    link = _first(shard_link_port, listen.shard_link_port, -1)
    secret = shard_link_secret or listen.shard_link_secret
    if link >= 0 and not secret:
        raise ConfigError(
            "the shard link listener (--shard-link-port) needs a secret: --shard-link-secret, "
            "RINGMQ_SHARD_LINK_SECRET or [server] shard_link_secret"
        )
    return ServerOptions(
        host=host or listen.host or DEFAULT_HOST,
        stomp_port=None if stomp < 0 else stomp,
        mqtt_port=None if mqtt < 0 else mqtt,
        stream_port=None if stream < 0 else stream,
        web_stomp_port=None if web_stomp < 0 else web_stomp,
        web_mqtt_port=None if web_mqtt < 0 else web_mqtt,
        web_amqp_port=None if web_amqp < 0 else web_amqp,
        amqp_port=None if amqp < 0 else amqp,
        amqp_bind=amqp_bind or listen.amqp_bind,
        amqps_bind=amqps_bind or listen.amqps_bind,
        http_bind=http_bind or listen.http_bind,
        http_port=None if http < 0 else http,
        data_dir=data_dir or listen.data_dir or DEFAULT_DATA_DIR,
        config=config,
        memory=memory or MemoryLimits(),
        replication=replication,
        cluster=cluster,
        node=node or DEFAULT_NODE,
        shard_link_port=None if link < 0 else link,
        shard_link_secret=secret.encode() if link >= 0 and secret else None,
        shard_index=shard,
    )


def _cluster(
    config: FileConfig,
    etcd: str | None,
    node_name: str | None,
    port: int | None,
    advertise: str | None,
) -> ClusterSettings | None:
    # the command line's cluster options over the file's [cluster]
    settings = config.cluster
    if etcd is not None:
        try:
            endpoints = parse_endpoints(etcd)
        except ValueError as exc:
            raise ConfigError(f"--cluster-etcd: {exc}") from None
        settings = (
            ClusterSettings(etcd=endpoints)
            if settings is None
            else replace(settings, etcd=endpoints)
        )
    if settings is None:
        if port is not None or advertise is not None:
            raise ConfigError("--cluster-port and --cluster-advertise need --cluster-etcd")
        return None
    if node_name is not None:
        settings = replace(settings, node_name=node_name)
    if port is not None:
        settings = replace(settings, cluster_port=port)
    if advertise is not None:
        settings = replace(settings, advertise=advertise)
    if not settings.etcd:
        raise ConfigError("[cluster] needs etcd endpoints: [cluster] etcd or --cluster-etcd")
    if not settings.node_name:
        raise ConfigError("a cluster node needs a name: --node-name or [cluster] node_name")
    return settings


def _first(*values: int | None) -> int:
    for v in values:
        if v is not None:
            return v
    raise ValueError("no value")
