"""Publish runs on the 0-9-1 read path (adapters/amqp091/runs.py): consecutive publishes of a read
on a confirm channel go as one batch, with the outcome of one publish at a time.

Two servers without sockets (fake transports) are fed the same frames cut into the same reads,
one with `Amqp091Handlers.publish_runs` off (every publish the per-command way); queue contents,
confirms (acks with `multiple` expanded, nacks), returns, the other replies and the broker's
counters must be the same.
"""

from __future__ import annotations

import itertools
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from ringmq.adapters.amqp091 import Amqp091
from ringmq.adapters.amqp091.connection import Amqp091Handler, Amqp091Handlers
from ringmq.amqp import spec
from ringmq.amqp.frames import (
    PROTOCOL_HEADER,
    BodyFrame,
    FrameReader,
    HeaderFrame,
    MethodFrame,
    encode_content_frames,
    encode_method_frame,
)
from ringmq.amqp.properties import BasicProperties, encode_properties
from ringmq.core.broker import Broker
from ringmq.core.queue.ports import MemorySpillStore
from ringmq.server.configfile import FileConfig
from ringmq.server.handlers import HandlerConnection
from ringmq.server.runtime import BrokerServer, Core, ServerOptions
from ringmq.server.setup import broker_config

_FRAME_MAX = 4096
_WINDOW = {"x-message-deduplication-window-ms": 60_000}
_QUEUES: dict[str, dict[str, Any]] = {
    "sink": dict(_WINDOW),  # a Spark sink's queue: de-duplicating
    "plain": {},
    "capped": {"x-max-length": 3, "x-overflow": "reject-publish"},
}
_HEAD = 3  # in-memory bound: the queues page from the 4th message on (bulk ingest applies)


class _Transport:
    """Just enough of `asyncio.Transport`: keeps what is written."""

    def __init__(self) -> None:
        self.out = bytearray()

    def write(self, data: bytes) -> None:
        self.out += data

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 40000) if name in ("peername", "sockname") else default

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def is_closing(self) -> bool:
        return False

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def close(self) -> None:
        pass

    def abort(self) -> None:
        pass


def _setup() -> bytes:
    frames = [
        PROTOCOL_HEADER,
        encode_method_frame(0, spec.ConnectionStartOk(response=b"\x00guest\x00guest")),
        encode_method_frame(0, spec.ConnectionTuneOk(2047, _FRAME_MAX, 0)),
        encode_method_frame(0, spec.ConnectionOpen(virtual_host="/")),
        encode_method_frame(1, spec.ChannelOpen()),
    ]
    for name, args in _QUEUES.items():
        frames.append(encode_method_frame(1, spec.QueueDeclare(queue=name, arguments=args)))
    frames.append(encode_method_frame(1, spec.ConfirmSelect()))
    return b"".join(frames)


class _Server:
    """A broker server around a paging broker, one client connection on a fake transport."""

    def __init__(self, tmp: Path, *, runs: bool) -> None:
        self.broker = Broker(broker_config(FileConfig()))
        self.broker.enable_paging(lambda _vh, _q: MemorySpillStore(), _HEAD, 1 << 20)
        core = Core(self.broker)
        amqp091 = Amqp091(self.broker)
        factory = Amqp091Handlers(amqp091)
        self.server = BrokerServer(
            ServerOptions(amqp_port=0, http_port=None, data_dir=tmp),
            lambda _e, _n: core,
            handlers={"amqp091": factory},
        )
        self.server.attach(core)
        factory.publish_runs = runs
        self.batches = 0  # publish runs handed to the adapter (as rows or as columns)
        for name in ("publish_batch", "publish_run"):
            real = getattr(amqp091, name)

            def spy(*args: Any, real: Any = real) -> Any:
                self.batches += 1
                return real(*args)

            setattr(amqp091, name, spy)
        self.conn = HandlerConnection(self.server.handlers, 1, "amqp091", tls=False)
        self.transport = _Transport()
        self.conn.connection_made(self.transport)  # type: ignore[arg-type]
        assert isinstance(self.conn.handler, Amqp091Handler)
        self.handler: Amqp091Handler = self.conn.handler
        self.conn.data_received(_setup())
        assert self.conn.opened
        self.transport.out.clear()

    def feed(self, reads: list[bytes]) -> None:
        for data in reads:
            self.conn.data_received(data)

    def contents(self) -> dict[str, list[tuple[bytes, str | None]]]:
        out: dict[str, list[tuple[bytes, str | None]]] = {}
        for name, q in self.broker.vhosts["/"].queues.items():
            got = []
            while (d := q.queue.fetch(0, ack_required=False)) is not None:
                got.append((bytes(d.message.body), d.message.message_id))
            out[name] = got
        return out


