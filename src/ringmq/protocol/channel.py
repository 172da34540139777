"""Per-channel state and the command assembler (method -> content header -> body frames).

Theory of operation
-------------------
A channel number is *absent* (closed or never opened), ``OPEN``, or ``CLOSING`` (we sent
Channel.Close and wait for Close-Ok; every other frame on it is dropped, AMQP §2.3.5.1 /
RabbitMQ). Absent channels have no object at all.

While ``OPEN`` the channel assembles commands like RabbitMQ's ``rabbit_command_assembler``: the
assembly state is one of three per-state objects, never optional fields:

* ``ExpectMethod``: a content-less method is a complete command at once; a content-bearing one
  (Basic.Publish) moves to
* ``ExpectHeader(method)``: the next frame must be its content header (class must match, size
  within ``max_message_size``), which moves to
* ``ExpectBody(method, ..., remaining, fragments)``: body frames until ``remaining`` is 0.

Any other frame is UNEXPECTED_FRAME (505, a connection error); more body than the header
declared is also 505; a declared size above ``max_message_size`` is PRECONDITION_FAILED (406, a
channel error, as RabbitMQ's ``message size ... is larger than configured max size``), detected
at the header so an oversized body is never buffered.

This module imports only ``ringmq.amqp``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from ringmq.amqp.frames import BodyFrame, HeaderFrame, RawContent
from ringmq.amqp.reply_codes import AMQPError, ReplyCode
from ringmq.amqp.spec import Method

DEFAULT_MAX_MESSAGE_SIZE = 16 * 1024 * 1024
"""RabbitMQ's default ``max_message_size`` (16 MiB since 4.0; 128 MiB in 3.8-3.13)."""


class ChannelState(Enum):
    #: open: commands flow.
    OPEN = "open"
    #: we sent Channel.Close; waiting for Close-Ok, dropping everything else.
    CLOSING = "closing"


@dataclass(frozen=True, slots=True)
class ExpectMethod:
    """Between commands. Only the ``EXPECT_METHOD`` singleton is used (tested by identity)."""


@dataclass(frozen=True, slots=True)
class ExpectHeader:
    method: Method


@dataclass(slots=True)
class ExpectBody:
    method: Method
    class_id: int
    body_size: int
    properties_bin: bytes
    remaining: int
    fragments: list[bytes] = field(default_factory=list)


Assembly = ExpectMethod | ExpectHeader | ExpectBody

EXPECT_METHOD = ExpectMethod()


@dataclass(slots=True)
class Channel:
    """One channel's bookkeeping."""

    number: int
    state: ChannelState = ChannelState.OPEN
    assembly: Assembly = EXPECT_METHOD

    @property
    def content_in_flight(self) -> int:
        """The declared body size of a content being received (0 between contents)."""
        asm = self.assembly
        return asm.body_size if isinstance(asm, ExpectBody) else 0

    @property
    def content_received(self) -> int:
        """Body bytes received (and buffered) of a content being received."""
        asm = self.assembly
        return asm.body_size - asm.remaining if isinstance(asm, ExpectBody) else 0

    @property
    def mid_content(self) -> bool:
        """True while a content-bearing command is incomplete."""
        return self.assembly is not EXPECT_METHOD

    def on_method(self, method: Method) -> tuple[Method, RawContent | None] | None:
        """Feed a method frame; returns a complete content-less command or None.

        Raises:
            AMQPError: UNEXPECTED_FRAME when a header or body was expected.
        """
        if self.assembly is not EXPECT_METHOD:
            raise self._unexpected("method frame", method)
        if method.CONTENT:
            self.assembly = ExpectHeader(method)
            return None
        return method, None

    def on_header(
        self, frame: HeaderFrame, max_message_size: int
    ) -> tuple[Method, RawContent | None] | None:
        """Feed a content header; returns the command if the body is empty."""
        asm = self.assembly
        if not isinstance(asm, ExpectHeader):
            raise self._unexpected("content header frame", None)
        method = asm.method
        if frame.class_id != method.CLASS_ID:
            raise AMQPError(
                ReplyCode.UNEXPECTED_FRAME,
                f"expected content header for class {method.CLASS_ID}, "
                f"got one for class {frame.class_id} instead",
                class_id=method.CLASS_ID,
                method_id=method.METHOD_ID,
            )
        if max_message_size and frame.body_size > max_message_size:
            self.assembly = EXPECT_METHOD
            raise AMQPError(
                ReplyCode.PRECONDITION_FAILED,
                f"message size {frame.body_size} is larger than configured max size "
                f"{max_message_size}",
                class_id=method.CLASS_ID,
                method_id=method.METHOD_ID,
            )
        if frame.body_size == 0:
            self.assembly = EXPECT_METHOD
            return method, RawContent(frame.class_id, 0, frame.properties_bin, b"")
        self.assembly = ExpectBody(
            method, frame.class_id, frame.body_size, frame.properties_bin, frame.body_size
        )
        return None

    def on_body(self, frame: BodyFrame) -> tuple[Method, RawContent | None] | None:
        """Feed a body frame; returns the command once the declared size has arrived."""
        asm = self.assembly
        if not isinstance(asm, ExpectBody):
            raise self._unexpected("content body frame", None)
        size = len(frame.data)
        if size > asm.remaining:
            raise AMQPError(
                ReplyCode.UNEXPECTED_FRAME,
                f"received {size} bytes of content body, only {asm.remaining} expected",
                class_id=asm.method.CLASS_ID,
                method_id=asm.method.METHOD_ID,
            )
        asm.remaining -= size
        if asm.remaining:
            asm.fragments.append(frame.data)
            return None
        self.assembly = EXPECT_METHOD
        if asm.fragments:
            asm.fragments.append(frame.data)
            body = b"".join(asm.fragments)
        else:
            body = frame.data
        return asm.method, RawContent(asm.class_id, asm.body_size, asm.properties_bin, body)

    def _unexpected(self, got: str, method: Method | None) -> AMQPError:
        asm = self.assembly
        if isinstance(asm, ExpectMethod):
            expected = "a method frame"
        elif isinstance(asm, ExpectHeader):
            expected = f"a content header for {asm.method.NAME}"
        else:
            expected = f"{asm.remaining} more bytes of content body for {asm.method.NAME}"
        text = f"expected {expected}, got a {got}"
        if method is not None:
            text += f" ({method.NAME})"
        return AMQPError(
            ReplyCode.UNEXPECTED_FRAME,
            f"{text} on channel {self.number}",
            class_id=method.CLASS_ID if method is not None else 0,
            method_id=method.METHOD_ID if method is not None else 0,
        )


__all__ = [
    "DEFAULT_MAX_MESSAGE_SIZE",
    "EXPECT_METHOD",
    "Assembly",
    "Channel",
    "ChannelState",
    "ExpectBody",
    "ExpectHeader",
    "ExpectMethod",
]
