"""Run a benchmark module's `main()` with what its imports created frozen out of the cyclic GC.

    cd <tree> && PYTHONPATH=<tree>/src:<tree> python <this tree>/benchmarks/frozen.py \\
        benchmarks.hotpath_bench --messages 20000 --rounds 1 [--mode publish]

(by path, so that it runs an older tree's benchmark too: the module comes from PYTHONPATH)

Why: an instruction count per message taken as (T(2N) - T(N)) / N under callgrind assumes the
cost grows linearly with N, but the collector's full collections are discrete events whose cost
is the size of the whole heap: one more of them inside the window (a tree that imports more
modules crosses the threshold at another moment) moves the figure by 2,000 instructions per
message at N=10,000 without any change in the per-message path. ringmq's server loop freezes
what start-up created (`server/loop.py`, `gc.freeze`), so the benchmarks' in-process harness
does not otherwise see what the server sees. This wrapper imports the benchmark (and with it
the broker), collects and freezes, then runs it: the same for any tree, old or new, without
changing the tree (the module it runs comes from PYTHONPATH).
"""

from __future__ import annotations

import gc
import importlib
import sys


def main() -> int:
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    name = sys.argv[1]
    sys.argv = [name, *sys.argv[2:]]
    module = importlib.import_module(name)
    gc.collect()
    gc.freeze()
    result: int = module.main()
    return result


if __name__ == "__main__":
    raise SystemExit(main())