def _replies(data: bytes) -> tuple[set[int], set[int], list[Any]]:
    """(acked tags, `multiple` expanded; nacked tags; every other reply in order, a returned
    message with its body)."""
    reader = FrameReader(0)
    reader.feed(data)
    acked: set[int] = set()
    nacked: set[int] = set()
    other: list[Any] = []
    while (f := reader.next_frame()) is not None:
        if isinstance(f, MethodFrame):
            m = f.method
            if isinstance(m, spec.BasicAck):
                tags = range(1, m.delivery_tag + 1) if m.multiple else [m.delivery_tag]
                new = {t for t in tags if t not in nacked and t not in acked}
                assert new or not m.multiple, f"an ack confirming nothing: {m}"
                assert m.multiple or new, f"a tag acked twice: {m}"
                acked |= new
            elif isinstance(m, spec.BasicNack):
                assert not m.multiple
                assert m.delivery_tag not in acked
                assert m.delivery_tag not in nacked
                nacked.add(m.delivery_tag)
            else:
                other.append((f.channel, m))
        elif isinstance(f, BodyFrame):
            other.append(("body", bytes(f.data)))
        elif isinstance(f, HeaderFrame):
            other.append(("header", f.body_size))
    return acked, nacked, other


def _publish(i: int, exchange: str, rk: str, mid: str | None, mandatory: bool, big: bool) -> bytes:
    body = (f"m{i}-".encode() * 1200)[:5000] if big else f"m{i}".encode()
    props = encode_properties(BasicProperties(message_id=mid))
    method = spec.BasicPublish(exchange=exchange, routing_key=rk, mandatory=mandatory)
    return encode_content_frames(1, method, props, body, _FRAME_MAX)


_publishes = st.tuples(
    st.sampled_from([""] * 12 + ["amq.direct"]),  # exchange (amq.direct binds nothing here)
    st.sampled_from(["sink"] * 10 + ["plain", "capped", "nowhere"]),
    st.none() | st.sampled_from(["a", "b", "c", "d", "e"]),  # message_id
    st.sampled_from([False] * 8 + [True]),  # mandatory
    st.sampled_from([False] * 12 + [True]),  # a body of two frames
)
_other = st.sampled_from(["qos", "declare", "missing"])
_item = st.one_of(*[_publishes] * 8, _other)


def _stream(items: list[Any]) -> bytes:
    parts = []
    for i, item in enumerate(items):
        if item == "qos":
            parts.append(encode_method_frame(1, spec.BasicQos(prefetch_count=i)))
        elif item == "declare":
            parts.append(encode_method_frame(1, spec.QueueDeclare(queue="sink", passive=True)))
        elif item == "missing":  # 404: closes the channel, the rest of the stream is dropped
            parts.append(_publish(i, "missing", "sink", None, False, False))
        else:
            parts.append(_publish(i, *item))
    return b"".join(parts)


def _cut(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in itertools.pairwise(points) if b > a]


def _servers() -> Iterator[tuple[_Server, _Server]]:
    with tempfile.TemporaryDirectory() as tmp:
        yield _Server(Path(tmp) / "one", runs=False), _Server(Path(tmp) / "runs", runs=True)


_BATCHES: list[int] = []  # batches taken per example (checked after the property test)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.tuples(_item, st.integers(min_value=1, max_value=12)), min_size=1, max_size=8),
    st.lists(st.integers(min_value=0, max_value=1 << 20), max_size=4),
)
def test_runs_have_the_outcome_of_one_publish_at_a_time(
    blocks: list[tuple[Any, int]], cuts: list[int]
) -> None:
    data = _stream([item for item, k in blocks for _ in range(k)])  # items repeated k times
    reads = _cut(data, cuts)
    for one, runs in _servers():
        one.feed(reads)
        runs.feed(reads)
        assert runs.contents() == one.contents()
        assert _replies(bytes(runs.transport.out)) == _replies(bytes(one.transport.out))
        assert runs.broker.stats == one.broker.stats
        assert one.batches == 0
        _BATCHES.append(runs.batches)


