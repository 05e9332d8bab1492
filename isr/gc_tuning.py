"""Fewer cyclic garbage collector passes while the engine runs, or none
(`isr replay`, a Spark bucket's call).

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


@contextmanager
def no_gc_passes():
    """No cyclic GC pass while a bounded run (`isr replay`) works, and none
    owed for what it leaves. Its engine makes no cyclic garbage per event
    (the passes of `fewer_gc_passes` found ~600 objects in a 20 k-partition
    replay) and is freed by reference counting at the end
    (`LocalEngine.close`). Yet each pass walks the young objects, and the
    models are hundreds of thousands of them: passes took ~4 s of 21 at the
    start of a 100 k-partition cluster (docs/benchmarks.md, "The start and
    the end"). At the end, freeze + unfreeze moves what survived (the
    results) to the oldest generation and clears the young generation's
    count, so no pass over them comes due at once; any cyclic garbage of the
    run is collected at the next full pass, as it would have been. (Unfreezing
    also thaws what a caller froze before; nothing in this project freezes.)"""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        gc.unfreeze()
        if enabled:
            gc.enable()


# A long-lived process's calls (`no_gc_passes_in_call`) leave their young
# objects to the oldest generation unwalked; one full pass every this many
# calls finds whatever cyclic garbage they made.
FULL_PASS_EVERY = 256
_calls = 0


@contextmanager
def no_gc_passes_in_call():
    """No cyclic GC pass while a Spark bucket's call runs (operator._call)
    or the driver's sinks take a batch: with `fewer_gc_passes` its passes
    took ~0.6 CPU s per 1 M events, 6 % of the call, mostly walking the
    batch's queued events again and again (docs/benchmarks.md, "The Spark
    operator's own costs"). At the end nothing is walked either: freeze +
    unfreeze moves what the call left to the oldest generation (a young
    pass over it took 60-150 ms a call at 50 k partitions a bucket, 3 % of
    an engine process, and found nothing), and every FULL_PASS_EVERY calls
    one full pass collects the cyclic garbage of the calls before (none
    measured at 100 k partitions, a few dozen objects in some calls
    earlier), so a long-lived worker never holds more than a few hundred
    calls' worth (docs/benchmarks.md, issue 23, "The young pass after each
    call")."""
    global _calls
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.freeze()
            gc.unfreeze()
            _calls += 1
            if _calls % FULL_PASS_EVERY == 0:
                gc.collect()
            gc.enable()
