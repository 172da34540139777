"""RabbitMQ's exact replies as real clients see them (issue 16, section 2).

Each test pins one reply that a client library, or its own test suite, relies on; raw sockets
are used only where no client can express the frames.
"""

from __future__ import annotations

import aio_pika
import pika
import pika.exceptions
import pytest

from ringmq.server.runtime import BrokerThread

pytestmark = pytest.mark.integration


def connect(b: BrokerThread, **kw: object) -> pika.BlockingConnection:
    return pika.BlockingConnection(pika.ConnectionParameters(host=b.host, port=b.port, **kw))


def url(b: BrokerThread) -> str:
    return f"amqp://guest:guest@{b.host}:{b.port}/%2F"


# ---------------------------------------------------------------- 2.1 unbind of what is gone
def test_unbind_after_the_queue_or_exchange_is_gone_keeps_the_channel(
    broker: BrokerThread,
) -> None:
    with connect(broker) as conn:
        ch = conn.channel()
        ch.exchange_declare("src", exchange_type="fanout")
        ch.exchange_declare("dst", exchange_type="fanout")
        ch.exchange_bind(destination="dst", source="src")
        ch.queue_declare("q")
        ch.queue_bind("q", "src")
        ch.queue_delete("q")
        ch.queue_unbind("q", "src")
        ch.exchange_delete("dst")
        ch.exchange_unbind(destination="dst", source="src")
        ch.queue_declare("q2")
        ch.queue_unbind("q2", "never-declared")
        assert ch.is_open
        ch.queue_declare("q2", passive=True)  # the channel still answers


async def test_aio_pika_unbind_after_queue_delete(broker: BrokerThread) -> None:
    async with await aio_pika.connect(url(broker), timeout=10) as conn:
        ch = await conn.channel()
        ex = await ch.declare_exchange("aio_unbind", aio_pika.ExchangeType.DIRECT)
        q = await ch.declare_queue("aio_unbind_q")
        await q.bind(ex, routing_key="k")
        await q.delete()
        await q.unbind(ex, routing_key="k")  # aio-pika's RPC close does this
        assert not ch.is_closed


# ---------------------------------------------------------------- 2.2 channel_max
def test_channel_max_counts_open_channels_with_rabbitmqs_530(broker: BrokerThread) -> None:
    conn = connect(broker, channel_max=2)
    try:
        conn.channel(channel_number=5000)  # a number above channel_max is fine
        conn.channel(channel_number=7)
        with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as exc:
            conn.channel(channel_number=9)
        assert exc.value.reply_code == 530
        assert exc.value.reply_text == (
            "NOT_ALLOWED - number of channels opened (2) has reached the negotiated channel_max (2)"
        )
    finally:
        if conn.is_open:
            conn.close()


# ---------------------------------------------------------------- 2.3 the default exchange
def test_passive_declare_of_the_default_exchange_is_403(broker: BrokerThread) -> None:
    with connect(broker) as conn:
        ch = conn.channel()
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as exc:
            ch.exchange_declare("", passive=True)
        assert exc.value.reply_code == 403
        assert exc.value.reply_text == (
            "ACCESS_REFUSED - operation not permitted on the default exchange"
        )
