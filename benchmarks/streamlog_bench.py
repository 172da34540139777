"""A stream queue's segment files in process: write, recover, read back; time and peak RSS.

    python -m benchmarks.streamlog_bench --mib 256          # 1 KiB messages, one per chunk
    python -m benchmarks.streamlog_bench --mib 1024 --size 100
    python -m benchmarks.streamlog_bench --mib 1024 --size 100 --chunk 100   # stream protocol

Writes `--mib` MiB of messages of `--size` bytes to a `FileStreamLog` in a temporary
directory (one chunk per message, as one publish each), reopens it (recovery: chunk headers of
every segment, the last segment's chunks CRC-checked) and reads every message back from the
first offset in reads of 1,000. Prints each step's time and msg/s, and the process's peak RSS,
which the stream's size must not move (readers read through fixed-size blocks).

With `--chunk N` the messages go as a stream-protocol publish stores them (`append_chunk`:
N entries a chunk, kept as they arrived) and are read back as a stream-protocol consumer with
a credit of one chunk reads them (`read_chunks(offset, 1)`, chunk after chunk); the read's
CPU time (`time.process_time`) is printed too.
"""

from __future__ import annotations

import argparse
import resource
import shutil
import tempfile
import time
from pathlib import Path

from ringmq.core.message import Message
from ringmq.core.streamlog import StreamSpec
from ringmq.storage.streamfiles import FileStreamLog


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mib", type=int, default=256)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--segment-mib", type=int, default=500)
    ap.add_argument("--chunk", type=int, default=0, help="entries a stream-protocol chunk")
    args = ap.parse_args()
    spec = StreamSpec(max_segment_bytes=args.segment_mib * 1024 * 1024)
    directory = Path(tempfile.mkdtemp(prefix="ringmq-streamlog-"))
    try:
        log = FileStreamLog(directory, spec)
        msg = Message("", "s", b"", b"x" * args.size)
        n = args.mib * 1024 * 1024 // (args.size + 100)
        t = time.perf_counter()
        if args.chunk:  # stream-protocol entries: [u32 size][AMQP 1.0 data section]
            body = b"\x00\x53\x75\xb0" + args.size.to_bytes(4, "big") + b"x" * args.size
            data = (len(body).to_bytes(4, "big") + body) * args.chunk
            n -= n % args.chunk
            for i in range(0, n, args.chunk):
                log.append_chunk(data, args.chunk, args.chunk, i)
                if i % 1000 < args.chunk:
                    log.write_out()
        for i in range(0 if args.chunk else n):
            log.append((msg,), i)
            if i % 1000 == 0:
                log.write_out()
        log.close()
        on_disk = sum(p.stat().st_size for p in directory.iterdir()) / 2**20
        dt = time.perf_counter() - t
        print(f"write   {n:,} msgs, {on_disk:.0f} MiB: {dt:.1f} s, {n / dt:,.0f} msg/s")
        t = time.perf_counter()
        log = FileStreamLog(directory, spec)
        dt = time.perf_counter() - t
        segs = len(log.index.segments)
        print(f"recover {segs} segments: {dt:.2f} s, peak RSS {_rss_mib():.0f} MiB")
        t = time.perf_counter()
        got, offset = 0, 0
        if args.chunk:
            cpu = time.process_time()
            while chunks := log.read_chunks(offset, 1):
                first, count, _ = chunks[-1]
                got += count
                offset = first + count
            dt, cpu = time.perf_counter() - t, time.process_time() - cpu
            print(
                f"read    {got:,} msgs in chunks: {dt:.1f} s, {got / dt:,.0f} msg/s,"
                f" CPU {cpu:.2f} s ({got / cpu:,.0f} msg/s of CPU), peak RSS {_rss_mib():.0f} MiB"
            )
            log.close()
            return
        while batch := log.read(offset, 1000):
            got += len(batch)
            offset = batch[-1][0] + 1
        dt = time.perf_counter() - t
        print(
            f"read    {got:,} msgs: {dt:.1f} s, {got / dt:,.0f} msg/s,"
            f" peak RSS {_rss_mib():.0f} MiB"
        )
        log.close()
    finally:
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
