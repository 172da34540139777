"""The STOMP connection machine: version negotiation, frame rules, receipts, errors, heart-beats.

Theory of operation
-------------------
One `StompConnection` per client connection, sans-IO (h11's shape): `receive_data(bytes)`
buffers, `next_frame()` returns the next client frame that the rules of the current phase
allow, `data_to_send()` drains what the server queued. The broker's side (logins, queues,
messages) is its owner's business (`ringmq.adapters.stomp`); this machine knows only STOMP.

Phases: `AWAIT_CONNECT` (only CONNECT or STOMP) -> `CONNECTING` (the owner checks the login,
then `accept` sends CONNECTED, or `fail` sends ERROR) -> `OPEN` (every other client command)
-> `CLOSED` (after DISCONNECT, an ERROR, or a missed heart-beat; everything received is then
dropped). Every ERROR closes the connection, as the specification says; so does a client that
sends no CONNECT within `CONNECT_TIMEOUT_MS`.

Negotiation: the version is the highest of `accept-version` that ringmq serves (1.0 without
the header); none in common is an ERROR carrying the served versions. Heart-beating: the
client's `heart-beat: cx,cy` is answered with `sx,sy`, `sx = max(cy, MIN_HEARTBEAT_MS)` (0 when
cy is 0) and `sy` likewise from cx, so both sides agree on `sx` and `sy`. `tick(mono_ms)`
(monotonic time, from the owner's periodic sweep) queues an EOL when nothing was sent for
nearly `sx`, and closes the connection when nothing was received for twice `sy`.

Each command's required headers are a table per version (`REQUIRED`); a frame without one is an
ERROR. The machine also keeps STOMP's names: open subscriptions (id -> ack mode, ids unique,
`ACK_MODES` only; UNSUBSCRIBE names an open one) and open transactions (BEGIN names a new one;
COMMIT, ABORT and any frame's `transaction` header an open one). A frame's `receipt` header
is answered by `receipt(frame)` once its owner has done the work, or by `fail` as the ERROR's
`receipt-id`.
"""

from __future__ import annotations

from enum import Enum
from typing import Final

from ringmq.stomp.frames import (
    V1_0,
    V1_1,
    V1_2,
    VERSIONS,
    Command,
    Frame,
    FrameError,
    FrameLimits,
    FrameReader,
    encode,
)

MIN_HEARTBEAT_MS: Final = 2000
"""The shortest heart-beat period ringmq agrees to (its sweep runs twice a second)."""
CONNECT_TIMEOUT_MS: Final = 10_000
"""How long a new connection may take to send its CONNECT (AMQP's handshake timeout)."""
_SEND_EARLY_MS: Final = 600
"""Send a heart-beat this much before it is due: the sweep may come up to a period late."""


class Phase(Enum):
    """Where the connection is (see the module docstring)."""

    AWAIT_CONNECT = "await-connect"
    CONNECTING = "connecting"
    OPEN = "open"
    CLOSED = "closed"


_ACK_HEADERS: Final = {V1_0: ("message-id",), V1_1: ("message-id", "subscription"), V1_2: ("id",)}

REQUIRED: Final[dict[str, dict[str, tuple[str, ...]]]] = {
    version: {
        Command.SEND: ("destination",),
        Command.SUBSCRIBE: ("destination",) if version == V1_0 else ("destination", "id"),
        Command.UNSUBSCRIBE: () if version == V1_0 else ("id",),
        Command.ACK: _ACK_HEADERS[version],
        Command.NACK: _ACK_HEADERS[version],
        Command.BEGIN: ("transaction",),
        Command.COMMIT: ("transaction",),
        Command.ABORT: ("transaction",),
        Command.DISCONNECT: (),
    }
    for version in VERSIONS
}
"""The headers each command must carry, by version (1.0 UNSUBSCRIBE names `id` or
`destination`: checked apart)."""

_CONNECTS: Final = frozenset({Command.CONNECT, Command.STOMP})
ACK_MODES: Final = ("auto", "client", "client-individual")
"""SUBSCRIBE's `ack` header ("auto" when absent)."""


