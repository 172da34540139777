"""The AMQP writer's columnar path (`sink.arrow_messages`) sends, row for row, what the per-row
path (`sink.row_messages`) sends: same exchanges, routing keys, properties, bodies and ids."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("pyspark")
pa = pytest.importorskip("pyarrow")

from ringmq.connector.spark.bulk import content_ids, routing_keys, sequential_ids  # noqa: E402
from ringmq.connector.spark.options import Options  # noqa: E402
from ringmq.connector.spark.sink import arrow_messages, arrow_rows, row_messages  # noqa: E402

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
    cols = list(arrow_messages(opts, iter(_batches()), ids, col_ends))
    assert len(rows) == 8
    assert cols == rows
    assert col_ends == row_ends
    assert [m[:2] for m in cols[3:6]] == [("ex", "rk"), ("fx", "rk2"), ("ex", "rk3")]
