"""In-process microbenchmark of the AMQP 1.0 per-message path: CPU microseconds per message.

Theory of operation
-------------------
No sockets and no event loop: two `Amqp10Handler`s (a producer and a consumer) on a fresh
in-memory `Broker`, driven as the server drives them: bytes in through `receive_data`, the
returned effects applied to the handlers they target (`apply`), `data_to_send` drained. Every
frame the clients send is encoded up front (the handshake, the links, a batch of transfers),
so the timed loop runs the broker's own code only: frame decode, message build, publish,
dispatch, `Deliver` -> transfer encoding, the consumer's dispositions and flows.

The loop mirrors `amqp10_bench` scenario (a): the producer sends ``--batch`` pre-settled 16 B
transfers per read; the consumer (credit 1000, unsettled) settles everything delivered so far
in one accepted disposition and tops its credit up with one flow once ``--ack-every``
deliveries are outstanding, as `amqp10_load` does. The figure printed is
``time.process_time()`` per message (publish + deliver + settle), the median of ``--rounds``;
``--profile F`` writes a cProfile of one extra run (call counts are stable on a loaded
machine, wall-clock is not; so are callgrind's instruction counts of ``--rounds 1``).

    .venv/bin/python -m benchmarks.amqp10_hotpath [--messages 50000] [--size 16] [--profile F]
"""

from __future__ import annotations

import argparse
import cProfile
import statistics
import time
from typing import Any

from ringmq.adapters.amqp10.handler import Amqp10Handler
from ringmq.adapters.handler import HandlerContext, HandlerLimits, Peer, make_login
from ringmq.amqp10 import performatives as p
from ringmq.amqp10.frames import AMQP_HEADER, SASL_HEADER, encode_body_frame, encode_frame
from ringmq.amqp10.hotpath import ACCEPTED_BYTES, disposition_body, encode_transfer, flow_body
from ringmq.amqp10.sections import Header, encode_section
from ringmq.core.broker import Broker
from ringmq.core.effects import Effect
from ringmq.core.throttle import LoginGuard

_QUEUE = "hotpath"
_LIMITS = HandlerLimits(max_message_size=1 << 20, frame_max=131072, channel_max=16, heartbeat_s=60)
_WINDOW = 1 << 30
_CREDIT = 1000
_DATA = 0x75


def _handler(broker: Broker, conn_id: int) -> Amqp10Handler:
    peer = Peer("127.0.0.1", 40000 + conn_id, "127.0.0.1", 5672)
    login = make_login(broker, LoginGuard(), peer, "amqp10")
    h = Amqp10Handler(HandlerContext(broker, conn_id, peer, _LIMITS, login))
    begin = p.Begin(next_outgoing_id=0, incoming_window=_WINDOW, outgoing_window=_WINDOW)
    h.receive_data(
        SASL_HEADER
        + encode_frame(0, p.SaslInit(mechanism="PLAIN", initial_response=b"\0guest\0guest"))
        + AMQP_HEADER
        + encode_frame(0, p.Open(container_id=f"bench{conn_id}"))
        + encode_frame(0, begin),
        0,
    )
    if not h.opened:
        raise RuntimeError("the handshake did not complete")
    h.data_to_send()
    return h


def _transfers(first: int, n: int, size: int, settled: bool = True, durable: bool = False) -> bytes:
    payload = encode_section(_DATA, b"x" * size)
    if durable:
        payload = Header(durable=True).encode() + payload
    return b"".join(
        encode_body_frame(0, encode_transfer(0, i, i.to_bytes(4, "big"), 0, settled), payload)
        for i in range(first, first + n)
    )


def _settle_and_flow(first: int, last: int) -> bytes:
    # accept first..last (settled) and top the credit up: the consumer's answer
    d = disposition_body(True, first, last if last != first else None, True, ACCEPTED_BYTES)
    f = flow_body(last + 1, _WINDOW, 0, _WINDOW, 0, last + 1, _CREDIT, None, False, False)
    return encode_body_frame(0, d) + encode_body_frame(0, f)


def run_once(
    messages: int,
    size: int,
    batch: int,
    ack_every: int,
    unsettled: bool = False,
    durable: bool = False,
) -> float:
    """One run on a fresh broker; returns CPU microseconds per message."""
    broker = Broker()
    producer, consumer = _handler(broker, 1), _handler(broker, 2)
    handlers = {1: producer, 2: consumer}

    def route(effects: list[Effect]) -> None:
        for e in effects:
            h = handlers.get(getattr(e, "conn_id", -1))
            if h is not None:
                h.apply(e)

    attach_in = p.Attach(name="s", handle=0, role=p.ROLE_SENDER, target=p.Target(_QUEUE))
    route(producer.receive_data(encode_frame(0, attach_in), 1))
    attach_out = p.Attach(
        name="r", handle=0, role=p.ROLE_RECEIVER, source=p.Source(_QUEUE), snd_settle_mode=0
    )
    flow = p.Flow(
        next_incoming_id=0, incoming_window=_WINDOW, next_outgoing_id=0,
        outgoing_window=_WINDOW, handle=0, delivery_count=0, link_credit=_CREDIT,
    )  # fmt: skip
    route(consumer.receive_data(encode_frame(0, attach_out) + encode_frame(0, flow), 1))
    producer.data_to_send()
    consumer.data_to_send()
    frames = [_transfers(i, batch, size, not unsettled, durable) for i in range(0, messages, batch)]
    stats = broker.stats
    acked = 0
    start = time.process_time()
    for chunk in frames:
        route(producer.receive_data(chunk, 2))
        producer.data_to_send()
        consumer.data_to_send()
        delivered = stats["delivered"]
        if delivered - acked >= ack_every:
            route(consumer.receive_data(_settle_and_flow(acked, delivered - 1), 2))
            acked = delivered
    for _ in range(messages):  # deliveries held back by the credit
        delivered = stats["delivered"]
        if delivered == acked:
            break
        route(consumer.receive_data(_settle_and_flow(acked, delivered - 1), 2))
        consumer.data_to_send()
        acked = delivered
    elapsed = time.process_time() - start
    if acked != messages:
        raise RuntimeError(f"settled {acked} of {messages} messages")
    return elapsed * 1e6 / messages


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n", 1)[0])
    ap.add_argument("--messages", type=int, default=50_000)
    ap.add_argument("--size", type=int, default=16)
    ap.add_argument("--batch", type=int, default=50, help="transfers per read")
    ap.add_argument("--ack-every", type=int, default=250)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--profile", help="write a cProfile of one extra run here")
    ap.add_argument(
        "--unsettled", action="store_true", help="unsettled transfers (the broker settles them)"
    )
    ap.add_argument("--durable", action="store_true", help="a header with durable=true")
    args = ap.parse_args(argv)
    run: Any = (args.messages, args.size, args.batch, args.ack_every, args.unsettled, args.durable)
    results = [run_once(*run) for _ in range(args.rounds)]
    print(
        f"amqp10 hotpath: {args.messages} x {args.size} B, batch {args.batch}, "
        f"settle every {args.ack_every}: cpu_us_per_msg median {statistics.median(results):.2f} "
        f"(runs: {', '.join(f'{r:.2f}' for r in results)})"
    )
    if args.profile:
        prof = cProfile.Profile()
        prof.runcall(run_once, *run)
        prof.dump_stats(args.profile)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
