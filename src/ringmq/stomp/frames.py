"""The STOMP 1.0 / 1.1 / 1.2 frame codec: bytes in, frames out, and frames to bytes.

Theory of operation: a frame is a command line, header lines, a blank line, a body and a NUL
octet; every line ends with LF or CR LF (1.2 names CR LF, and 1.0/1.1 clients send it too). A
client may send bare end-of-lines between frames: heart-beats, which `FrameReader` skips. The
body is read by its `content-length` when present (it may then carry NULs) and up to the first
NUL otherwise. Header values are escaped in 1.1 (`\\\\`, `\\n`, `\\c`) and 1.2 (also `\\r`),
never in CONNECT (STOMP) and CONNECTED frames nor in 1.0; an undefined escape is a frame
error. When a header repeats, the first occurrence wins (1.2). Limits (`FrameLimits`) bound
the header section and the body; a frame over a limit is refused before its bytes are buffered.

`FrameReader.feed` appends to a buffer; `next_frame` returns a `Frame`, None when it needs more
bytes, or raises `FrameError`; consumed bytes are dropped once per batch (`compact`). Pure: no
I/O, no clock, no broker.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Final


class Command(StrEnum):
    """Every STOMP command (client frames, then server frames)."""

    CONNECT = "CONNECT"
    STOMP = "STOMP"
    SEND = "SEND"
    SUBSCRIBE = "SUBSCRIBE"
    UNSUBSCRIBE = "UNSUBSCRIBE"
    ACK = "ACK"
    NACK = "NACK"
    BEGIN = "BEGIN"
    COMMIT = "COMMIT"
    ABORT = "ABORT"
    DISCONNECT = "DISCONNECT"
    CONNECTED = "CONNECTED"
    MESSAGE = "MESSAGE"
    RECEIPT = "RECEIPT"
    ERROR = "ERROR"


CLIENT_COMMANDS: Final = frozenset(
    {
        Command.CONNECT,
        Command.STOMP,
        Command.SEND,
        Command.SUBSCRIBE,
        Command.UNSUBSCRIBE,
        Command.ACK,
        Command.NACK,
        Command.BEGIN,
        Command.COMMIT,
        Command.ABORT,
        Command.DISCONNECT,
    }
)
_UNESCAPED_COMMANDS: Final = frozenset({"CONNECT", "STOMP", "CONNECTED"})

V1_0: Final = "1.0"
V1_1: Final = "1.1"
V1_2: Final = "1.2"
VERSIONS: Final = (V1_0, V1_1, V1_2)
"""The versions served, oldest first."""


class FrameError(Exception):
    """Bytes that are not a STOMP frame (or one over a limit): the connection answers an ERROR
    frame with `message` and closes."""

    def __init__(self, message: str, detail: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.detail = detail or message


@dataclass(frozen=True, slots=True)
class FrameLimits:
    """Bounds on one received frame."""

    max_header_bytes: int = 102_400
    """The command line and header lines together (RabbitMQ's `max_header_length`)."""
    max_headers: int = 1000
    """Header lines in one frame (RabbitMQ's `max_headers`)."""
    max_body: int = 16 * 1024 * 1024
    """Body bytes (the broker's largest message)."""


@dataclass(slots=True)
class Frame:
    """One frame: a command, its headers (first occurrence of each name) and its body."""

    command: str
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""

    def get(self, name: str, default: str | None = None) -> str | None:
        """Header `name`, or `default` when absent."""
        return self.headers.get(name, default)


# ---------------------------------------------------------------------- escaping
_ESCAPES_1_1: Final = {"\\": "\\", "n": "\n", "c": ":"}
_ESCAPES_1_2: Final = {**_ESCAPES_1_1, "r": "\r"}
_ENCODE_1_1: Final = str.maketrans({"\\": "\\\\", "\n": "\\n", ":": "\\c"})
_ENCODE_1_2: Final = str.maketrans({"\\": "\\\\", "\n": "\\n", ":": "\\c", "\r": "\\r"})


def unescape(text: str, version: str) -> str:
    """A received header name or value with its escapes decoded (FrameError for an undefined
    escape sequence, as 1.2 requires)."""
    if "\\" not in text or version == V1_0:
        return text
    table = _ESCAPES_1_2 if version == V1_2 else _ESCAPES_1_1
    out: list[str] = []
    i = 0
    n = len(text)
    while i < n:
        ch = text[i]
        if ch != "\\":
            out.append(ch)
            i += 1
            continue
        nxt = text[i + 1] if i + 1 < n else ""
        decoded = table.get(nxt)
        if decoded is None:
            raise FrameError(
                "invalid header escape", f"undefined escape sequence '\\{nxt}' in {text!r}"
            )
        out.append(decoded)
        i += 2
    return "".join(out)


def escape(text: str, version: str) -> str:
    """A header name or value escaped for `version`."""
    if version == V1_0:
        return text.replace("\n", " ")  # 1.0 has no escapes: a newline would end the header
    return text.translate(_ENCODE_1_2 if version == V1_2 else _ENCODE_1_1)


def encode(
    command: str, headers: dict[str, str] | list[tuple[str, str]], body: bytes, version: str
) -> bytes:
    """One frame as bytes (headers escaped for `version`, except in CONNECTED)."""
    items = headers.items() if isinstance(headers, dict) else headers
    text = "".join([f"{command}\n", *[f"{k}:{v}\n" for k, v in items], "\n"])
    if command not in _UNESCAPED_COMMANDS and (
        text.count(":") != len(items)
        or text.count("\n") != len(items) + 2
        or "\\" in text
        or "\r" in text
    ):
        # Something to escape (rare): escape each name and value.
        lines = [command]
        lines.extend(f"{escape(k, version)}:{escape(v, version)}" for k, v in items)
        text = "\n".join([*lines, "", ""])
    return text.encode() + body + b"\x00"


# ---------------------------------------------------------------------- reading
class FrameReader:
    """Frames out of a byte stream (see the module docstring).

    Args:
        limits: the bounds of one frame.
        version: the negotiated version, which decides header escaping (set it after
            CONNECT; CONNECT itself is never unescaped).
    """

    def __init__(self, limits: FrameLimits | None = None, version: str = V1_0) -> None:
        self.limits = limits or FrameLimits()
        self.version = version
        self._buf = bytearray()
        self._pos = 0

    def feed(self, data: bytes) -> None:
        """Append received bytes."""
        self._buf += data

    @property
    def buffered(self) -> int:
        """Bytes received and not yet returned as frames."""
        return len(self._buf) - self._pos

    def compact(self) -> None:
        """Drop the bytes of the frames already returned (once per batch)."""
        if self._pos:
            del self._buf[: self._pos]
            self._pos = 0

    def next_frame(self) -> Frame | None:
        """The next whole frame, None when more bytes are needed (FrameError: not STOMP)."""
        buf = self._buf
        pos = self._pos
        end = len(buf)
        # Heart-beats: bare end-of-lines between frames.
        while pos < end and buf[pos] in (0x0A, 0x0D):
            if buf[pos] == 0x0D and (pos + 1 >= end or buf[pos + 1] != 0x0A):
                if pos + 1 >= end:
                    break  # a CR whose LF has not arrived yet
                raise FrameError("malformed frame", "CR not followed by LF between frames")
            pos += 1
        self._pos = pos
        if pos >= end:
            return None
        limits = self.limits
        # The header section ends at the first empty line ("\n\n", or "\n\r\n" with CR LF).
        lf = buf.find(b"\n\n", pos, pos + limits.max_header_bytes + 2)
        crlf = buf.find(b"\n\r\n", pos, lf + 1 if lf >= 0 else pos + limits.max_header_bytes + 3)
        if lf < 0 and crlf < 0:
            if end - pos > limits.max_header_bytes:
                raise FrameError("header too long", "the header section is over the limit")
            return None
        if crlf >= 0 and (lf < 0 or crlf < lf):
            head_end, body_start = crlf, crlf + 3
        else:
            head_end, body_start = lf, lf + 2
        if head_end - pos > limits.max_header_bytes:
            raise FrameError("header too long", "the header section is over the limit")
        try:
            block = buf[pos:head_end].decode("utf-8")
        except UnicodeDecodeError:
            raise FrameError("malformed frame", "the header section is not UTF-8") from None
        if "\r" in block:
            block = block.replace("\r\n", "\n").removesuffix("\r")
        lines = block.split("\n")
        if len(lines) > limits.max_headers + 1:
            raise FrameError("too many headers", f"more than {limits.max_headers} headers")
        command, headers = self._head(lines)
        length_text = headers.get("content-length")
        if length_text is not None:
            if not length_text.isascii() or not length_text.isdigit():
                raise FrameError("invalid content-length", f"content-length {length_text!r}")
            length = int(length_text)
            if length > limits.max_body:
                raise FrameError(
                    "frame too large",
                    f"content-length {length} is over the limit of {limits.max_body} bytes",
                )
            if end < body_start + length + 1:
                return None
            if buf[body_start + length] != 0:
                raise FrameError("malformed frame", "the body is not followed by a NUL octet")
            body_end = body_start + length
        else:
            nul = buf.find(b"\x00", body_start)
            if nul < 0:
                if end - body_start > limits.max_body:
                    raise FrameError(
                        "frame too large", f"the body is over the limit of {limits.max_body} bytes"
                    )
                return None
            body_end = nul
            if body_end - body_start > limits.max_body:
                raise FrameError(
                    "frame too large", f"the body is over the limit of {limits.max_body} bytes"
                )
        self._pos = body_end + 1
        return Frame(command, headers, bytes(buf[body_start:body_end]))

    def _head(self, text: list[str]) -> tuple[str, dict[str, str]]:
        # The command line and the headers, unescaped.
        command = text[0]
        if command not in CLIENT_COMMANDS:
            if command in Command.__members__:
                raise FrameError("unexpected command", f"a client may not send {command}")
            raise FrameError("unknown command", f"unknown command {command[:64]!r}")
        version = V1_0 if command in _UNESCAPED_COMMANDS else self.version
        headers: dict[str, str] = {}
        for line in text[1:]:
            name, sep, value = line.partition(":")
            if not sep:
                raise FrameError("malformed header", f"header line without ':': {line[:64]!r}")
            if "\\" in line:
                name = unescape(name, version)
                value = unescape(value, version)
            if name not in headers:
                headers[name] = value
        return command, headers
