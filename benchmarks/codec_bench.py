"""Codec micro-benchmark: µs per operation, ringmq against pamqp.

Run: ``.venv/bin/python benchmarks/codec_bench.py [--quick]``. Prints the best of several
repeats of process CPU time (the least disturbed by other load), per operation:

* decode Basic.Publish + content header + 100-byte body (frame reader; then the full
  ServerConnection path with command assembly);
* encode Basic.Deliver + header + body (fast path, generic path), against pamqp constructing and
  marshalling the same three frames (byte-identical output is asserted first).
"""

from __future__ import annotations

import sys
import time
import timeit
from collections.abc import Callable

from pamqp import body as pbody
from pamqp import commands as pc
from pamqp import frame as pframe
from pamqp import header as pheader

from ringmq.amqp import spec
from ringmq.amqp.deliverframes import encode_deliver
from ringmq.amqp.frames import (
    FrameReader,
    encode_content_frames,
    encode_method_frame,
)
from ringmq.amqp.properties import BasicProperties, encode_properties
from ringmq.protocol import ServerConnection
from ringmq.protocol.events import Command, LoginRequested, OpenRequested

BODY = b"x" * 100
PROPS = BasicProperties(content_type="application/json", delivery_mode=2, priority=1)
PROPS_BIN = encode_properties(PROPS)
PUBLISH = encode_content_frames(
    1, spec.BasicPublish(exchange="amq.direct", routing_key="orders"), PROPS_BIN, BODY, 131072
)
FRAME_MAX = 131072


def _bench(name: str, fn: Callable[[], object], number: int, repeat: int) -> float:
    # CPU time of this process, not wall time: on a shared machine being descheduled would
    # otherwise dominate; the minimum over repeats is the least disturbed run.
    timer = timeit.Timer(fn, timer=time.process_time)
    best = min(timer.repeat(number=number, repeat=repeat)) / number * 1e6
    print(f"{name:<58} {best:8.2f} µs/op")
    return best


def _decode_ours() -> object:
    reader = FrameReader(FRAME_MAX)
    reader.feed(PUBLISH)
    return reader.next_frame(), reader.next_frame(), reader.next_frame()


def _decode_pamqp() -> object:
    data = PUBLISH
    n1, _, f1 = pframe.unmarshal(data)
    n2, _, f2 = pframe.unmarshal(data[n1:])
    _, _, f3 = pframe.unmarshal(data[n1 + n2 :])
    return f1, f2, f3


def m(channel: int, method: spec.Method) -> bytes:
    return encode_method_frame(channel, method)


def _open_connection() -> ServerConnection:
    conn = ServerConnection()
    conn.receive_data(b"AMQP\x00\x00\x09\x01")
    events = conn.receive_data(
        m(0, spec.ConnectionStartOk({}, "PLAIN", b"\x00guest\x00guest", "en_US"))
    )
    assert isinstance(events[0], LoginRequested)
    conn.accept_login()
    events = conn.receive_data(
        m(0, spec.ConnectionTuneOk(2047, FRAME_MAX, 0)) + m(0, spec.ConnectionOpen("/"))
    )
    assert isinstance(events[0], OpenRequested)
    conn.accept_open()
    conn.receive_data(m(1, spec.ChannelOpen()))
    conn.data_to_send()
    return conn


def _encode_ours_fast() -> bytes:
    return encode_deliver(
        1, b"ctag-1", 12345, False, b"amq.direct", b"orders", PROPS_BIN, BODY, FRAME_MAX
    )


def _encode_ours_generic() -> bytes:
    method = spec.BasicDeliver("ctag-1", 12345, False, "amq.direct", "orders")
    return encode_content_frames(1, method, PROPS_BIN, BODY, FRAME_MAX)


def _encode_pamqp() -> bytes:
    deliver = pc.Basic.Deliver(
        consumer_tag="ctag-1", delivery_tag=12345, exchange="amq.direct", routing_key="orders"
    )
    props = pc.Basic.Properties(content_type="application/json", delivery_mode=2, priority=1)
    return (
        pframe.marshal(deliver, 1)
        + pframe.marshal(pheader.ContentHeader(0, len(BODY), props), 1)
        + pframe.marshal(pbody.ContentBody(BODY), 1)
    )


def main() -> int:
    quick = "--quick" in sys.argv
    number, repeat = (2000, 3) if quick else (20000, 7)
    assert _encode_ours_fast() == _encode_ours_generic() == _encode_pamqp()

    print("decode Basic.Publish + header + 100 B body")
    ours = _bench("  ringmq FrameReader (3 frames)", _decode_ours, number, repeat)
    conn = _open_connection()
    events = conn.receive_data(PUBLISH)
    assert isinstance(events[0], Command)
    _bench(
        "  ringmq ServerConnection.receive_data -> Command",
        lambda: conn.receive_data(PUBLISH),
        number,
        repeat,
    )
    theirs = _bench("  pamqp frame.unmarshal x3", _decode_pamqp, number, repeat)
    print(f"  speed-up vs pamqp: {theirs / ours:.1f}x")

    print("encode Basic.Deliver + header + 100 B body (properties passed through raw)")
    ours = _bench("  ringmq encode_deliver (hot path)", _encode_ours_fast, number, repeat)
    _bench("  ringmq encode_content_frames(BasicDeliver)", _encode_ours_generic, number, repeat)
    conn.data_to_send()

    def _send_deliver() -> None:
        conn.send_deliver(1, "ctag-1", 12345, False, "amq.direct", "orders", PROPS_BIN, BODY)
        conn.data_to_send()

    _bench("  ringmq ServerConnection.send_deliver + data_to_send", _send_deliver, number, repeat)
    theirs = _bench("  pamqp construct + marshal x3", _encode_pamqp, number, repeat)
    print(f"  speed-up vs pamqp: {theirs / ours:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
