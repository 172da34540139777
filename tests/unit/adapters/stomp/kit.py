"""Drives STOMP handlers over an in-process broker: frames in, server frames out (no tests)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ringmq.adapters.handler import HandlerContext, HandlerLimits, Peer, make_login
from ringmq.adapters.stomp import Dialects, StompHandler
from ringmq.core.broker import Broker
from ringmq.core.config import BrokerConfig
from ringmq.core.effects import Effect
from ringmq.core.throttle import LoginGuard
from ringmq.stomp import encode
from tests.unit.stomp.server_frames import Out, parse_server


def _name(key: str) -> str:
    # Python keyword names to STOMP header names: `reply_to` -> `reply-to`; upper-case names
    # (`AMQ_SCHEDULED_TIME`, `_AMQ_LVQ_NAME`) are kept.
    return key if key != key.lower() else key.replace("_", "-")


@dataclass
class Kit:
    config: BrokerConfig = field(default_factory=lambda: BrokerConfig(name_seed=3))
    dialects: Dialects | None = None
    now: int = 1_000_000
    mono: int = 0

    def __post_init__(self) -> None:
        self.broker = Broker(self.config)
        self.broker.defer_dispatch = True
        self.guard = LoginGuard()
        self.handlers: dict[int, StompHandler] = {}
        self.inbox: dict[int, list[Out]] = {}
        self._next = 1

    def handler(self, *, max_message_size: int = 1 << 20) -> StompHandler:
        conn_id = self._next
        self._next += 1
        peer = Peer("127.0.0.1", 40000 + conn_id, "127.0.0.1", 61613)
        ctx = HandlerContext(
            broker=self.broker,
            conn_id=conn_id,
            peer=peer,
            limits=HandlerLimits(max_message_size, 131072, 2047, 60),
            login=make_login(self.broker, self.guard, peer, "STOMP"),
        )
        h = StompHandler(ctx, self.dialects)
        self.handlers[conn_id] = h
        return h

    def apply(self, effects: Sequence[Effect]) -> None:
        for e in effects:
            target = getattr(e, "conn_id", None)
            h = self.handlers.get(target) if target is not None else None
            if h is not None:
                h.apply(e)

    def feed(self, h: StompHandler, data: bytes) -> None:
        self.apply(h.receive_data(data, self.now))
        self.apply(self.broker.dispatch_pending(self.now))

    def frame(
        self, h: StompHandler, command: str, body: bytes = b"", /, **headers: str
    ) -> list[Out]:
        """Send one frame (header names with '_' for '-'); the server frames now queued."""
        hdrs = {_name(k): v for k, v in headers.items()}
        self.feed(h, encode(command, hdrs, body, h.conn.version))
        new = self._pull(h)
        return list(new)

    def _pull(self, h: StompHandler) -> list[Out]:
        new = parse_server(h.data_to_send(), h.conn.version)
        self.inbox.setdefault(h.conn_id, []).extend(new)
        return new

    def read(self, h: StompHandler) -> list[Out]:
        """Every server frame of `h` not read yet (those `frame` returned included)."""
        self._pull(h)
        return self.inbox.pop(h.conn_id, [])

    def connect(self, version: str = "1.2", **headers: str) -> StompHandler:
        h = self.handler()
        hdrs = {"accept-version": version, "host": "/", "login": "guest", "passcode": "guest"}
        hdrs.update({_name(k): v for k, v in headers.items()})
        self.feed(h, encode("CONNECT", hdrs, b"", "1.0"))
        frames = self.read(h)
        assert frames, "no answer to CONNECT"
        assert frames[0].command == "CONNECTED", frames
        return h

    def lose(self, h: StompHandler) -> None:
        self.apply(h.connection_lost(self.now))
        del self.handlers[h.conn_id]

    def tick(self, ms: int) -> None:
        self.now += ms
        self.mono += ms
        for h in list(self.handlers.values()):
            self.apply(h.tick(self.now, self.mono))
        self.apply(self.broker.tick(self.now))
