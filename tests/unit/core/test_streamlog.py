"""Stream log rules the state machine does not reach: the broker's timer for retention by age
of an idle stream, offset specifications as RabbitMQ reads them, the declare checks."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from ringmq.core.argvalues import SettingsError
from ringmq.core.broker import Broker
from ringmq.core.message import Message
from ringmq.core.streamlog import (
    MemoryStreamLog,
    OffsetKind,
    OffsetSpec,
    StreamSpec,
    check_stream_declare,
    parse_offset_spec,
)

AGE = StreamSpec(max_segment_bytes=100, max_age_ms=1000)


def _msg() -> Message:
    return Message("", "s", b"", b"x" * 80)


def test_an_idle_stream_arms_a_deadline_for_its_oldest_segment() -> None:
    log = MemoryStreamLog(AGE)
    log.append([_msg()], 0)
    assert log.index.next_expiry_ms() is None  # the active segment is never removed
    log.append([_msg()], 10)  # a second segment
    assert log.index.next_expiry_ms() == 1001
    assert log.enforce(1000) == 0
    assert log.enforce(1001) == 1
    assert log.index.first_offset == 1
    assert log.index.next_expiry_ms() is None


def test_the_broker_ticks_at_a_stream_segment_expiry() -> None:
    b = Broker()
    b.admin.declare_queue("/", "s", durable=True, arguments={
        "x-queue-type": "stream", "x-max-age": "1s", "x-stream-max-segment-size-bytes": 100,
    }, now_ms=0)  # fmt: skip
    q = b.vhosts["/"].queues["s"]
    assert q.stream is not None
    q.stream.append([_msg()], 0)
    q.stream.append([_msg()], 500)
    assert b.next_deadline_ms() == 1001
    b.tick(1001)
    assert q.stream.index.first_offset == 1


@pytest.mark.parametrize(
    ("value", "want"),
    [
        (None, OffsetSpec(OffsetKind.NEXT)),
        ("first", OffsetSpec(OffsetKind.FIRST)),
        (b"last", OffsetSpec(OffsetKind.LAST)),
        (7, OffsetSpec(OffsetKind.OFFSET, 7)),
        (datetime(2026, 1, 1, tzinfo=UTC), OffsetSpec(OffsetKind.TIMESTAMP, 1767225600000)),
        ("1h", OffsetSpec(OffsetKind.TIMESTAMP, 10_000_000 - 3_600_000)),
        ("2D", OffsetSpec(OffsetKind.TIMESTAMP, 10_000_000 - 2 * 86_400_000)),
    ],
)
def test_offset_specifications_read_as_rabbitmq_reads_them(value: object, want: OffsetSpec) -> None:
    assert parse_offset_spec(value, 10_000_000) == want


@pytest.mark.parametrize("value", [-1, 1.5, "1x", "soon", True])
def test_bad_offset_specifications_are_refused(value: object) -> None:
    with pytest.raises(ValueError):
        parse_offset_spec(value, 0)


def test_stream_declare_checks_follow_rabbitmqs_order() -> None:
    with pytest.raises(SettingsError, match="'auto-delete'"):
        check_stream_declare(
            "q", "/", durable=False, exclusive=True, auto_delete=True, arguments={}
        )
    with pytest.raises(SettingsError, match="'exclusive-owner'"):
        check_stream_declare(
            "q", "/", durable=False, exclusive=True, auto_delete=False, arguments={}
        )
    with pytest.raises(SettingsError, match="Exceeded max value"):
        check_stream_declare(
            "q", "/", durable=True, exclusive=False, auto_delete=False,
            arguments={"x-stream-max-segment-size-bytes": 4_000_000_000},
        )  # fmt: skip


def test_a_range_read_from_before_the_first_kept_offset_stops_at_its_end() -> None:
    # Retention removed offset 0: a range [0, 1) holds nothing (the stream log model found
    # the memory log returning offset 1, the first kept, there)
    from ringmq.core.queue.columns import Columns

    log = MemoryStreamLog(AGE)
    log.append([_msg()], 0)
    log.append([_msg()], 10)
    assert log.enforce(1001) == 1
    cols = Columns()
    log.read_columns(0, 1, cols)
    assert list(cols.seqs) == []
    log.read_columns(0, 2, cols)
    assert list(cols.seqs) == [1]