def negotiate(accept_version: str | None) -> str | None:
    """The version to speak for a CONNECT's `accept-version` (None: nothing in common)."""
    if accept_version is None:
        return V1_0
    offered = {v.strip() for v in accept_version.split(",")}
    for version in reversed(VERSIONS):
        if version in offered:
            return version
    return None


def parse_heartbeat(text: str | None) -> tuple[int, int]:
    """A `heart-beat` header as (cx, cy) in ms ((0, 0) when absent; FrameError if malformed)."""
    if text is None:
        return 0, 0
    parts = text.split(",")
    if len(parts) != 2 or not all(p.strip().isascii() and p.strip().isdigit() for p in parts):
        raise FrameError("invalid heart-beat header", f"heart-beat {text!r}")
    return int(parts[0]), int(parts[1])


class StompConnection:
    """One client connection's STOMP rules (see the module docstring).

    Args:
        limits: bounds on a received frame.
    """

    def __init__(self, limits: FrameLimits | None = None) -> None:
        self.reader = FrameReader(limits)
        self.phase = Phase.AWAIT_CONNECT
        self.version = V1_0
        self.send_every_ms = 0
        """The heart-beat period the server keeps (0: none)."""
        self.expect_every_ms = 0
        """The heart-beat period the client promised (0: none checked)."""
        self.subscriptions: dict[str, str] = {}
        """Open subscriptions: id -> ack mode."""
        self.transactions: set[str] = set()
        """Open transactions."""
        self._out: list[bytes] = []
        self._received = False
        self._sent = False
        self._last_rx: int | None = None
        self._last_tx: int | None = None
        self._born: int | None = None

    # ------------------------------------------------------------------ input
    @property
    def closed(self) -> bool:
        """True once the connection is over (flush `data_to_send`, then close the socket)."""
        return self.phase is Phase.CLOSED

    def receive_data(self, data: bytes) -> None:
        """Buffer bytes read from the socket (dropped once closed)."""
        if self.phase is Phase.CLOSED or not data:
            return
        self._received = True
        self.reader.feed(data)

    def next_frame(self) -> Frame | None:
        """The next client frame the current phase allows; None when more bytes are needed or
        the connection is closed (a bad frame queues an ERROR and closes it)."""
        if self.phase is Phase.CLOSED:
            return None
        try:
            frame = self.reader.next_frame()
            if frame is None:
                self.reader.compact()
                return None
            self._check(frame)
        except FrameError as exc:
            self.fail(exc.message, exc.detail)
            return None
        return frame

    def _check(self, frame: Frame) -> None:
        # The phase's rules, then the command's required headers.
        command = frame.command
        phase = self.phase
        if phase is Phase.AWAIT_CONNECT:
            if command not in _CONNECTS:
                raise FrameError("connection not established", f"{command} before CONNECT")
            version = negotiate(frame.get("accept-version"))
            if version is None:
                raise FrameError(
                    "unsupported protocol version",
                    f"Supported protocol versions are {','.join(VERSIONS)}",
                )
            cx, cy = parse_heartbeat(frame.get("heart-beat"))
            self.version = version
            self.reader.version = version
            self.send_every_ms = max(cy, MIN_HEARTBEAT_MS) if cy else 0
            self.expect_every_ms = max(cx, MIN_HEARTBEAT_MS) if cx else 0
            self.phase = Phase.CONNECTING
            return
        if phase is not Phase.OPEN or command in _CONNECTS:
            raise FrameError("unexpected frame", f"{command} on an established connection")
        headers = frame.headers
        for name in REQUIRED[self.version].get(command, ()):
            if name not in headers:
                raise FrameError(f"missing '{name}' header", f"{command} needs a '{name}' header")
        if command == Command.UNSUBSCRIBE and "id" not in headers and "destination" not in headers:
            raise FrameError("missing 'id' header", "UNSUBSCRIBE needs an 'id' header")
        self._bookkeeping(command, headers)

    def _bookkeeping(self, command: str, headers: dict[str, str]) -> None:
        # Subscriptions and transactions as STOMP names them: ids unique while open, ack modes
        # the three the specification defines, transactions named by BEGIN until COMMIT/ABORT.
        tx = headers.get("transaction")
        transactions = self.transactions
        if command == Command.BEGIN:
            if tx in transactions:
                raise FrameError("transaction already open", f"transaction '{tx}' is open")
            transactions.add(tx or "")
            return
        if tx is not None and tx not in transactions:
            raise FrameError("unknown transaction", f"no transaction '{tx}' is open")
        if command in (Command.COMMIT, Command.ABORT):
            transactions.discard(tx or "")
        elif command == Command.SUBSCRIBE:
            sub = headers.get("id") or headers.get("destination") or ""
            ack = headers.get("ack") or "auto"
            if sub in self.subscriptions:
                raise FrameError("duplicate subscription", f"subscription '{sub}' exists")
            if ack not in ACK_MODES:
                raise FrameError("invalid ack mode", f"ack mode '{ack}'")
            self.subscriptions[sub] = ack
        elif command == Command.UNSUBSCRIBE:
            sub = headers.get("id") or headers.get("destination") or ""
            if self.subscriptions.pop(sub, None) is None:
                raise FrameError("unknown subscription", f"no subscription '{sub}'")

    # ------------------------------------------------------------------ replies
    def accept(self, headers: dict[str, str]) -> None:
        """Answer the CONNECT with CONNECTED (version, heart-beat, then `headers`)."""
        assert self.phase is Phase.CONNECTING, self.phase
        self.phase = Phase.OPEN
        first = {"version": self.version}
        first["heart-beat"] = f"{self.send_every_ms},{self.expect_every_ms}"
        self._out.append(encode(Command.CONNECTED, first | headers, b"", self.version))

    def send(self, command: str, headers: dict[str, str], body: bytes = b"") -> None:
        """Queue a server frame (nothing once closed)."""
        if self.phase is not Phase.CLOSED:
            self._out.append(encode(command, headers, body, self.version))

    def receipt(self, frame: Frame) -> None:
        """Queue the RECEIPT a client frame asked for (nothing when it asked for none)."""
        receipt = frame.headers.get("receipt")
        if receipt is not None:
            self.send(Command.RECEIPT, {"receipt-id": receipt})

    def fail(
        self,
        message: str,
        detail: str = "",
        *,
        frame: Frame | None = None,
        receipt_id: str | None = None,
    ) -> None:
        """Queue an ERROR (`message`, the body `detail`, as `receipt-id` the `receipt` of
        `frame` or `receipt_id`) and close the connection."""
        if self.phase is Phase.CLOSED:
            return
        headers = {"message": message.replace("\n", " ")}
        receipt = frame.headers.get("receipt") if frame is not None else receipt_id
        if receipt is not None:
            headers["receipt-id"] = receipt
        body = (detail or message).encode()
        headers["content-type"] = "text/plain"
        headers["content-length"] = str(len(body))
        self._out.append(encode(Command.ERROR, headers, body, self.version))
        self.phase = Phase.CLOSED

    def disconnect(self, frame: Frame | None = None) -> None:
        """End the connection: the DISCONNECT's receipt, if any, then closed."""
        if frame is not None:
            self.receipt(frame)
        self.phase = Phase.CLOSED

    # ------------------------------------------------------------------ output and time
    def data_to_send(self) -> bytes:
        """Everything queued since the last call (b"" when nothing)."""
        if not self._out:
            return b""
        out = b"".join(self._out)
        self._out.clear()
        self._sent = True
        return out

    def tick(self, mono_ms: int) -> None:
        """The periodic sweep: heart-beats out, the client's heart-beats checked, and a client
        that sends no CONNECT within `CONNECT_TIMEOUT_MS` refused."""
        if self._born is None:
            self._born = mono_ms
        if self.phase is Phase.AWAIT_CONNECT and mono_ms - self._born > CONNECT_TIMEOUT_MS:
            self.fail("connection not established", "no CONNECT frame in time")
            return
        if self._received or self._last_rx is None:
            self._last_rx = mono_ms
            self._received = False
        if self._sent or self._last_tx is None:
            self._last_tx = mono_ms
            self._sent = False
        if self.phase is not Phase.OPEN:
            return
        if self.expect_every_ms and mono_ms - self._last_rx > 2 * self.expect_every_ms:
            self.phase = Phase.CLOSED  # the peer is gone: no ERROR, nobody would read it
            return
        if self.send_every_ms and mono_ms - self._last_tx >= self.send_every_ms - _SEND_EARLY_MS:
            self._out.append(b"\n")
