"""Publisher confirms over the wire: acks and nacks of one channel, as aio-pika reads them.

aiormq settles a `multiple` ack only when its tag is a publish still waiting; any other
confirm frame is logged ("Unexpected confirmation frame") and dropped, and the publishes it
should have settled wait forever. A confirm channel that publishes both to a durable queue
(acks held for the group-commit fsync) and to a full reject-publish queue (nacked at once)
makes the broker ack the held publishes after later ones were nacked: each `multiple` ack must
stop below every nack (core/session.py, `Session.confirm_acks`).
"""

from __future__ import annotations

import asyncio
import logging

import aio_pika
import aiormq
import pytest
from aio_pika.exceptions import DeliveryError

from ringmq.node import BrokerThread

pytestmark = pytest.mark.integration

_IN_FLIGHT = 40
_LIMIT = 5


def _url(b: BrokerThread) -> str:
    return f"amqp://guest:guest@{b.host}:{b.port}/%2F"


async def test_held_acks_after_nacks_settle_every_publish(
    broker: BrokerThread, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="aiormq")
    async with await aio_pika.connect(_url(broker), timeout=10) as conn:
        ch = await conn.channel(publisher_confirms=True)
        durable = await ch.declare_queue("cf_durable", durable=True)
        limited = await ch.declare_queue(
            "cf_limited", arguments={"x-max-length": _LIMIT, "x-overflow": "reject-publish"}
        )
        x = ch.default_exchange
        # Publish seq n (1-based) goes to the durable queue when odd, the limited one when
        # even: 1, 3, 5... wait for the fsync; 2..10 fill the limited queue; 12..40 are nacked.
        sends = [
            asyncio.ensure_future(
                x.publish(
                    aio_pika.Message(
                        str(i).encode(), delivery_mode=aio_pika.DeliveryMode.PERSISTENT
                    ),
                    routing_key="cf_durable" if i % 2 else "cf_limited",
                )
            )
            for i in range(1, _IN_FLIGHT + 1)
        ]
        # A bound against hanging only: on the broken broker the held publishes never settle.
        _, waiting = await asyncio.wait(sends, timeout=15)
        for t in waiting:
            t.cancel()
        never = [i for i, t in enumerate(sends, 1) if t in waiting]
        assert never == [], f"{len(never)} of {_IN_FLIGHT} publishes never settled: {never}"
        results = [t.result() if t.exception() is None else t.exception() for t in sends]
        acked = [i for i, r in enumerate(results, 1) if isinstance(r, aiormq.spec.Basic.Ack)]
        nacked = [i for i, r in enumerate(results, 1) if isinstance(r, DeliveryError)]
        assert len(acked) + len(nacked) == _IN_FLIGHT, results
        assert acked == sorted([*range(1, _IN_FLIGHT + 1, 2), *range(2, 2 * _LIMIT + 1, 2)])
        assert nacked == list(range(2 * _LIMIT + 2, _IN_FLIGHT + 1, 2))
        assert (await durable.declare()).message_count == _IN_FLIGHT // 2
        assert (await limited.declare()).message_count == _LIMIT
    assert not [r for r in caplog.records if "Unexpected confirmation frame" in r.getMessage()]
