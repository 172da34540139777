"""The stream protocol adapter: one RabbitMQ stream client (`rstream`, ...) on the core.

Theory of operation
-------------------
`StreamHandler` is the `adapters.handler.Handler` of a socket of the stream protocol's
listener (`--stream-port`, 5552). `ringmq.streamproto` cuts and decodes its frames; each command
is answered here, the ones that touch the core inside one core call (`Calls.begin` / `end`).

Connecting, as `rstream` does it: peer properties, SASL handshake (PLAIN offered), SASL
authenticate (the shared login throttle), then the broker's Tune and the client's answer, then
Open (vhost): the answer advertises this node as the client reached it (the socket's local
address), which is where `rstream` connects for a stream's leader after a metadata query.

Streams are the core's stream queues (`x-queue-type: stream`): create, delete and metadata
are declarations, deletions and look-ups of those queues.

Publishing: one core session (channel 1, confirm mode), `adapters/stream/publishing.py`. The
publish frames of one read are handled together, in one core call (`_publish_held`): a run
of frames of one publisher becomes one chunk, kept as the entries arrived.

Consuming: a subscription is a core consumer of the stream on its own session (channel
2, 3...), browsing from its offset specification, settled by nothing, in chunk mode
(`Consumer.chunks`): each delivery is one stored chunk, sent as it is behind the Deliver
frame's header (the chunk carries its first offset and the CRC-32 clients check), and the
core's credit is the subscription's, in chunks, as RabbitMQ counts it. A stream deleted under a
subscription ends it with a MetadataUpdate.

Stored offsets (`store offset` / `query offset`) live with the stream (`Tracking.offsets`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Final

from ringmq import __version__
from ringmq.adapters.handler import HandlerContext, HandlerInfo
from ringmq.adapters.stream import superstreams
from ringmq.adapters.stream.publishing import Publishing
from ringmq.adapters.stream.replies import (
    client_properties,
    code_of,
    key_of,
    offset_spec,
    queue_arguments,
    stats_frame,
)
from ringmq.core.auth import Identity
from ringmq.core.effects import (
    ActivateConsumer,
    CancelConsumer,
    CloseConnection,
    Confirm,
    Deliver,
    Effect,
)
from ringmq.core.entities import QueueEntity
from ringmq.core.errors import BrokerError, Condition
from ringmq.core.session import Session
from ringmq.core.settings import SettingsError
from ringmq.core.streamlog import STREAM, StreamLog
from ringmq.core.streamsac import GroupKey
from ringmq.streamproto import codec as sp
from ringmq.streamproto import commands as sc
from ringmq.streamproto.chunk import deliver_header
from ringmq.streamproto.codec import RESPONSE, Code, Key, Writer

log = logging.getLogger(__name__)

PUBLISH_CHANNEL: Final = 1
DEFAULT_FRAME_MAX: Final = 1_048_576


@dataclass(slots=True)
class Subscription:
    id: int
    channel: int
    stream: str
    group: GroupKey | None = None
    """Its single-active-consumer group (None: not one)."""
    waiting: int = -1
    """Chunks of credit held while it is not active (-1: active, credit with the core)."""


class StreamHandler:
    """A stream protocol connection on the core (see the module docstring)."""

    def __init__(self, ctx: HandlerContext) -> None:
        self.ctx = ctx
        self.broker = ctx.broker
        self.conn_id = ctx.conn_id
        self.frame_max = ctx.limits.frame_max or DEFAULT_FRAME_MAX
        self.reader = sp.FrameReader(self.frame_max)
        self.out = bytearray()
        self._opened = False
        self._closed = False
        self._who: Identity | None = None
        """Who logged in (with a token's grant: this connection's alone)."""
        self._info = HandlerInfo(protocol="RabbitMQ Stream")
        self.publishing = Publishing(self.broker, self._send, self._stream, self.frame_max)
        self._subs: dict[int, Subscription] = {}
        self._by_channel: dict[int, Subscription] = {}
        self._next_channel = PUBLISH_CHANNEL + 1
        self._updates: dict[int, int] = {}
        """Consumer updates asked of the client: correlation id -> subscription id."""
        self._next_corr = 1
        self._effects: list[Effect] = []
        """Effects for other connections (a group's next active consumer), sent with the
        effects of the call that made them."""
        self.heartbeat_s = ctx.limits.heartbeat_s
        self._last_in = self._last_out = -1

    # ------------------------------------------------------------------ Handler
    @property
    def opened(self) -> bool:
        return self._opened

    @property
    def closed(self) -> bool:
        return self._closed

    def receive_data(self, data: bytes, now_ms: int) -> list[Effect]:
        self._last_in = -1  # seen: the next tick takes the time
        out: list[Effect] = []
        held: list[sc.Publish] = []  # publish frames, handled together (`_publish_held`)
        try:
            self.reader.feed(data)
            while not self._closed and (frame := self.reader.next_frame()) is not None:
                cmd = sp.decode(*frame)
                if type(cmd) is sc.Publish and self._opened:
                    held.append(cmd)
                    continue
                if held:
                    out.extend(self._publish_held(held, now_ms))
                    held = []
                out.extend(self._command(cmd, now_ms))
        except sp.ProtocolError as exc:
            log.debug("stream connection %d: %s", self.conn_id, exc)
            self._close(exc.code, str(exc))
        if held:  # before a frame that could not be read: published as they came
            out.extend(self._publish_held(held, now_ms))
        if self._effects:
            out += self._effects
            self._effects = []
        return out

    def apply(self, effect: Effect) -> None:
        match effect:
            case Deliver():
                sub = self._by_channel.get(effect.channel)
                if sub is not None:  # one stored chunk, sent as it is
                    chunk = effect.message.body
                    self.out += deliver_header(sub.id, len(chunk))
                    self.out += chunk
            case Confirm():
                if effect.channel == PUBLISH_CHANNEL:
                    self.publishing.confirmed(effect)
            case ActivateConsumer():
                sub = self._subs.get(effect.subscription_id)
                if sub is not None and sub.group is not None:
                    self._consumer_update(sub)
            case CancelConsumer():
                sub = self._by_channel.pop(effect.channel, None)
                if sub is not None:
                    self._subs.pop(sub.id, None)
                    w = Writer().u16(Code.STREAM_NOT_AVAILABLE).string(sub.stream)
                    self.out += w.frame(Key.METADATA_UPDATE)
            case CloseConnection():
                self._close(Code.INTERNAL_ERROR, effect.text)
            case _:
                pass

    def data_to_send(self) -> bytes:
        if not self.out:
            return b""
        data = bytes(self.out)
        self.out.clear()
        self._last_out = -1
        return data

    def tick(self, now_ms: int, mono_ms: int) -> list[Effect]:
        if self._last_in < 0:
            self._last_in = mono_ms
        if self._last_out < 0:
            self._last_out = mono_ms
        hb = self.heartbeat_s * 1000
        if hb and self._opened:
            if mono_ms - self._last_out >= hb:
                self.out += Writer().frame(Key.HEARTBEAT)
            if mono_ms - self._last_in > 2 * hb:
                self._close(Code.INTERNAL_ERROR, "missed heartbeats")
        return []

    def close(self, condition: Condition, text: str) -> None:
        self._close(Code.INTERNAL_ERROR, text)

    def connection_lost(self, now_ms: int) -> list[Effect]:
        if not self._opened:
            return []
        self._opened = False
        for sub in self._subs.values():
            self._leave(sub)
        out = self._effects
        self._effects = []
        return out + self.broker.connection_closed(self.conn_id, now_ms)

    def info(self) -> HandlerInfo:
        self._info.channels = 1 + len(self._subs)
        return self._info

    # ------------------------------------------------------------------ commands
    def _send(self, frame: bytes) -> None:
        self.out += frame

    def _close(self, code: Code | int, reason: str) -> None:
        if not self._closed:
            self.out += Writer().u32(0).u16(code).string(reason[:255]).frame(Key.CLOSE)
            self._closed = True

    def _command(self, cmd: sc.Command, now_ms: int) -> list[Effect]:
        match cmd:
            case sc.PeerProperties():
                props = {"product": "ringmq", "version": __version__, "platform": "Python"}
                w = sp.response(Key.PEER_PROPERTIES, cmd.correlation_id, Code.OK)
                self._send(w.properties(props).frame(Key.PEER_PROPERTIES | RESPONSE))
            case sc.SaslHandshake():
                w = sp.response(Key.SASL_HANDSHAKE, cmd.correlation_id, Code.OK)
                self._send(w.count(1).string("PLAIN").frame(Key.SASL_HANDSHAKE | RESPONSE))
            case sc.SaslAuthenticate():
                self._authenticate(cmd, now_ms)
            case sc.Tune():
                if cmd.heartbeat_s:
                    self.heartbeat_s = min(self.heartbeat_s or cmd.heartbeat_s, cmd.heartbeat_s)
                else:
                    self.heartbeat_s = 0
            case sc.Open():
                self._open(cmd, now_ms)
            case sc.Close():
                self._send(sp.simple_response(Key.CLOSE, cmd.correlation_id, Code.OK))
                self._closed = True
            case sc.CloseOk():
                self._closed = True
            case sc.Heartbeat():
                pass
            case sc.Unsupported():
                # a command this broker does not serve (docs/streams.md)
                if cmd.correlation_id is not None:
                    w = sp.Writer().u32(cmd.correlation_id).u16(Code.UNKNOWN_FRAME)
                    self._send(w.frame(cmd.key | RESPONSE))
            case _:
                if not self._opened:
                    self._close(Code.UNKNOWN_FRAME, "the connection is not open")
                    return []
                return self._in_call(cmd, now_ms)
        return []

    def _authenticate(self, cmd: sc.SaslAuthenticate, now_ms: int) -> None:
        corr = cmd.correlation_id
        if cmd.mechanism != "PLAIN":
            self._send(
                sp.simple_response(Key.SASL_AUTHENTICATE, corr, Code.SASL_MECHANISM_NOT_SUPPORTED)
            )
            return
        parts = cmd.data.split(b"\x00")
        user, password = (parts[-2], parts[-1]) if len(parts) >= 2 else (b"", b"")
        try:
            self._who = self.ctx.login("PLAIN", user.decode(), password.decode(), now_ms)
        except (BrokerError, UnicodeDecodeError):
            self._send(sp.simple_response(Key.SASL_AUTHENTICATE, corr, Code.AUTHENTICATION_FAILURE))
            self._close(Code.AUTHENTICATION_FAILURE, "authentication failure")
            return
        self._send(sp.simple_response(Key.SASL_AUTHENTICATE, corr, Code.OK))
        self._send(Writer().u32(self.frame_max).u32(self.heartbeat_s).frame(Key.TUNE))

    def _open(self, cmd: sc.Open, now_ms: int) -> None:
        corr = cmd.correlation_id
        who = self._who
        if who is None or self._opened:
            self._send(sp.simple_response(Key.OPEN, corr, Code.VIRTUAL_HOST_ACCESS_FAILURE))
            self._close(Code.VIRTUAL_HOST_ACCESS_FAILURE, "not authenticated")
            return
        ctx, broker = self.ctx, self.broker
        try:
            broker.connection_opened(
                self.conn_id, who.user, cmd.vhost, ctx.peer.address, client_properties(), now_ms,
                protocol="stream", grant=who.grant,
            )  # fmt: skip
        except BrokerError:
            self._send(sp.simple_response(Key.OPEN, corr, Code.VIRTUAL_HOST_ACCESS_FAILURE))
            self._close(Code.VIRTUAL_HOST_ACCESS_FAILURE, f"no access to vhost {cmd.vhost!r}")
            return
        self._opened = True
        broker.channel_opened(self.conn_id, PUBLISH_CHANNEL, now_ms)
        broker.confirms.select(self._session(PUBLISH_CHANNEL))
        peer = ctx.peer
        props = {"advertised_host": peer.local_host, "advertised_port": str(peer.local_port)}
        w = sp.response(Key.OPEN, corr, Code.OK).properties(props)
        self._send(w.frame(Key.OPEN | RESPONSE))
        self._info = HandlerInfo(
            protocol="RabbitMQ Stream",
            user=who.user,
            vhost=cmd.vhost,
            auth_mechanism="PLAIN",
            channels=1,
            heartbeat_s=self.heartbeat_s,
            frame_max=self.frame_max,
        )

    def _session(self, channel: int) -> Session:
        s = self.broker.session(self.conn_id, channel)
        if s is None:
            raise BrokerError(Condition.CHANNEL_ERROR, f"no session {channel}")
        return s

    def _stream(self, name: str) -> QueueEntity | None:
        q = self._session(PUBLISH_CHANNEL).vhost.queues.get(name)
        return q if q is not None and q.stream is not None else None

    def _log(self, name: str) -> StreamLog | None:
        q = self._stream(name)
        return q.stream if q is not None else None

    def _in_call(self, cmd: sc.Command, now_ms: int) -> list[Effect]:
        # A command that reads or changes the core: one core call; a refusal is its code.
        calls = self.broker.calls
        out = calls.begin(now_ms)
        key, corr = key_of(cmd)
        try:
            self._core_command(cmd, now_ms)
        except (BrokerError, SettingsError) as exc:
            calls.abort()
            code = code_of(exc) if isinstance(exc, BrokerError) else Code.PRECONDITION_FAILED
            log.debug("stream connection %d: %s refused: %s", self.conn_id, key, exc)
            if corr is not None:
                self._send(sp.simple_response(key, corr, code))
            return out
        calls.end(publish=isinstance(cmd, sc.Publish))
        return out

    def _publish_held(self, held: list[sc.Publish], now_ms: int) -> list[Effect]:
        # A read's publish frames in one core call (a refusal: the frames' publisher is told
        # nothing more, as a refused single publish).
        calls = self.broker.calls
        out = calls.begin(now_ms)
        try:
            self.publishing.publish(held, self._session(PUBLISH_CHANNEL), now_ms)
        except (BrokerError, SettingsError) as exc:
            calls.abort()
            log.debug("stream connection %d: publish refused: %s", self.conn_id, exc)
            return out
        calls.end(publish=True)
        return out

    def _core_command(self, cmd: sc.Command, now_ms: int) -> None:
        b = self.broker
        s = self._session(PUBLISH_CHANNEL)
        match cmd:
            case sc.Create():
                if cmd.stream in s.vhost.queues:
                    self._send(
                        sp.simple_response(
                            Key.CREATE, cmd.correlation_id, Code.STREAM_ALREADY_EXISTS
                        )
                    )
                    return
                args = {"x-queue-type": STREAM, **queue_arguments(cmd.arguments)}
                b.topology.declare_queue(
                    s, cmd.stream, durable=True, exclusive=False, auto_delete=False,
                    arguments=args, now_ms=now_ms,
                )  # fmt: skip
                self._send(sp.simple_response(Key.CREATE, cmd.correlation_id, Code.OK))
            case sc.Delete():
                if self._stream(cmd.stream) is None:
                    code = Code.STREAM_DOES_NOT_EXIST
                else:
                    b.topology.delete_named(s, cmd.stream, now_ms)
                    code = Code.OK
                self._send(sp.simple_response(Key.DELETE, cmd.correlation_id, code))
            case sc.Metadata():
                self._metadata(cmd)
            case sc.DeclarePublisher():
                self.publishing.declare(cmd, s)
            case sc.DeletePublisher():
                self.publishing.delete(cmd)
            case sc.QueryPublisherSequence():
                log_ = self._log(cmd.stream)
                code = Code.OK if log_ is not None else Code.STREAM_DOES_NOT_EXIST
                seq = log_.tracking.writers.get(cmd.reference, 0) if log_ is not None else 0
                w = sp.response(Key.QUERY_PUBLISHER_SEQUENCE, cmd.correlation_id, code).u64(seq)
                self._send(w.frame(Key.QUERY_PUBLISHER_SEQUENCE | RESPONSE))
            case sc.Publish():
                self.publishing.publish([cmd], s, now_ms)
            case sc.Subscribe():
                self._subscribe(cmd, now_ms)
            case sc.Unsubscribe():
                sub = self._subs.pop(cmd.subscription_id, None)
                if sub is None:
                    code = Code.SUBSCRIPTION_ID_DOES_NOT_EXIST
                else:
                    self._by_channel.pop(sub.channel, None)
                    b.delivery.cancel(self._session(sub.channel), f"stream-{sub.id}", now_ms)
                    self._leave(sub)
                    code = Code.OK
                self._send(sp.simple_response(Key.UNSUBSCRIBE, cmd.correlation_id, code))
            case sc.Credit():
                sub = self._subs.get(cmd.subscription_id)
                if sub is None:
                    w = Writer().u16(Code.SUBSCRIPTION_ID_DOES_NOT_EXIST).u8(cmd.subscription_id)
                    self._send(w.frame(Key.CREDIT | RESPONSE))
                    return
                if sub.waiting >= 0:  # not active: kept for when it is
                    sub.waiting += cmd.credit
                    return
                s_ = self._session(sub.channel)
                c = s_.consumers.get(f"stream-{sub.id}")
                left = c.credit or 0 if c is not None else 0
                b.delivery.flow(s_, f"stream-{sub.id}", credit=left + cmd.credit, drain=False)
            case sc.StoreOffset():
                log_ = self._log(cmd.stream)
                if log_ is not None:
                    log_.tracking.store_offset(cmd.reference, cmd.offset)
            case sc.QueryOffset():
                log_ = self._log(cmd.stream)
                stored = log_.tracking.offsets.get(cmd.reference) if log_ is not None else None
                if log_ is None:
                    code = Code.STREAM_DOES_NOT_EXIST
                else:
                    code = Code.OK if stored is not None else Code.NO_OFFSET
                w = sp.response(Key.QUERY_OFFSET, cmd.correlation_id, code).u64(stored or 0)
                self._send(w.frame(Key.QUERY_OFFSET | RESPONSE))
            case sc.StreamStats():
                self._stats(cmd)
            case sc.ConsumerUpdateAnswer():
                self._activated(cmd, now_ms)
            case sc.CreateSuperStream():
                args = queue_arguments(cmd.arguments)
                self._send(superstreams.create(b, s, cmd, args, now_ms))
            case sc.DeleteSuperStream():
                self._send(superstreams.delete(b, s, cmd, now_ms))
            case sc.Partitions():
                self._send(superstreams.partitions(s, cmd))
            case sc.Route():
                self._send(superstreams.route(s, cmd))
            case sc.ExchangeCommandVersions():
                # rstream reads the answer by key - 1: every key from 1, in order
                w = sp.response(Key.EXCHANGE_COMMAND_VERSIONS, cmd.correlation_id, Code.OK)
                w.count(len(Key))
                for k in Key:
                    w.u16(k).u16(1).u16(1)
                self._send(w.frame(Key.EXCHANGE_COMMAND_VERSIONS | RESPONSE))
            case _:
                raise AssertionError(cmd)

    def _metadata(self, cmd: sc.Metadata) -> None:
        peer = self.ctx.peer
        w = sp.Writer().u32(cmd.correlation_id)
        w.count(1).u16(0).string(peer.local_host).u32(peer.local_port)
        w.count(len(cmd.streams))
        for name in cmd.streams:
            if self._stream(name) is not None:
                w.string(name).u16(Code.OK).u16(0).count(0)
            else:
                w.string(name).u16(Code.STREAM_DOES_NOT_EXIST).u16(0xFFFF).count(0)
        self._send(w.frame(Key.METADATA | RESPONSE))

    def _stats(self, cmd: sc.StreamStats) -> None:
        self._send(stats_frame(self._log(cmd.stream), cmd.correlation_id))

    def _subscribe(self, cmd: sc.Subscribe, now_ms: int) -> None:
        corr = cmd.correlation_id
        if cmd.subscription_id in self._subs:
            self._send(sp.simple_response(Key.SUBSCRIBE, corr, Code.SUBSCRIPTION_ID_ALREADY_EXISTS))
            return
        if self._stream(cmd.stream) is None:
            self._send(sp.simple_response(Key.SUBSCRIBE, corr, Code.STREAM_DOES_NOT_EXIST))
            return
        spec = offset_spec(cmd.offset_type, cmd.offset)
        sac = cmd.properties.get("single-active-consumer") == "true"
        name = cmd.properties.get("name", "")
        if spec is None or (sac and not name):
            self._send(sp.simple_response(Key.SUBSCRIBE, corr, Code.PRECONDITION_FAILED))
            return
        b = self.broker
        channel = self._next_channel
        self._next_channel += 1
        b.channel_opened(self.conn_id, channel, now_ms)
        s = self._session(channel)
        sub = Subscription(cmd.subscription_id, channel, cmd.stream)
        if sac:  # no credit until its client answers the consumer update of its activation
            sub.group = (self._session(PUBLISH_CHANNEL).vhost.name, cmd.stream, name)
            sub.waiting = cmd.credit
        # the response goes before any delivery the subscription enables
        self._send(sp.simple_response(Key.SUBSCRIBE, corr, Code.OK))
        b.delivery.consume(
            s, cmd.stream, f"stream-{sub.id}", no_ack=True, exclusive=False,
            arguments={"x-stream-offset": spec}, now_ms=now_ms, credit_flow=True,
            offset_header=False, chunks=True,
        )  # fmt: skip
        self._subs[sub.id] = sub
        self._by_channel[channel] = sub
        credit = cmd.credit if sub.group is None else 0
        b.delivery.flow(s, f"stream-{sub.id}", credit=credit, drain=False)
        if sub.group is not None and b.stream_groups.join(sub.group, (self.conn_id, sub.id)):
            self._consumer_update(sub)

    # -- single active consumer (core/streamsac.py) -------------------------------------------
    def _consumer_update(self, sub: Subscription) -> None:
        # Tell the client its subscription is active; it answers where to start
        # (`_activated`).
        corr = self._next_corr
        self._next_corr += 1
        self._updates[corr] = sub.id
        self._send(Writer().u32(corr).u8(sub.id).u8(1).frame(Key.CONSUMER_UPDATE))

    def _activated(self, cmd: sc.ConsumerUpdateAnswer, now_ms: int) -> None:
        # The client's answer: the consumer starts again at the offset it gives, with the
        # credit it was given meanwhile.
        sub = self._subs.get(self._updates.pop(cmd.correlation_id, -1))
        if sub is None or sub.group is None or sub.waiting < 0:
            return
        spec = offset_spec(cmd.offset_type, cmd.offset)
        b = self.broker
        s = self._session(sub.channel)
        tag = f"stream-{sub.id}"
        if spec is not None:
            b.delivery.cancel(s, tag, now_ms)
            b.delivery.consume(
                s, sub.stream, tag, no_ack=True, exclusive=False,
                arguments={"x-stream-offset": spec}, now_ms=now_ms, credit_flow=True,
                offset_header=False, chunks=True,
            )  # fmt: skip
        b.delivery.flow(s, tag, credit=sub.waiting, drain=False)
        sub.waiting = -1

    def _leave(self, sub: Subscription) -> None:
        # A subscription gone from its group: the next one, if it became active, is told.
        if sub.group is None:
            return
        nxt = self.broker.stream_groups.leave(sub.group, (self.conn_id, sub.id))
        if nxt is not None:
            self._effects.append(ActivateConsumer(*nxt))
