"""The connector's options from Spark's option map (no JVM, no broker): names in any case,
defaults, refusals; AMQP parameters from a URL."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark")
pa = pytest.importorskip("pyarrow")

from ringmq.connector.client import AMQPParams  # noqa: E402
from ringmq.connector.spark import OptionError, Options  # noqa: E402


def test_options_parse_case_insensitive_and_defaults() -> None:
    o = Options.parse(
        {
            "URL": "amqp://u:p%40ss@10.0.0.1:5673/v%2Fh",
            "Queues": "a, b,,c",
            "consumerName": "job",
            "MAXMESSAGESPERBATCH": "500",
        }
    )
    assert (o.user, o.password, o.vhost) == ("u", "p@ss", "v/h")
    assert o.queues == ("a", "b", "c")
    assert o.max_messages_per_batch == 500
    assert o.http_url == "http://u:p%40ss@10.0.0.1:15672"
    assert o.require_consumer() == "job"
    with pytest.raises(OptionError, match="consumerName"):
        Options.parse({"queue": "q"}).require_consumer()
    with pytest.raises(OptionError, match="queue"):
        Options.parse({}).require_queues()
    with pytest.raises(OptionError, match="integer"):
        Options.parse({"maxMessagesPerBatch": "lots"})
    assert AMQPParams.from_url("amqp://h") == AMQPParams(host="h")
