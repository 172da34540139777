"""A client connection pauses reading per reason: a flow resume never reopens a Block."""

from __future__ import annotations

from ringmq.server.handlers import HandlerConnection


class _Transport:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def pause_reading(self) -> None:
        self.calls.append("pause")

    def resume_reading(self) -> None:
        self.calls.append("resume")

    def is_closing(self) -> bool:
        return False


def _conn() -> tuple[HandlerConnection, _Transport]:
    c = HandlerConnection(None, 1, "amqp091", tls=False)  # type: ignore[arg-type]
    t = _Transport()
    c.transport = t  # type: ignore[assignment]
    return c, t


def test_reading_resumes_only_when_every_reason_is_lifted() -> None:
    c, t = _conn()
    c.pause_reading("flow")
    c.pause_reading("block")
    assert c.reading_paused
    assert c.pause_reasons == {"flow", "block"}
    c.resume_reading(5.0, reason="flow")
    assert c.reading_paused
    assert t.calls == ["pause"]
    c.resume_reading(7.0, reason="block")
    assert c.pause_reasons == frozenset()
    assert t.calls == ["pause", "resume"]
    assert c.read_resumed_mono == 7.0


def test_resuming_a_reason_that_never_paused_does_nothing() -> None:
    c, t = _conn()
    c.resume_reading(1.0, reason="flow")
    c.pause_reading("block")
    c.pause_reading("block")
    c.resume_reading(2.0, reason="flow")
    assert c.reading_paused
    assert t.calls == ["pause"]
    c.resume_reading(3.0)  # the default reason is "block"
    assert t.calls == ["pause", "resume"]
