"""bench_live_bucket.py with per-stage CPU timers (time.thread_time, its
overhead printed and taken off the per-call figures) around the
partition_state path of the buckets' engine: LocalEngine.current (a due
partition's session catch-up, called from StateThrottle.due), StateThrottle.due
as a whole, PartitionModel.state_fields, records.state_record,
BucketProcessor._emit, statelog.save and LocalEngine.advance_watermark.
Run it twice, with output.state_interval_ms at its default and huge: the
difference divided by the extra states is each stage's cost per state.

    python -P bench/bench_state_stages.py bench/bench_live_bucket.py FILE \
        --set monitor.replica_lag_time_max_ms=10000 [--set output.state_interval_ms=N] \
        --batch 100000 --buckets 2 --end
"""

from __future__ import annotations

import runpy
import sys
import time

from isr.engine import local
from isr.model import partition
from isr.stream import operator, statelog, throttle

CLOCK = time.thread_time
STAGES = {  # name: (owner, attribute)
    "current": (local.LocalEngine, "current"),
    "due": (throttle.StateThrottle, "due"),
    "state_fields": (partition.PartitionModel, "state_fields"),
    "state_record": (operator, "state_record"),
    "emit": (operator.BucketProcessor, "_emit"),
    "save": (statelog, "save"),
    "advance": (local.LocalEngine, "advance_watermark"),
}
SPENT = {name: [0.0, 0] for name in STAGES}


def timed(name: str, f):
    def call(*args, **kw):
        t = CLOCK()
        try:
            return f(*args, **kw)
        finally:
            s = SPENT[name]
            s[0] += CLOCK() - t
            s[1] += 1
    return call


def main() -> None:
    for name, (owner, attr) in STAGES.items():
        setattr(owner, attr, timed(name, getattr(owner, attr)))
    n, t = 200_000, CLOCK()
    for _ in range(n):
        CLOCK()
    tick = (CLOCK() - t) / n
    sys.argv = sys.argv[1:]
    try:
        runpy.run_path(sys.argv[0], run_name="__main__")
    finally:
        print(f"timer overhead {tick * 1e6:.2f} us per clock() call")
        for name, (s, c) in SPENT.items():
            print(f"{name:14s} calls {c:9,d}  {s:8.2f} s  "
                  f"{(s - 2 * tick * c) / max(c, 1) * 1e6:8.2f} us/call")


if __name__ == "__main__":
    main()
