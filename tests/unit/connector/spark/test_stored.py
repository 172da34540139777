"""A stream's records as stored, decoded in the worker (`connector.spark.stored`), against the
broker's own columns of the same offsets (no JVM; the segment files of a `FileStreamLog`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")
pa = pytest.importorskip("pyarrow")

import ringmq.adapters.amqp10.message  # noqa: E402, F401 - registers the stream entry codec
from ringmq.amqp.properties import BasicProperties, encode_properties  # noqa: E402
from ringmq.connector.spark import stored  # noqa: E402
from ringmq.connector.spark.rows import columns_to_batch  # noqa: E402
from ringmq.core.message import Message  # noqa: E402
from ringmq.core.queue.columns import Columns  # noqa: E402
from ringmq.core.streamchunk import decode_chunk, encode_chunk  # noqa: E402
from ringmq.core.streamlog import StreamSpec  # noqa: E402
from ringmq.management.streamwire import encode_column_set  # noqa: E402
from ringmq.storage import streamfiles  # noqa: E402
from ringmq.storage.streamfiles import FileStreamLog  # noqa: E402


def _columns(log: FileStreamLog, lo: int, hi: int) -> Any:
    cols = Columns()
    log.read_columns(lo, hi, cols)
    return pa.Table.from_batches([columns_to_batch("s", encode_column_set(cols))])


def _stored(log: FileStreamLog, lo: int, hi: int) -> tuple[Any, int]:
    # What the stream source does with a `format=stored` answer; the pieces it asks the
    # columns for are read from the log's columns here. Returns the table and those pieces.
    data = b"".join(log.read_stored(lo, hi))
    batches, asked = [], 0
    for piece in stored.decode(data, lo, hi):
        if isinstance(piece, stored.Run):
            batches.append(stored.to_batch("s", data, piece))
        else:
            asked += 1
            batches += _columns(log, *piece).to_batches()
    schema = batches[0].schema if batches else _columns(log, 0, 0).schema
    return pa.Table.from_batches(batches, schema=schema), asked


def _messages(n: int, tag: str) -> list[Message]:
    out = []
    for i in range(n):
        if i % 5 == 1:  # headers and properties: the entry's field table is skipped over
            h = {"i": i, "tag": tag}
            props = encode_properties(BasicProperties(headers=h, message_id=f"{tag}{i}"))
            out.append(Message("ex", f"rk.{tag}", props, b"b%d" % i, h, message_id=f"{tag}{i}"))
        else:
            body = bytes(range(i % 256)) * (1 + i % 3)  # empty bodies too
            out.append(Message("", "s", b"\x00\x00", body, timestamp_ms=1_700_000_000_000 + i))
    return out


@pytest.mark.parametrize("stride", [0, 256, 64 * 1024])
def test_stored_records_decode_as_the_broker_columns_them(
    tmp_path: Path, stride: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(streamfiles, "INDEX_STRIDE", stride)
    log = FileStreamLog(tmp_path / "s", StreamSpec(max_segment_bytes=4096), "s")
    now = 1_700_000_000_000
    for m in _messages(40, "a"):  # one chunk per message (an AMQP or HTTP publish)
        log.append((m,), now)
    log.append(_messages(30, "b"), now + 1)  # a chunk of many
    raw = encode_chunk(0, now, _messages(7, "c"))  # a stream-protocol chunk, as published
    log.append_chunk(raw[48:], 7, 7, now + 2)
    other = [m for _, m in decode_chunk(raw, 0, "s")]  # messages of the AMQP 1.0 form
    assert {m.form for m in other} != {0}
    log.append(other[:3], now + 3)
    log.append(_messages(20, "d"), now + 4)
    end = log.index.next_offset
    assert len(log.index.segments) > 2  # ranges across segments
    ranges = [(0, end), (0, 1), (3, 17), (39, 41), (45, 75), (68, 90), (71, 80)]
    for lo, hi in [*ranges, (end - 1, end + 5), (5, 5), (end, end + 3)]:
        got, _ = _stored(log, lo, hi)
        want = _columns(log, lo, hi)
        assert got.to_pylist() == want.to_pylist(), (lo, hi)
        assert got.column("position").to_pylist() == list(range(lo, min(hi, end)))
    assert _stored(log, 0, end)[1] == 1  # the stream-protocol chunk and the 3 after it
    assert _stored(log, 0, 60)[1] == 0  # all of it decoded from the records as stored


def _pieces(data: bytes, lo: int, hi: int) -> list[object]:
    return [
        (list(p.starts), list(p.ends)) if isinstance(p, stored.Run) else p
        for p in stored.decode(data, lo, hi)
    ]


@pytest.mark.parametrize("stride", [0, 256])
def test_records_of_one_message_are_walked_by_length_alone(
    tmp_path: Path, stride: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An answer of records holding one message each (AMQP and HTTP publishes) is walked by
    # the records' lengths and checked on whole columns (`_single_entries`): the same entries
    # as the full walk, at every range edge, for bodies inline in Arrow's views or not and
    # at the answer's very end; an answer with a chunk of many takes the full walk.
    monkeypatch.setattr(streamfiles, "INDEX_STRIDE", stride)
    log = FileStreamLog(tmp_path / "s", StreamSpec(max_segment_bytes=4096), "s")
    for msg in _messages(60, "a"):
        log.append((msg,), 1_700_000_000_000)
    for lo, hi in [(0, 60), (0, 1), (59, 60), (13, 47), (58, 70), (60, 61)]:
        data = b"".join(log.read_stored(lo, hi))
        assert stored._single_entries(data, lo, hi) is not None
        fast = _pieces(data, lo, hi)
        with monkeypatch.context() as patch:
            patch.setattr(stored, "_single_entries", lambda *_: None)
            assert fast == _pieces(data, lo, hi), (lo, hi)
        got, asked = _stored(log, lo, hi)
        assert asked == 0
        assert got.to_pylist() == _columns(log, lo, hi).to_pylist(), (lo, hi)
    log.append(_messages(3, "b"), 1)
    data = b"".join(log.read_stored(55, 63))
    assert stored._single_entries(data, 55, 63) is None
    assert _stored(log, 55, 63)[0].to_pylist() == _columns(log, 55, 63).to_pylist()


def test_read_stored_sends_whole_records_found_by_the_index(tmp_path: Path) -> None:
    # Located by index points alone: a read of a few offsets in a long segment is about one
    # stride of records, not the segment.
    log = FileStreamLog(tmp_path / "s", StreamSpec(), "s")
    for m in _messages(5000, "a"):
        log.append((m,), 1)
    data = b"".join(log.read_stored(2500, 2510))
    assert len(data) <= 2 * streamfiles.INDEX_STRIDE + 16 * 1024
    pieces = stored.decode(data, 2500, 2510)
    assert len(pieces) == 1
    assert isinstance(pieces[0], stored.Run)
    assert stored.to_batch("s", data, pieces[0]).column("seq").to_pylist() == list(
        range(2500, 2510)
    )


def test_a_log_in_memory_answers_in_columns() -> None:
    # A broker without a data directory keeps no stored form: the source takes the columns.
    from ringmq.connector.spark.streamsource import _batches
    from ringmq.core.streamlog import MemoryStreamLog

    log = MemoryStreamLog(StreamSpec(), "s")
    log.append(_messages(5, "a"), 1)
    assert log.read_stored(0, 5) is None
    cols = Columns()
    log.read_columns(1, 4, cols)
    answer = ("application/x-ringmq-columns", encode_column_set(cols))
    (batch,) = _batches("s", answer, 1, 4, lambda _request: pytest.fail("nothing to ask"))
    assert batch.column("position").to_pylist() == [1, 2, 3]


@pytest.mark.integration
def test_stream_source_reads_over_the_wire(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The executors' reads without Spark, in steps of 7 offsets, partitions not on a step.
    import pika

    from ringmq.connector.client import StreamAPIError, StreamClient
    from ringmq.connector.records import encode_publish
    from ringmq.connector.spark import source
    from ringmq.connector.spark.options import Options
    from ringmq.connector.spark.streamsource import StreamRangeReader
    from ringmq.node import BrokerThread
    from ringmq.server.configfile import FileConfig
    from ringmq.server.runtime import ServerOptions
    from tests.unit.connector.conftest import urls

    monkeypatch.setattr(source, "_READ_STEP", 7)
    b = BrokerThread(
        ServerOptions(
            host="127.0.0.1",
            amqp_port=0,
            http_port=0,
            data_dir=tmp_path,
            config=FileConfig(),
        )
    )
    b.start()
    try:
        amqp, http = urls(b)
        conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", b.port))
        conn.channel().queue_declare("log", durable=True, arguments={"x-queue-type": "stream"})
        conn.close()
        with StreamClient(http) as c:
            for part in range(0, 60, 20):
                bodies = [b"m%d" % i for i in range(part, part + 20)]
                c.publish("", encode_publish(("log", b"\x00\x00", b) for b in bodies))
            media, _ = c.read_log_stored("log", 0, 60)
            assert media == "application/x-ringmq-stream-records"
            with pytest.raises(StreamAPIError) as exc:
                c._request("GET", c._path("log", "/log?lo=0&hi=1&format=rows"))
            assert exc.value.status == 400
        opts = Options.parse(
            {
                "url": amqp,
                "httpUrl": http,
                "queue": "log",
                "startingOffsets": "3",
                "endingOffsets": "57",
                "minMessagesPerPartition": "1",
                "partitionsPerRange": "3",
            }
        )
        reader = StreamRangeReader(opts)
        parts = reader.partitions()
        assert len(parts) == 3
        got = [
            (pos, body)
            for p in parts
            for batch in reader.read(p)
            for pos, body in zip(
                batch.column("position").to_pylist(), batch.column("body").to_pylist(), strict=True
            )
        ]
        assert got == [(i, b"m%d" % i) for i in range(3, 57)]
    finally:
        b.stop()