def test_the_property_test_made_runs() -> None:
    if not _BATCHES:
        test_runs_have_the_outcome_of_one_publish_at_a_time()
    assert sum(1 for b in _BATCHES if b) >= len(_BATCHES) // 4  # not a vacuous comparison


def test_a_read_of_publishes_is_one_batch_with_one_ack() -> None:
    data = b"".join(_publish(i, "", "sink", f"id{i}", False, False) for i in range(10))
    for one, runs in _servers():
        one.feed([data])
        runs.feed([data])
        assert runs.batches == 1
        ack = spec.BasicAck(delivery_tag=10, multiple=True)
        assert bytes(runs.transport.out) == encode_method_frame(1, ack)
        assert _replies(bytes(one.transport.out)) == (set(range(1, 11)), set(), [])
        assert runs.contents() == one.contents()
        assert runs.broker.stats["confirmed"] == one.broker.stats["confirmed"] == 10


def test_a_duplicate_id_in_a_run_is_acked_and_dropped() -> None:
    ids = ["a", "b", "a", "c", "b", "d"]
    data = b"".join(_publish(i, "", "sink", mid, False, False) for i, mid in enumerate(ids))
    for one, runs in _servers():
        one.feed([data])
        runs.feed([data])
        assert runs.batches == 1
        got = runs.contents()
        assert [m for _b, m in got["sink"]] == ["a", "b", "c", "d"]
        assert _replies(bytes(runs.transport.out)) == (set(range(1, 7)), set(), [])
        assert got == one.contents()


def test_a_full_reject_publish_queue_nacks_the_rest_of_the_run() -> None:
    data = b"".join(_publish(i, "", "capped", None, False, False) for i in range(6))
    for one, runs in _servers():
        one.feed([data])
        runs.feed([data])
        assert runs.batches == 1
        assert _replies(bytes(runs.transport.out)) == ({1, 2, 3}, {4, 5, 6}, [])
        assert _replies(bytes(one.transport.out)) == ({1, 2, 3}, {4, 5, 6}, [])
        assert runs.broker.stats == one.broker.stats


def test_a_mandatory_publish_splits_the_run_and_is_returned() -> None:
    data = b"".join(
        _publish(i, "", "nowhere" if i == 2 else "sink", None, i == 2, False) for i in range(5)
    )
    for one, runs in _servers():
        one.feed([data])
        runs.feed([data])
        assert runs.batches == 2  # 0-1 and 3-4; the mandatory 2 goes alone
        acked, nacked, other = _replies(bytes(runs.transport.out))
        assert (acked, nacked) == ({1, 2, 3, 4, 5}, set())
        assert [type(m) for _c, m in other[:1]] == [spec.BasicReturn]
        assert (acked, nacked, other) == _replies(bytes(one.transport.out))


def test_publishes_under_an_alarm_are_each_taken_and_block() -> None:
    data = b"".join(_publish(i, "", "sink", None, False, False) for i in range(5))
    for one, runs in _servers():
        for s in (one, runs):
            s.broker.set_alarm("memory", "test")
            s.feed([data])
            assert s.conn.pause_reasons == {"block"}
        assert runs.batches == 1  # the first publish blocks: the batch stops, the rest go alone
        got = runs.contents()
        assert len(got["sink"]) == 5
        assert got == one.contents()
        assert _replies(bytes(runs.transport.out)) == _replies(bytes(one.transport.out))
        assert runs.broker.stats == one.broker.stats


def test_a_read_of_publishes_reaches_the_broker_as_columns() -> None:
    # the reader hands the run over as one PublishRun (no Command per publish), and the
    # broker's ingest takes it as columns once the queue pages
    data = b"".join(_publish(i, "", "sink", f"id{i}", False, False) for i in range(40))
    for one, runs in _servers():
        events = runs.handler.proto.receive_data(b"")  # (nothing buffered)
        assert events == []
        runs.handler.proto.publish_runs = {1}
        got = runs.handler.proto.receive_data(data)
        assert [type(e).__name__ for e in got] == ["PublishRun"]
        runs.handler.proto.publish_runs = None
        runs.feed([data])  # the same publishes again, through the server: one batch
        one.feed([data, data])
        assert runs.batches == 1
        assert runs.contents()["sink"] == one.contents()["sink"][:40]  # the replays dropped
