"""The AMQP 0-9-1 adapter: a channel's commands as calls on the protocol-neutral core.

Theory of operation
-------------------
Each 0-9-1 connection (`connection.Amqp091Handler`, behind the server's `Handler` seam, over
the sans-IO `protocol.connection.ServerConnection`) assembles commands and hands each one to
`Amqp091.handle(conn_id, channel, method, content, now_ms)`, which runs one core call (the
call protocol, `core/call.py`): `Calls.begin`, the method's handler (`methods.py`), then
`Calls.end(publish=<a basic.publish>)`, whose one rule says whether to dispatch now (a
publish's dispatch may wait for the read batch's `dispatch_pending`), and which writes the
durable definitions; a plain basic.publish is one `Publisher.publish_call` (the pipeline as
one whole call, the call protocol's third form). It returns the call's effects in order: the
core's own (neutral: `Deliver`, `Confirm`, `Bounce`...; `frames.py` says how each goes on the
wire) and the handler's 0-9-1
replies (`Calls.emit`).

Errors: a core `BrokerError` becomes an `AMQPError` with the reply code of its condition
(`errors.py`) and the class and method ids of the method that caused it; the connection
closes the channel (soft codes) or itself (hard codes) and reports it back with
`channel_closed` / `connection_closed`.

The publish path: `handle` does for basic.publish, inline, what the generic path does without
the handler-table detour (same checks, same message building, the core's one pipeline);
anything unusual (no session, a transactional channel, an unknown exchange, no content) takes
the generic path, which reports it.

`check_publish` runs a publish's checks when its method arrives, before its body (a refused
publish costs no buffered body); `check_login` reads the PLAIN and AMQPLAIN responses of
connection.start-ok; `publish_batch` publishes a batch of 0-9-1 messages (the streams API).
"""

from __future__ import annotations

import itertools
import struct
from collections.abc import Iterator, Sequence
from typing import Any, Final

from ringmq.adapters.amqp091.errors import to_amqp
from ringmq.adapters.amqp091.message import DECODE_ANY, build, columns_of, run_columns
from ringmq.adapters.amqp091.methods import HANDLERS
from ringmq.amqp import spec
from ringmq.amqp.frames import RawContent
from ringmq.amqp.properties import FLAG_DELIVERY_MODE
from ringmq.amqp.reply_codes import AMQPError, ReplyCode
from ringmq.amqp.tables import decode_table
from ringmq.core.auth import ExternalGrant, Identity
from ringmq.core.broker import Broker
from ringmq.core.certlogin import offers_external
from ringmq.core.effects import Effect
from ringmq.core.errors import BrokerError, Condition
from ringmq.core.message import Message
from ringmq.core.publishbatch import BatchPublished
from ringmq.core.queue.ports import RunColumns
from ringmq.core.session import PublishMode, Session
from ringmq.core.settings import SettingsError

_PUBLISH: Final = spec.BasicPublish
_PUBLISH_IDS: Final = (spec.BasicPublish.CLASS_ID, spec.BasicPublish.METHOD_ID)
_TX: Final = PublishMode.TX
_CONFIRM: Final = PublishMode.CONFIRM


def check_login(
    broker: Broker,
    mechanism: str,
    response: bytes,
    peer_loopback: bool,
    cert: bytes | None = None,
    now_ms: int = 0,
) -> Identity:
    """Authenticate a connection.start-ok response; return who logged in (the user and, for a
    token, its grant: the connection's alone).

    PLAIN is `\\0user\\0password`; AMQPLAIN is a field table without its length prefix
    holding LOGIN and PASSWORD; EXTERNAL takes the name from `cert`, the client's verified
    certificate (DER; `core.certlogin`). Raises ACCESS_REFUSED on bad credentials (and for
    the loopback-only default user from a remote peer), COMMAND_INVALID for an unknown
    mechanism.
    """
    if mechanism == "EXTERNAL" and offers_external(broker.auth.cert_login):
        try:
            return Identity(broker.auth.login_external(cert, peer_loopback).name)
        except BrokerError as exc:
            raise to_amqp(exc) from None
    if mechanism == "PLAIN":
        parts = response.split(b"\x00")
        if len(parts) != 3:
            raise AMQPError(ReplyCode.ACCESS_REFUSED, "malformed PLAIN response")
        user, password = parts[1], parts[2]
    elif mechanism == "AMQPLAIN":
        try:
            table, _ = decode_table(struct.pack(">I", len(response)) + response, 0)
        except AMQPError:
            raise AMQPError(ReplyCode.ACCESS_REFUSED, "malformed AMQPLAIN response") from None
        login, pw = table.get("LOGIN"), table.get("PASSWORD")
        user = login.encode() if isinstance(login, str) else bytes(login or b"")
        password = pw.encode() if isinstance(pw, str) else bytes(pw or b"")
    else:
        raise AMQPError(
            ReplyCode.COMMAND_INVALID, f"unknown authentication mechanism '{mechanism}'"
        )
    name = user.decode("utf-8", "replace")
    secret = password.decode("utf-8", "replace")
    try:
        # the backends in turn (an OAuth 2 token as the password names its own user)
        return broker.auth.login_any(mechanism, name, secret, peer_loopback, now_ms)
    except BrokerError as exc:
        raise to_amqp(exc) from None


