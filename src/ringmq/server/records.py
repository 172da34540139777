"""What management shows of a live connection: the server's connection objects as the shared
records of `ringmq.status` (`BrokerServer.connections`)."""

from __future__ import annotations

from ringmq.server.transport import ClientConnection
from ringmq.status import ConnectionInfo


def connection_info(c: ClientConnection, flow_held: bool) -> ConnectionInfo:
    """The record of `c` (`flow_held`: publisher flow holds it, RabbitMQ's "flow" state)."""
    info = ConnectionInfo(
        conn_id=c.conn_id,
        name=c.name,
        user="",
        vhost="",
        peer_host=c.peer[0],
        peer_port=c.peer[1],
        host=c.sock_name[0],
        port=c.sock_name[1],
        connected_at_ms=c.connected_at_ms,
        state="closing"
        if c.closing
        else "blocked"
        if c.blocked_reason
        else "flow"
        if flow_held
        else "running",
        blocked_reason=c.blocked_reason,
        recv_oct=c.recv_oct,
        send_oct=c.send_oct,
        ssl=c.tls,
    )
    if c.handler is not None:
        h = c.handler.info()
        info.protocol = h.protocol
        info.user = h.user
        info.vhost = h.vhost
        info.channels = h.channels
        info.client_properties = h.client_properties
        info.heartbeat_s = h.heartbeat_s
        info.frame_max = h.frame_max
        info.channel_max = h.channel_max
        info.auth_mechanism = h.auth_mechanism
    return info
