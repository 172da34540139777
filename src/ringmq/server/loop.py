"""The event loop of a serving process: uvloop when installed, the cyclic-GC settings and the
GIL's switch interval."""

from __future__ import annotations

import asyncio
import gc
import sys
from typing import Final

GC_THRESHOLDS: Final = (20_000, 20, 20)
"""Cyclic-GC thresholds of a serving process (CPython's default is 700, 10, 10).

Every message costs a few container allocations that reference counting frees, so the
default makes the collector run every ~100 messages and, with a backlog of live messages,
rescan the older generations often. Measured with the benchmark driver, scenario (f):
about 355 -> 230 us of broker CPU per published message; (a) about 47 -> 40.
"""


def tune_gc() -> None:
    """Collect cycles less often and never rescan what start-up created (`gc.freeze`)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


SWITCH_INTERVAL_S: Final = 0.001
"""How long a thread waiting for the GIL lets the running one go on (CPython's default: 5 ms).

A serving process runs Python on its loop thread; its other threads (the group commit's
fsync, the default executor's file reads) spend their time in system calls and need the GIL
only briefly, to start and to report back. Behind a busy loop thread each of those takes up
to a switch interval, and an fsync's completion is on every durable confirm's path: with the
default, a 2 ms fsync completed after about 15 ms behind a loop thread running Python
(docs/benchmarks.md, "The GIL's switch interval")."""


def tune_threads() -> None:
    """Let the helper threads take the GIL back sooner (`SWITCH_INTERVAL_S`)."""
    sys.setswitchinterval(SWITCH_INTERVAL_S)


def new_event_loop() -> asyncio.AbstractEventLoop:
    """uvloop when installed, else asyncio's default loop."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
    return loop