class Amqp091:
    """AMQP 0-9-1 commands on a `Broker` (see the module docstring)."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.conns = broker.state.conns
        self.auth = broker.state.auth
        self.publisher = broker.publisher
        self.publish_call = broker.publisher.publish_call
        """The pipeline as one whole call (`Publisher.publish_call`, bound once)."""
        self.calls = broker.calls

    # ------------------------------------------------------------------ connections
    def check_login(
        self,
        mechanism: str,
        response: bytes,
        peer_loopback: bool,
        cert: bytes | None = None,
        now_ms: int = 0,
    ) -> Identity:
        """Authenticate a connection.start-ok response (`check_login`)."""
        return check_login(self.broker, mechanism, response, peer_loopback, cert, now_ms)

    def update_secret(self, conn_id: int, secret: bytes, now_ms: int) -> None:
        """Connection.Update-Secret: a fresh OAuth 2 token for this connection alone (raises
        ACCESS_REFUSED when it is refused)."""
        conn = self.conns.get(conn_id)
        try:
            if conn is None:
                raise BrokerError(Condition.ACCESS_REFUSED, "the connection is not open")
            token = secret.decode("utf-8", "replace")
            conn.regrant(self.auth.update_secret(conn_id, conn.user, conn.grant, token, now_ms))
        except BrokerError as exc:
            raise to_amqp(exc) from None

    def connection_opened(
        self,
        conn_id: int,
        user: str,
        vhost: str,
        peer: str,
        client_properties: dict[str, Any],
        now_ms: int,
        grant: ExternalGrant | None = None,
    ) -> None:
        """Register a connection that opened `vhost` (AMQPError NOT_ALLOWED / ACCESS_REFUSED),
        with its login's `grant`."""
        try:
            self.broker.connection_opened(
                conn_id, user, vhost, peer, client_properties, now_ms, grant=grant, parks=True
            )
        except BrokerError as exc:
            raise to_amqp(exc) from None

    # ------------------------------------------------------------------ commands
    def handle(
        self,
        conn_id: int,
        channel: int,
        method: Any,
        content: RawContent | None,
        now_ms: int,
    ) -> list[Effect]:
        """Apply one exchange/queue/basic/confirm/tx method received on an open channel.

        Returns the effects to apply in order. Raises AMQPError (class_id/method_id set) on a
        protocol error; the caller closes the channel or connection and then reports it with
        `channel_closed` / `connection_closed`.
        """
        if type(method) is not _PUBLISH:
            return self._handle(conn_id, channel, method, content, now_ms)
        # One basic.publish without the handler-table detour, inline here: the hot path of
        # every publisher (a call less per publish than a method of its own, measured with
        # benchmarks/hotpath_bench.py --profile). The same steps as `methods.basic_publish` on
        # an open non-tx channel with content; the rest goes to `_handle`, before anything
        # has changed. The checks and the message come first, then the publish as one core
        # call (`Publisher.publish_call`: the pipeline begins and ends the call itself, one
        # Python call into the core per publish; callgrind, hotpath_bench.py).
        s = self.conns[conn_id].sessions.get(channel)
        if s is None or s.mode is _TX or content is None or method.immediate:
            return self._handle(conn_id, channel, method, content, now_ms)
        publisher = self.publisher
        publish_call = self.publish_call
        name = method.exchange
        vh = s.vhost
        x = vh.exchanges.get(name)
        body = content.body
        pb = content.properties_bin
        try:
            # Guards in front of the shared steps, measured with benchmarks/hotpath_bench.py
            # (--profile counts calls): each saved call is about 0.1 us of a 10 us publish +
            # deliver + ack. `exchange_for` runs unless the exchange is known, public and
            # already checked writable on this session; `build` unless the property list
            # holds nothing the core reads.
            if (
                x is None
                or x.internal
                or s.perm_generation != self.auth.generation
                or name not in s.write_ok
            ):
                vh, x = publisher.exchange_for(s, name, method.routing_key)
            if len(body) > publisher.max_message_size:
                publisher.check_size(len(body))
            # A list too short to hold its flags takes `build`, which refuses it.
            flags = ((pb[0] << 8) | pb[1]) if len(pb) >= 2 else DECODE_ANY
            if not flags & DECODE_ANY:
                # Positional: no keyword matching (headers, priority, expiration, persistent,
                # id, time).
                msg = Message(
                    name, method.routing_key, pb, body, None, 0, None, False, None, now_ms
                )
            elif flags == FLAG_DELIVERY_MODE and len(pb) == 3:  # only delivery_mode: 1 byte
                persistent = pb[2] == 2
                msg = Message(
                    name, method.routing_key, pb, body, None, 0, None, persistent, None, now_ms
                )
            else:
                msg = build(s, name, method.routing_key, pb, body, now_ms)
            out: list[Effect] = []
            publish_call(msg, s, vh, x, now_ms, method.mandatory, out)
            return out
        except BrokerError as exc:
            raise to_amqp(exc, *_PUBLISH_IDS) from None
        except AMQPError as exc:
            if not exc.class_id:
                exc.class_id, exc.method_id = _PUBLISH_IDS
            raise

    def _handle(
        self,
        conn_id: int,
        channel: int,
        method: Any,
        content: RawContent | None,
        now_ms: int,
    ) -> list[Effect]:
        # Every method the generic way: look up its handler, run it as one call, map errors.
        # The call is the plain `begin` ... `end` / `abort` pair: acks and gets run it per
        # message, where a `with` block costs several times as much.
        broker = self.broker
        session = self.conns[conn_id].sessions.get(channel)
        if session is None:
            raise AMQPError(
                ReplyCode.CHANNEL_ERROR,
                f"expected 'channel.open' on channel {channel}",
                class_id=method.CLASS_ID,
                method_id=method.METHOD_ID,
            )
        handler = HANDLERS.get(type(method))
        if handler is None:
            raise AMQPError(
                ReplyCode.COMMAND_INVALID,
                f"method {getattr(method, 'NAME', type(method).__name__)} not handled by the core",
                class_id=getattr(method, "CLASS_ID", 0),
                method_id=getattr(method, "METHOD_ID", 0),
            )
        calls = self.calls
        out = calls.begin(now_ms)
        try:
            handler(broker, session, method, content, now_ms)
        except BaseException as exc:
            calls.abort()  # a refused method dispatches nothing
            if isinstance(exc, BrokerError):
                raise to_amqp(exc, method.CLASS_ID, method.METHOD_ID) from None
            if isinstance(exc, SettingsError):
                raise AMQPError(
                    ReplyCode.PRECONDITION_FAILED,
                    str(exc),
                    class_id=method.CLASS_ID,
                    method_id=method.METHOD_ID,
                ) from None
            if isinstance(exc, AMQPError) and not exc.class_id:
                exc.class_id = method.CLASS_ID
                exc.method_id = method.METHOD_ID
            raise
        calls.end(publish=type(method) is _PUBLISH)
        return out

    def check_publish(self, conn_id: int, channel: int, method: Any) -> None:
        """The checks of a basic.publish that need no content, run when its method arrives.

        The exchange exists, is not internal and the user may write to it; `immediate` is
        refused. The protocol layer calls it before the body is received, so a refused publish
        costs no buffered body. Raises AMQPError (class and method ids of basic.publish);
        `handle` repeats the checks (cached) when the whole command arrives.
        """
        s = self.broker.session(conn_id, channel)
        if s is None or type(method) is not _PUBLISH:
            return  # `handle` reports these with the whole command
        try:
            self.broker.publisher.exchange_for(s, method.exchange, method.routing_key)
        except BrokerError as exc:
            raise to_amqp(exc, *_PUBLISH_IDS) from None
        if method.immediate:
            raise AMQPError(
                ReplyCode.NOT_IMPLEMENTED,
                "immediate=true",
                class_id=_PUBLISH_IDS[0],
                method_id=_PUBLISH_IDS[1],
            )

    # ------------------------------------------------------------------ batches
    def publish_run_channels(self, conn_id: int) -> set[int] | None:
        """The channels of `conn_id` whose consecutive basic.publish commands may go as one
        `publish_batch`: open channels in confirm mode (a transactional channel buffers each
        publish; without confirms an Artemis FAIL limit fails the producer per publish); None
        when there is none."""
        conn = self.conns.get(conn_id)
        runs = None
        if conn is not None:
            for ch, s in conn.sessions.items():  # a loop: the server asks once per read
                if s.mode is _CONFIRM:
                    runs = {ch} if runs is None else runs | {ch}
        return runs

    def publish_batch(
        self,
        conn_id: int,
        channel: int,
        exchange: str,
        messages: Sequence[tuple[str, bytes, bytes]],
        start: int,
        stop: int,
        now_ms: int,
    ) -> BatchPublished:
        """Publish `messages[start:stop]` ((routing key, raw properties, body) each) to
        `exchange` on an open channel, as that many `basic.publish` (mandatory and immediate
        false) would, with one confirm step per batch (`publishbatch.publish_batch`).

        The batch stops early at the first message whose publish raises (`error` is set, an
        AMQPError; `published` counts the messages before it; the caller closes the channel)
        or that blocks the connection (`blocked`). Raises AMQPError only when the channel is
        not open.
        """
        s = self.broker.session(conn_id, channel)
        if s is None:
            raise AMQPError(
                ReplyCode.CHANNEL_ERROR,
                f"expected 'channel.open' on channel {channel}",
                class_id=_PUBLISH_IDS[0],
                method_id=_PUBLISH_IDS[1],
            )
        if s.mode is _TX:
            return self._publish_batch_tx(conn_id, channel, exchange, messages, start, stop, now_ms)
        # As columns as far as they go (`columns_of`), the rest built one at a time.
        columns, start = columns_of(
            exchange, messages, start, stop, self.broker.publisher.max_message_size, now_ms
        )
        return self._publish(s, exchange, columns, messages, start, stop, now_ms)

    def publish_run(
        self,
        conn_id: int,
        channel: int,
        exchange: str,
        routing_key: str,
        props: Sequence[bytes],
        bodies: Sequence[bytes],
        now_ms: int,
    ) -> BatchPublished:
        """`publish_batch` of publishes that share one routing key, given as columns (raw
        property lists and bodies: a read's `PublishRun`), taken as columns by the core's
        columnar ingest as far as `run_columns` goes."""
        s = self.broker.session(conn_id, channel)
        if s is None or s.mode is _TX:
            rows = list(zip(itertools.repeat(routing_key, len(bodies)), props, bodies, strict=True))
            return self.publish_batch(conn_id, channel, exchange, rows, 0, len(rows), now_ms)
        max_size = self.broker.publisher.max_message_size
        columns = run_columns(exchange, routing_key, props, bodies, max_size, now_ms)
        k = 0 if columns is None else len(columns)
        rest = [(routing_key, props[i], bodies[i]) for i in range(k, len(bodies))]
        return self._publish(s, exchange, columns, rest, 0, len(rest), now_ms)

    def _publish(
        self,
        s: Session,
        exchange: str,
        columns: RunColumns | None,
        messages: Sequence[tuple[str, bytes, bytes]],
        start: int,
        stop: int,
        now_ms: int,
    ) -> BatchPublished:
        # `columns`, then `messages[start:stop]` built one at a time, as one batch.
        failed: list[AMQPError] = []
        done = self.broker.publish_batch(
            s.conn_id,
            s.channel,
            exchange,
            self._built(s, exchange, messages, start, stop, now_ms, failed),
            now_ms,
            columns,
        )
        if isinstance(done.error, BrokerError):
            done.error = to_amqp(done.error, *_PUBLISH_IDS)
        elif failed and not done.blocked:  # (blocked: the batch stopped before that message)
            done.error = failed[0]
        return done

    def _built(
        self,
        s: Session,
        exchange: str,
        messages: Sequence[tuple[str, bytes, bytes]],
        start: int,
        stop: int,
        now_ms: int,
        failed: list[AMQPError],
    ) -> Iterator[Message]:
        # The batch's messages, built one at a time: one that is too large or malformed ends
        # the batch there (a BrokerError raised here reaches the core's loop, which stops).
        check_size = self.broker.publisher.check_size
        for i in range(start, stop):
            rk, pb, body = messages[i]
            check_size(len(body))
            try:
                yield build(s, exchange, rk, pb, body, now_ms)
            except AMQPError as exc:
                if not exc.class_id:
                    exc.class_id, exc.method_id = _PUBLISH_IDS
                failed.append(exc)
                return

    def _publish_batch_tx(
        self,
        conn_id: int,
        channel: int,
        exchange: str,
        messages: Sequence[tuple[str, bytes, bytes]],
        start: int,
        stop: int,
        now_ms: int,
    ) -> BatchPublished:
        # A transactional channel only buffers publishes: nothing to batch, go one by one.
        done = BatchPublished([])
        methods: dict[str, spec.BasicPublish] = {}
        for i in range(start, stop):
            rk, pb, body = messages[i]
            method = methods.get(rk)
            if method is None:
                method = methods[rk] = spec.BasicPublish(exchange=exchange, routing_key=rk)
            try:
                done.effects.extend(
                    self.handle(
                        conn_id, channel, method, RawContent(60, len(body), pb, body), now_ms
                    )
                )
            except AMQPError as exc:
                done.error = exc
                break
            done.published += 1
        return done
