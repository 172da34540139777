"""The AMQP writer's columnar path (`sink.arrow_frames`) sends, row for row, what the per-row
path (`sink.row_messages`) sends: same exchanges, routing keys, properties, bodies and ids,
framed as the codec frames them (`frames.encode_content_frames`)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("pyspark")
pa = pytest.importorskip("pyarrow")

from ringmq.amqp import spec  # noqa: E402
from ringmq.amqp.frames import encode_content_frames  # noqa: E402
from ringmq.connector.spark.amqpframes import publish_frames  # noqa: E402
from ringmq.connector.spark.bulk import (  # noqa: E402
    content_ids,
    hex_words,
    routing_keys,
    sequential_ids,
)
from ringmq.connector.spark.options import Options  # noqa: E402
from ringmq.connector.spark.sink import arrow_frames, arrow_rows, row_messages  # noqa: E402
from ringmq.connector.spark.writerows import digest  # noqa: E402

_SMAP = pa.map_(pa.string(), pa.string())
_EXTRA = pa.struct([("content_type", pa.string()), ("app_id", pa.string())])


def _batches() -> list[Any]:
    return [
        pa.RecordBatch.from_pydict({"body": pa.array([b"a", b"", None], pa.binary())}),
        pa.RecordBatch.from_pydict({"body": pa.array([], pa.binary())}),
        pa.RecordBatch.from_pydict(
            {
                "body": pa.array(["d", "e", "f"]),
                "routing_key": pa.array([None, "rk2", "rk3"]),
                "exchange": pa.array([None, "fx", None]),
                "message_id": pa.array([None, "fixed", None]),
            }
        ),
        pa.RecordBatch.from_pydict(
            {
                "body": pa.array([b"g", b"h"]),
                "headers": pa.array([[("k", "1")], None], type=_SMAP),
                "properties": pa.array(
                    [{"content_type": "text/plain", "app_id": None}, None], type=_EXTRA
                ),
            }
        ),
    ]


@pytest.mark.parametrize("persistent", [False, True])
@pytest.mark.parametrize("content", [False, True])
def test_columns_send_what_rows_send(persistent: bool, content: bool) -> None:
    opts = Options.parse(
        {"routingKey": "rk", "exchange": "ex", "persistent": str(persistent).lower()}
    )
    ids = content_ids("spark", 3, routing_keys(opts)) if content else sequential_ids("q:1", 3)
    prefix = "spark" if content else "q:1"
    row_ends: list[str] = []
    col_ends: list[str] = []
    rows = list(row_messages(opts, arrow_rows(iter(_batches())), 3, prefix, content, row_ends))
    assert len(rows) == 8
    assert [m[:2] for m in rows[3:6]] == [("ex", "rk"), ("fx", "rk2"), ("ex", "rk3")]
    want = [_frames(m, 4096) for m in rows]
    pieces = list(arrow_frames(opts, iter(_batches()), ids, col_ends, 4096))
    assert _messages(pieces) == want
    assert col_ends == row_ends


def _frames(message: tuple[str, str, bytes, bytes], frame_max: int) -> bytes:
    ex, rk, props, body = message
    method = spec.BasicPublish(exchange=ex, routing_key=rk)
    return encode_content_frames(1, method, props, body, frame_max)


def _messages(pieces: list[tuple[Any, list[int]]]) -> list[bytes]:
    """Each message's bytes, cut from the pieces at their end offsets."""
    out: list[bytes] = []
    for data, ends in pieces:
        at = 0
        assert ends == sorted(ends)
        for end in ends:
            out.append(bytes(data[at:end]))
            at = end
        assert at == len(data)
    return out


@settings(max_examples=80, deadline=None)
@given(
    rows=st.lists(
        st.tuples(
            st.sampled_from(["", "ex"]),
            st.sampled_from(["a", "rk2"]),
            st.binary(max_size=20),
            st.binary(max_size=300) | st.sampled_from([b""]),
        ),
        min_size=1,
        max_size=25,
    ),
    frame_max=st.sampled_from([60, 200, 4096]),
    join_bytes=st.sampled_from([1, 150, 1 << 24]),
)
def test_publish_frames_are_the_codecs_frames(
    rows: list[tuple[str, str, bytes, bytes]], frame_max: int, join_bytes: int
) -> None:
    """Row for row the codec's bytes, whatever the mix of routing, empty, one-frame and
    many-frame bodies, and however the rows are cut into joins."""
    methods: dict[tuple[str, str], bytes] = {}
    pieces = list(
        publish_frames(
            [r[0] for r in rows],
            [r[1] for r in rows],
            pa.array([r[2] for r in rows], pa.binary()),
            pa.array([r[3] for r in rows], pa.binary()),
            frame_max,
            methods,
            join_bytes=join_bytes,
        )
    )
    assert _messages(pieces) == [_frames(r, frame_max) for r in rows]
    assert set(methods) == {(r[0], r[1]) for r in rows}


@settings(max_examples=60, deadline=None)
@given(
    rows=st.lists(
        st.tuples(
            st.sampled_from(["", "a", "rk2"]),
            st.none() | st.binary(max_size=300) | st.binary(min_size=600, max_size=1200),
        ),
        min_size=1,
        max_size=30,
    ),
    cut=st.integers(0, 5),
    start=st.integers(0, 10**12),
)
def test_content_ids_are_each_rows_digest(
    rows: list[tuple[str, bytes | None]], cut: int, start: int
) -> None:
    """Ids made over the body column's buffer (sliced or not, nulls as empty bodies) are the
    per-row `digest` of each row's routing key and body, numbered from `start`."""
    batch = pa.RecordBatch.from_pydict(
        {
            "body": pa.array([b for _, b in rows], pa.binary()),
            "routing_key": pa.array([rk for rk, _ in rows]),
        }
    ).slice(min(cut, len(rows) - 1))
    opts = Options.parse({"routingKey": "rk"})
    got = content_ids("spark", 7, routing_keys(opts))(batch, start).to_pylist()
    kept = rows[min(cut, len(rows) - 1) :]
    assert got == [f"spark:7:{start + i}:{digest(rk, b or b'')}" for i, (rk, b) in enumerate(kept)]


def test_digest_is_both_crcs_of_key_zero_byte_and_body() -> None:
    import zlib

    from crc32c import crc32c

    data = b"rk\x00" + b"body" * 100
    assert digest("rk", b"body" * 100) == f"{crc32c(data):08x}{zlib.crc32(data):08x}"
    assert hex_words(np.array([0, 2**64 - 1, 0x0123456789ABCDEF], dtype=np.uint64)).to_pylist() == [
        "0" * 16,
        "f" * 16,
        "0123456789abcdef",
    ]
