"""The stream source's worker-side decoding, in process: `stored.decode` and `stored.to_batch`.

A `FileStreamLog` in a temporary directory holds N messages of SIZE bytes, one chunk each (as
AMQP and HTTP publishes store them); its `read_stored` answers for steps of 50 000 offsets
(the executors' `_READ_STEP`) are decoded into Arrow record batches as a Spark task does, and
the CPU microseconds a message of each step are printed (`time.process_time`, median of the
rounds). With `--baseline-src DIR` (another tree's `src`, e.g. a `git worktree` of main) that
tree's `stored.py` runs on the same answers, alternated round by round with this one's, and
the batches of both are checked equal.

    python benchmarks/stored_decode_bench.py --messages 1000000 --size 100 --rounds 7 \\
        [--baseline-src /tmp/main/src]
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType

from ringmq.connector.spark import stored
from ringmq.core.message import Message
from ringmq.core.streamlog import StreamSpec
from ringmq.storage.streamfiles import FileStreamLog

_STEP = 50_000


def _module_at(src: Path) -> ModuleType:
    path = src / "ringmq" / "connector" / "spark" / "stored.py"
    spec = importlib.util.spec_from_file_location("baseline_stored", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--baseline-src", type=Path, help="another tree's src directory")
    args = ap.parse_args()
    import numpy as np

    bodies = np.random.default_rng(args.size).bytes(args.messages * args.size)
    with tempfile.TemporaryDirectory(prefix="stored-bench-") as tmp:
        log = FileStreamLog(Path(tmp) / "s", StreamSpec(), "s")
        for i in range(args.messages):
            body = bodies[i * args.size : (i + 1) * args.size]
            log.append((Message("", "s", b"\x00\x00", body),), 1_700_000_000_000)
        steps = [(a, min(args.messages, a + _STEP)) for a in range(0, args.messages, _STEP)]
        answers = [(a, b, b"".join(log.read_stored(a, b))) for a, b in steps]
    trees = {"this": stored}
    if args.baseline_src is not None:
        trees = {"baseline": _module_at(args.baseline_src), **trees}
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in trees}
    for r in range(args.rounds + 1):  # the first round warms up (page faults, first calls)
        for name, module in trees.items():
            t0 = time.process_time()
            runs = [(data, module.decode(data, a, b)) for a, b, data in answers]
            t1 = time.process_time()
            for data, pieces in runs:
                for piece in pieces:
                    module.to_batch("s", data, piece)
            t2 = time.process_time()
            if r:
                times[name].append((t1 - t0, t2 - t1))
    n = args.messages
    for name, rows in times.items():
        decode = statistics.median(d for d, _ in rows) / n * 1e6
        build = statistics.median(b for _, b in rows) / n * 1e6
        print(f"{name:9} decode {decode:.3f} us/msg  to_batch {build:.3f} us/msg")
    if len(trees) > 1:
        a, b, data = answers[-1]
        got = [[m.to_batch("s", data, p) for p in m.decode(data, a, b)] for m in trees.values()]
        assert all(x.equals(y) for x, y in zip(*got, strict=True)), "the trees' batches differ"
        print("batches equal")


if __name__ == "__main__":
    main()
