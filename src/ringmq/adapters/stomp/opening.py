"""The CONNECT of a STOMP connection (`StompHandler`'s handshake): login, the vhost, the core
connection and its publishing session, CONNECTED.

Theory of operation: `connect` runs for the CONNECT (or STOMP) frame. The quick login backends
answer at once (`HandlerContext.login`: the user table, OAuth 2 tokens, certificates). When
they refuse a password login and a slow backend is configured (LDAP,
`adapters.handler.ask_slow_login`, checked off the loop), the handler stops taking frames
(`StompHandler.waiting_login`: what the client sends meanwhile stays in the reader) until the
answer comes back as a read of the connection: CONNECTED (`open_as`) or ERROR, then the
frames that waited. The functions take the handler, whose connection state this module fills
in once per connection.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from ringmq import __version__
from ringmq.adapters.handler import HandlerInfo, LoginThrottledError, SlowAnswer, ask_slow_login
from ringmq.core.auth import Identity
from ringmq.core.errors import BrokerError, Condition
from ringmq.stomp import Frame

if TYPE_CHECKING:
    from ringmq.adapters.stomp.handler import StompHandler

PUBLISH_CHANNEL: Final = 1
"""The core session of a connection's SENDs outside transactions."""


def connect(h: StompHandler, frame: Frame, now_ms: int) -> None:
    """A CONNECT (or STOMP) frame (see the module docstring)."""
    ctx = h.ctx
    config = h.broker.config
    login = frame.get("login")
    passcode = frame.get("passcode")
    mechanism = "PLAIN"
    if login is None and ctx.peer.cert_login(h.broker, "stomp"):
        # RabbitMQ's stomp.ssl_cert_login: the verified certificate names the user
        mechanism, login = "EXTERNAL", ""
    elif login is None:  # the anonymous login (RabbitMQ's default_user, 4's anonymous_login_user)
        if config.anonymous_login is None:
            h.conn.fail(
                "Bad CONNECT", "anonymous logins are off: send login and passcode", frame=frame
            )
            return
        login, passcode = config.anonymous_login
    vhost = _vhost(h, frame.get("host"))
    h.client_id = frame.get("client-id") or ""
    props = {"client_id": h.client_id} if h.client_id else {}
    try:
        who = ctx.login(mechanism, login, passcode or "", now_ms)
    except LoginThrottledError as exc:
        h.conn.fail("Bad CONNECT", exc.text, frame=frame)
        return
    except BrokerError as exc:
        answer = _slow_answer(h, frame, mechanism, vhost, props)
        if ask_slow_login(ctx, mechanism, login, passcode or "", answer):
            h.waiting_login = True  # later frames wait in the reader
            return
        h.conn.fail("Bad CONNECT", exc.text, frame=frame)
        return
    open_as(h, frame, who, mechanism, vhost, props, now_ms)


def _slow_answer(
    h: StompHandler, frame: Frame, mechanism: str, vhost: str, props: dict[str, Any]
) -> SlowAnswer:
    # A slow backend's (LDAP) answer, as a read of the connection: CONNECTED or ERROR,
    # then the frames that waited.
    def answer(who: Identity | None, why: str, now_ms: int) -> None:
        if h.conn.closed:
            return
        h.waiting_login = False
        if who is None:
            text = BrokerError(Condition.ACCESS_REFUSED, why).text
            h.conn.fail("Bad CONNECT", text, frame=frame)
        else:
            open_as(h, frame, who, mechanism, vhost, props, now_ms)
        h.ctx.emit(h.receive_data(b"", now_ms))

    return answer


def open_as(
    h: StompHandler,
    frame: Frame,
    who: Identity,
    mechanism: str,
    vhost: str,
    props: dict[str, Any],
    now_ms: int,
) -> None:
    """The CONNECT of logged-in `who`: the core connection (with the login's grant, this
    connection's alone), CONNECTED."""
    user = who.user
    try:
        h.broker.connection_opened(
            h.conn_id,
            user,
            vhost,
            h.ctx.peer.address,
            props,
            now_ms,
            protocol="stomp",
            grant=who.grant,
        )
    except BrokerError as exc:
        h.conn.fail("Bad CONNECT", exc.text, frame=frame)
        return
    h.is_open = True
    if (refusal := h.channel_refusal(PUBLISH_CHANNEL, now_ms)) is not None:
        h.conn.fail("Bad CONNECT", refusal, frame=frame)
        return
    h.publishing = h.session_of(PUBLISH_CHANNEL)
    conn = h.conn
    h.record = HandlerInfo(
        protocol=f"STOMP {conn.version}",
        user=user,
        vhost=vhost,
        auth_mechanism=mechanism,
        client_properties=props,
        channels=1,
        heartbeat_s=conn.send_every_ms // 1000,
        frame_max=conn.reader.limits.max_body,
    )
    conn.accept(
        {
            "server": f"ringmq/{__version__}",
            "session": f"session-{h.conn_id}",
            "user-name": user,
        }
    )


def _vhost(h: StompHandler, host: str | None) -> str:
    # RabbitMQ: the `host` header names the vhost, "/" without one. Clients that fill it
    # with the host they dialled (stomp.py does) get "/" when no vhost has that name.
    if not host:
        return "/"
    if host in h.broker.vhosts:
        return host
    peer = h.ctx.peer
    if host in ("localhost", peer.local_host, f"{peer.local_host}:{peer.local_port}"):
        return "/"
    return host  # connection_opened refuses it: not a vhost
