"""The writer's per-row publishing (`publish_rows`) against a live broker, without a JVM."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

import pyarrow as pa

from ringmq.connector.client import StreamClient
from ringmq.connector.records import property_maps
from ringmq.connector.spark.options import Options
from ringmq.connector.spark.sink import arrow_rows, publish_rows
from ringmq.node import BrokerThread
from tests.unit.connector.conftest import urls

pytestmark = pytest.mark.integration


def test_rows_publish_with_columns_and_deterministic_ids(live_broker: BrokerThread) -> None:
    import pika

    amqp, http = urls(live_broker)
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", live_broker.port))
    ch = conn.channel()
    ch.queue_declare("w-default")
    ch.queue_declare("w-dedup", arguments={"x-message-deduplication-window-ms": 60_000})
    conn.close()
    smap = pa.map_(pa.string(), pa.string())
    batch = pa.RecordBatch.from_pydict(
        {
            "body": pa.array([b"a", b"b", b"c"]),
            "routing_key": pa.array([None, "w-dedup", "w-dedup"]),
            "headers": pa.array([[("k", "1")], None, [("k", "3")]], type=smap),
            "message_id": pa.array([None, None, "fixed"]),
        }
    )
    opts = Options.parse({"url": amqp, "routingKey": "w-default"})
    sent = publish_rows(opts, arrow_rows(iter([batch])), streaming=False)
    assert sent.count == 3
    # a retried task publishes the same ids: the dedup queue drops every copy
    again = publish_rows(opts, arrow_rows(iter([batch])), streaming=False)
    assert (again.first_id, again.last_id) == (sent.first_id, sent.last_id)
    with StreamClient(http) as c:
        default = c.browse_all("w-default")
        dedup = c.browse_all("w-dedup")
    assert [r.body for r in default] == [b"a", b"a"]
    assert [r.body for r in dedup] == [b"b", b"c"]
    headers, _, mid = property_maps(dedup[1].properties_bin)
    assert (headers, mid) == ({"k": "3"}, "fixed")
    h0, _, mid0 = property_maps(default[0].properties_bin)
    assert h0 == {"k": "1"}
    assert mid0 is not None
    assert mid0.startswith("spark:0:0:")
