"""Fewer cyclic garbage collector passes while the engine runs (replay and
the Spark job's buckets).

The engine allocates an object per event while holding many live ones
(partition models, queued events); with CPython's default thresholds the
cyclic GC then walks that heap again and again: ~25 % of a replay and ~40 %
of a Spark bucket's work here (docs/benchmarks.md). Nothing the engine keeps
relies on prompt cycle collection.
"""

from __future__ import annotations

import gc
from contextlib import contextmanager


@contextmanager
def fewer_gc_passes():
    before = gc.get_threshold()
    gc.set_threshold(100_000, 50, 50)
    try:
        yield
    finally:
        gc.set_threshold(*before)
