"""`ringmq serve`: run the broker in the foreground until SIGTERM or SIGINT."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ringmq import announce

if TYPE_CHECKING:
    from ringmq.server.options import ReplicationSettings

_LOG_LEVELS = ("debug", "info", "warning", "error", "critical")


def serve(
    host: Annotated[
        str | None,
        typer.Option(help="Address to listen on (default 127.0.0.1), unless a --*-bind says."),
    ] = None,
    amqp_port: Annotated[
        str | None,
        typer.Option(
            help="AMQP port (default 5672; 0 picks a free port; off: no plain AMQP listener, "
            "only AMQPS, which needs \\[tls] in the configuration file)."
        ),
    ] = None,
    amqp_bind: Annotated[
        str | None, typer.Option(help="Address of the plain AMQP listener (default --host).")
    ] = None,
    amqps_bind: Annotated[
        str | None, typer.Option(help="Address of the AMQPS listener (default --host).")
    ] = None,
    http_bind: Annotated[
        str | None,
        typer.Option(help="Address of the management HTTP(S) listener (default --host)."),
    ] = None,
    http_port: Annotated[
        str | None,
        typer.Option(
            help="Management HTTP port (default 15672; 0 picks a free port; off: no listener)."
        ),
    ] = None,
    stomp_port: Annotated[
        str | None,
        typer.Option(help="STOMP port (default 61613; 0 picks a free port; off: no listener)."),
    ] = None,
    mqtt_port: Annotated[
        str | None,
        typer.Option(help="MQTT port (default 1883; 0 picks a free port; off: no listener)."),
    ] = None,
    stream_port: Annotated[
        str | None,
        typer.Option(
            help="RabbitMQ stream protocol port (default 5552; 0 picks a free port; off: none)."
        ),
    ] = None,
    web_stomp_port: Annotated[
        str | None,
        typer.Option(help="STOMP over WebSockets, path /ws (RabbitMQ's 15674; default off)."),
    ] = None,
    web_mqtt_port: Annotated[
        str | None,
        typer.Option(help="MQTT over WebSockets, path /ws (RabbitMQ's 15675; default off)."),
    ] = None,
    web_amqp_port: Annotated[
        str | None,
        typer.Option(help="AMQP 1.0 over WebSockets, path /ws (usually 15678; default off)."),
    ] = None,
    shard_link_port: Annotated[
        str | None,
        typer.Option(
            help="Internal, experimental: the shard link's port on 127.0.0.1, what the shards "
            "of one broker use; not for clients (0 picks a free port; default off).",
        ),
    ] = None,
    shard_link_secret: Annotated[
        str | None,
        typer.Option(
            help="The shard link's shared secret (needed with --shard-link-port).",
            envvar="RINGMQ_SHARD_LINK_SECRET",
        ),
    ] = None,
    shard_index: Annotated[
        int | None,
        typer.Option(
            help="Internal, experimental: this shard's index among the shards of one broker, "
            "what the shard link tells an origin shard (default 0).",
            min=0,
        ),
    ] = None,
    shard_peers: Annotated[
        str | None,
        typer.Option(
            help="Internal (set by --shards): the other shards' link listeners, "
            "INDEX=HOST:PORT[,...].",
            hidden=True,
        ),
    ] = None,
    reuse_port: Annotated[
        bool,
        typer.Option(
            help="Internal (set by --shards): bind the AMQP port with SO_REUSEPORT.", hidden=True
        ),
    ] = False,
    shards: Annotated[
        int,
        typer.Option(
            help="Experimental: run N shard processes under this one, sharing the AMQP port "
            "(docs/dev/shards.md; shard 0 serves management, STOMP, MQTT and streams).",
            min=1,
            max=64,
        ),
    ] = 1,
    data_dir: Annotated[
        Path | None, typer.Option(help="Where messages and definitions are stored.")
    ] = None,
    config: Annotated[
        Path | None,
        typer.Option(help="TOML configuration or an Artemis broker.xml.", exists=True),
    ] = None,
    log_level: Annotated[str, typer.Option(help="debug, info, warning or error.")] = "info",
    memory_high_watermark: Annotated[
        str | None,
        typer.Option(
            help="Block publishers past this memory use: a fraction of RAM (0.4, the default) "
            "or a size (512MiB)."
        ),
    ] = None,
    disk_free_limit: Annotated[
        str | None,
        typer.Option(help="Block publishers when free disk falls below this (default 50MB)."),
    ] = None,
    max_message_size: Annotated[
        str | None,
        typer.Option(
            help="Largest message body accepted, e.g. 16MiB (the default) or 1048576; larger "
            "ones are refused with 406 at their content header. Overrides [limits]."
        ),
    ] = None,
    http_max_body_size: Annotated[
        str | None,
        typer.Option(
            help="Largest management API request body, e.g. 20MiB (the default) or 1048576; "
            "larger ones are answered 413. Overrides management.http.max_body_size."
        ),
    ] = None,
    paging: Annotated[
        bool, typer.Option(help="Page queue tails to disk under --data-dir (default on).")
    ] = True,
    stream_confirm: Annotated[
        str | None,
        typer.Option(
            help="When a publish to a stream is confirmed: fsynced (after the fsync covering "
            "it, the default) or written (once handed to the OS, as RabbitMQ's streams: "
            "survives kill -9, not a power loss). Overrides [server] stream_confirm."
        ),
    ] = None,
    # -- cluster on etcd (docs/clustering.md) --
    cluster_etcd: Annotated[
        str | None,
        typer.Option(
            help="Join a cluster: etcd client URLs, http://HOST:PORT[,...]. Without it (and "
            "without [cluster]) the node is a single node."
        ),
    ] = None,
    node_name: Annotated[
        str | None,
        typer.Option(help="This node's name, unique in the cluster (needed with --cluster-etcd)."),
    ] = None,
    cluster_port: Annotated[
        int | None,
        typer.Option(
            help="Replication port of this node (with --cluster-etcd: default 5679; without: "
            "this node leads, streaming its store's log to --follow nodes; 0 picks one).",
            min=0,
            max=65_535,
        ),
    ] = None,
    cluster_advertise: Annotated[
        str | None,
        typer.Option(
            help="HOST:PORT other nodes and clients use for this node (default: the listen "
            "host and --cluster-port)."
        ),
    ] = None,
    # -- replication of the store without etcd: a static leader and its followers --
    follow: Annotated[
        str | None,
        typer.Option(
            help="Follower: keep a warm copy of the leader at HOST:PORT (its --cluster-port) "
            "in --data-dir, serving no clients; `ringmq serve` on that directory promotes it."
        ),
    ] = None,
    cluster_secret: Annotated[
        str | None,
        typer.Option(
            help="Shared secret followers prove to the leader (needed with --cluster-port or "
            "--follow).",
            envvar="RINGMQ_CLUSTER_SECRET",
        ),
    ] = None,
    cluster_shard: Annotated[str, typer.Option(help="Shard id of this store.")] = "0",
    follower_fsync: Annotated[
        bool, typer.Option(help="Follower: fsync before acknowledging (default: once written).")
    ] = False,
    confirm_replicated: Annotated[
        bool,
        typer.Option(
            help="Leader: release confirms only once the connected followers acknowledged "
            "the writes too (default off)."
        ),
    ] = False,
    # -- operator: where the log goes and how it looks --
    log_file: Annotated[
        Path | None,
        typer.Option(help="Write the log to this file (rotated) instead of stderr."),
    ] = None,
    log_format: Annotated[
        str, typer.Option(help="text (one line per record) or json (one object per line).")
    ] = "text",
    log_max_bytes: Annotated[
        str, typer.Option(help="Rotate --log-file when it reaches this size (10MiB).")
    ] = "10MiB",
    log_backups: Annotated[
        int, typer.Option(help="Rotated log files kept (ringmq.log.1 ...).", min=0)
    ] = 5,
) -> None:
    """Run the broker (AMQP, STOMP, MQTT and the management HTTP API) until SIGTERM/SIGINT."""
    from ringmq.cli.logsetup import LOG_FORMATS, configure_logging
    from ringmq.node import run
    from ringmq.server.configfile import (
        ConfigError,
        FileConfig,
        load_config,
        parse_stream_confirm,
    )
    from ringmq.server.memory import MemoryLimits, parse_size, parse_watermark
    from ringmq.server.options import options_from

    level = log_level.lower()
    if level not in _LOG_LEVELS:
        raise typer.BadParameter(f"unknown log level {log_level!r}", param_hint="--log-level")
    if log_format not in LOG_FORMATS:
        raise typer.BadParameter(
            f"unknown log format {log_format!r} (text or json)", param_hint="--log-format"
        )
    try:
        rotate_at = parse_size(log_max_bytes)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--log-max-bytes") from None
    configure_logging(
        level, log_file=log_file, log_format=log_format, max_bytes=rotate_at, backups=log_backups
    )
    try:
        file_config = load_config(config) if config is not None else FileConfig()
    except ConfigError as exc:
        typer.echo(f"ringmq: {exc}", err=True)
        raise typer.Exit(code=2) from None
    limits = MemoryLimits(paging=paging)
    try:
        if memory_high_watermark is not None:
            limits = replace(limits, high_watermark=parse_watermark(memory_high_watermark))
        if disk_free_limit is not None:
            limits = replace(limits, disk_free_limit=parse_size(disk_free_limit))
        if max_message_size is not None:
            size = parse_size(max_message_size)
            if size < 1:
                raise ValueError("--max-message-size must be at least 1 byte")
            file_config = replace(
                file_config, limits=replace(file_config.limits, max_message_size=size)
            )
        if http_max_body_size is not None:
            size = parse_size(http_max_body_size)
            if size < 1:
                raise ValueError("--http-max-body-size must be at least 1 byte")
            file_config = replace(
                file_config, management=replace(file_config.management, max_body_size=size)
            )
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    if stream_confirm is not None:
        try:
            rule = parse_stream_confirm(stream_confirm)
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="--stream-confirm") from None
        file_config = replace(file_config, stream_confirm=rule)
    # with etcd, the cluster decides who leads (docs/clustering.md); without, --cluster-port
    # makes this node a static leader and --follow a follower
    replication = _replication(
        None if cluster_etcd else cluster_port,
        follow,
        cluster_secret,
        cluster_shard,
        follower_fsync,
        confirm_replicated,
    )
    amqp = _port_option(amqp_port, "--amqp-port")
    stomp = _port_option(stomp_port, "--stomp-port")
    mqtt = _port_option(mqtt_port, "--mqtt-port")
    http = _port_option(http_port, "--http-port")
    stream = _port_option(stream_port, "--stream-port")
    web_stomp = _port_option(web_stomp_port, "--web-stomp-port")
    web_mqtt = _port_option(web_mqtt_port, "--web-mqtt-port")
    web_amqp = _port_option(web_amqp_port, "--web-amqp-port")
    shard_link = _port_option(shard_link_port, "--shard-link-port")
    try:
        options = options_from(
            file_config,
            host=host,
            amqp_port=amqp,
            http_port=http,
            data_dir=data_dir,
            memory=limits,
            amqp_bind=amqp_bind,
            amqps_bind=amqps_bind,
            http_bind=http_bind,
            stomp_port=stomp,
            mqtt_port=mqtt,
            stream_port=stream,
            replication=replication,
            cluster_etcd=cluster_etcd,
            node_name=node_name,
            cluster_port=cluster_port if cluster_etcd else None,
            cluster_advertise=cluster_advertise,
            web_stomp_port=web_stomp,
            web_mqtt_port=web_mqtt,
            web_amqp_port=web_amqp,
            shard_link_port=shard_link,
            shard_link_secret=shard_link_secret,
            shard_index=shard_index,
        )
    except ConfigError as exc:
        typer.echo(f"ringmq: {exc}", err=True)
        raise typer.Exit(code=2) from None
    if shard_peers:
        options = replace(options, shard_peers=_peers(shard_peers))
    if reuse_port:
        options = replace(options, reuse_port=True)
    if shards > 1:
        from ringmq.cli.shards import refusal, run_shards

        why = refusal(options, shards)
        if why is not None:
            typer.echo(f"ringmq: {why}", err=True)
            raise typer.Exit(code=2)
        raise typer.Exit(code=run_shards(options, shards, _serve_args(sys.argv)))
    # where `ringmq status` and the other commands find this broker (ringmq.announce)
    here = (options.data_dir / announce.FILE_NAME, announce.runtime_file())
    raise typer.Exit(code=run(replace(options, announce_to=here)))


def _peers(text: str) -> dict[int, tuple[str, int]]:
    # "1=127.0.0.1:4001,2=127.0.0.1:4002" -> {1: ("127.0.0.1", 4001), ...}
    out: dict[int, tuple[str, int]] = {}
    try:
        for item in text.split(","):
            index, _, where = item.partition("=")
            host, _, port = where.rpartition(":")
            out[int(index)] = (host, int(port))
    except ValueError:
        raise typer.BadParameter(
            f"not INDEX=HOST:PORT[,...]: {text!r}", param_hint="--shard-peers"
        ) from None
    return out


def _serve_args(argv: list[str]) -> list[str]:
    # the command line after `serve`, without --shards (each shard gets the rest)
    args = argv[argv.index("serve") + 1 :] if "serve" in argv else []
    out: list[str] = []
    skip = False
    for a in args:
        if skip:
            skip = False
        elif a == "--shards":
            skip = True
        elif not a.startswith("--shards="):
            out.append(a)
    return out


def _port_option(text: str | None, option: str) -> int | None:
    # a port option's value: a number, "off"/"none" (-1), or None when not given
    from ringmq.server.configfile import parse_port

    if text is None:
        return None
    try:
        return parse_port(text)
    except ValueError:
        raise typer.BadParameter(f"{text!r} is not a port or 'off'", param_hint=option) from None


def _replication(
    port: int | None,
    follow: str | None,
    secret: str | None,
    shard: str,
    fsync: bool,
    confirm: bool,
) -> ReplicationSettings | None:
    from ringmq.server.configfile import MAX_PORT
    from ringmq.server.options import ReplicationSettings

    if port is None and follow is None:
        return None
    if port is not None and follow is not None:
        raise typer.BadParameter("a node leads (--cluster-port) or follows (--follow), not both")
    if not secret:
        raise typer.BadParameter("replication needs a shared secret", param_hint="--cluster-secret")
    leader: tuple[str, int] | None = None
    if follow is not None:
        host, sep, text = follow.rpartition(":")
        if not sep or not host or not text.isdigit() or not 0 < int(text) <= MAX_PORT:
            raise typer.BadParameter(f"{follow!r} is not HOST:PORT", param_hint="--follow")
        leader = (host, int(text))
    return ReplicationSettings(
        secret=secret.encode(),
        shard=shard,
        port=port,
        follow=leader,
        follower_fsync=fsync,
        confirm_replicated=confirm,
    )


def register(app: typer.Typer) -> None:
    """Add `serve` to the CLI."""
    app.command(name="serve")(serve)
