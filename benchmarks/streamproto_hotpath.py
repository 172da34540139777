"""The stream protocol's publish path alone, in process, for callgrind: instructions per message.

One `StreamHandler` on a broker over a `FileStore` (what `ringmq serve --data-dir` runs),
connected and with one publisher, is fed `--frames` publish frames of `--batch` messages of
`--size` bytes, `--per-read` frames per `receive_data` (what one socket read brings). After
each read the server's end of batch is done by hand: the held confirms are drained and
released (`confirm_stored`, as the group commit does once its fsync is done; the fsync itself
is left out: it costs no instruction of this process) and the store's writes are handed to the
OS. So the figure is the broker's CPU per published message: frame cutting, the codec, the
chunk, the segment file's buffer, the confirm frames.

    valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.%p \\
        python -m benchmarks.streamproto_hotpath --frames 200
    valgrind --tool=callgrind python -m benchmarks.streamproto_hotpath --frames 1200
    # instructions per message: (Ir(1200) - Ir(200)) / (1000 * batch)

Without valgrind it prints the wall time per message (informational, noisy on a shared
machine). `--rule written` takes the `written` stream confirm rule's path instead. An older
tree runs it through `PYTHONPATH=<its src>` (the rule then stays its only one, `fsynced`).
"""

from __future__ import annotations

import argparse
import shutil
import struct
import tempfile
import time
from pathlib import Path

from ringmq.adapters.handler import HandlerContext, HandlerLimits, Peer, make_login
from ringmq.adapters.stream import StreamHandler
from ringmq.core.broker import Broker
from ringmq.core.config import BrokerConfig
from ringmq.core.effects import Effect
from ringmq.core.throttle import LoginGuard
from ringmq.storage.store import FileStore

_HEAD = struct.Struct(">IHH")
_MSG = struct.Struct(">QI")
_BODY_SECTION = b"\x00\x53\x75\xb0"  # an AMQP 1.0 data section (vbin32), as rstream sends
NOW = 1_700_000_000_000


def _frame(key: int, body: bytes) -> bytes:
    return _HEAD.pack(len(body) + 4, key, 1) + body


def _str(s: str) -> bytes:
    b = s.encode()
    return struct.pack(">H", len(b)) + b


def _publish_frame(first_id: int, batch: int, body: bytes) -> bytes:
    parts = [b"\x01", struct.pack(">I", batch)]
    for i in range(first_id, first_id + batch):
        parts += (_MSG.pack(i, len(body)), body)
    return _frame(2, b"".join(parts))


def run(frames: int, batch: int, size: int, per_read: int, rule: str) -> float:
    """Publish `frames` frames through a fresh broker; the wall seconds of the publishing."""
    directory = Path(tempfile.mkdtemp(prefix="ringmq-streamproto-cg-"))
    try:
        store = FileStore.open(directory / "store")
        config = BrokerConfig(name_seed=1, delay_persistent_confirms=True)
        if rule != "fsynced":
            from ringmq.core.streamspec import ConfirmRule

            config.stream_confirm = ConfirmRule(rule)
        unwritten = getattr(Broker, "drain_unwritten", None)  # older trees have none
        broker = Broker(config, store=store, now_ms=NOW)
        peer = Peer("127.0.0.1", 40001, "127.0.0.1", 5552)
        ctx = HandlerContext(
            broker=broker,
            conn_id=1,
            peer=peer,
            limits=HandlerLimits(1 << 20, 1 << 20, 2047, 0),
            login=make_login(broker, LoginGuard(), peer, "stream"),
        )
        h = StreamHandler(ctx)

        def feed(data: bytes) -> None:
            effects: list[Effect] = h.receive_data(data, NOW)
            held = broker.drain_unconfirmed() + (unwritten(broker) if unwritten else [])
            for conn_id, channel, seq in held:
                effects += broker.confirm_stored(conn_id, channel, [seq])
            for e in effects:
                if e.conn_id == 1:
                    h.apply(e)
            store.write_out()
            h.data_to_send()

        hello = [
            _frame(17, struct.pack(">II", 1, 0)),
            _frame(18, struct.pack(">I", 2)),
            _frame(19, struct.pack(">I", 3) + _str("PLAIN") + struct.pack(">I", 12)
                   + b"\0guest\0guest"),
            _frame(20, struct.pack(">II", 1 << 20, 0)),
            _frame(21, struct.pack(">I", 4) + _str("/")),
            _frame(13, struct.pack(">I", 5) + _str("s") + struct.pack(">I", 0)),
            _frame(1, struct.pack(">IB", 6, 1) + _str("") + _str("s")),
        ]  # fmt: skip
        for f in hello:
            feed(f)
        body = _BODY_SECTION + struct.pack(">I", size) + b"x" * size
        # one read's frames, sent again and again (no publisher reference: the same publishing
        # ids are not duplicates), so building them adds nothing per message to the count
        read = b"".join(_publish_frame(f * batch, batch, body) for f in range(per_read))
        reads = frames // per_read
        t0 = time.perf_counter()
        for _ in range(reads):
            feed(read)
        elapsed = time.perf_counter() - t0
        store.sync()
        log = broker.vhosts["/"].queues["s"].stream
        assert log is not None
        assert log.index.next_offset == reads * per_read * batch
        store.close()
        return elapsed
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames", type=int, default=1000)
    ap.add_argument("--batch", type=int, default=100)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--per-read", type=int, default=10)
    ap.add_argument("--rule", choices=("fsynced", "written"), default="fsynced")
    args = ap.parse_args()
    elapsed = run(args.frames, args.batch, args.size, args.per_read, args.rule)
    n = args.frames // args.per_read * args.per_read * args.batch
    print(f"{n} messages of {args.size} B: {elapsed / n * 1e6:.2f} us/message (wall)")


if __name__ == "__main__":
    main()
