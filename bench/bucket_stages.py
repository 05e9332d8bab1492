"""Exclusive CPU seconds (time.process_time) per stage of the bucket calls
that bench_live_bucket.py makes, in process (run it with
ISR_ENGINE_PROCESS=0): the stage functions (statelog.load/save, the
admission, the queue, the engine's apply, the throttle, the outputs) are
wrapped, a nested stage's time is taken out of its caller's, then the
bench runs with the arguments that follow.

    ISR_ENGINE_PROCESS=0 PYTHONPATH=. python -P bench/bucket_stages.py \\
        bench/bench_live_bucket.py FILE --set monitor.replica_lag_time_max_ms=10000 \\
        --batch 100000 --buckets 2 --end

A stage that returns a generator (LocalEngine.models, the processor's
_models) is charged only for making it: what the generator does is
charged to whoever consumes it (the outputs, or "call: other").
"""
import atexit
import gc  # noqa: F401 (wrapped below)
import inspect
import runpy
import sys
import time

from isr.stream import operator as op, statelog, throttle
from isr.engine import local
from isr.model import partition

acc = {}
stack = []  # the stages being timed, innermost last
tstart = []  # when each began, or last resumed after a nested one

def wrap(owner, name, stage):
    f = getattr(owner, name)
    def w(*a, **k):
        t = time.process_time()
        if stack:
            acc[stack[-1]] = acc.get(stack[-1], 0.0) + t - tstart[-1]
        stack.append(stage); tstart.append(t)
        try:
            return f(*a, **k)
        finally:
            t2 = time.process_time()
            acc[stage] = acc.get(stage, 0.0) + t2 - tstart[-1]
            stack.pop(); tstart.pop()
            if stack:
                tstart[-1] = t2
    setattr(owner, name, staticmethod(w) if isinstance(inspect.getattr_static(owner, name), staticmethod) else w)

wrap(op, "_call", "call: other (worker frames to rows)")
wrap(op, "_inputs", "input: pandas frames -> packs")
wrap(statelog, "load", "load (state row / engine cache)")
wrap(op, "unpack", "input: unpack packs -> Arrow table")
wrap(op, "_admit", "admit: decode + sequence (queue)")
wrap(statelog, "hold_arrived", "queue chunks write")
wrap(local.LocalEngine, "advance_watermark", "apply (domain core)")
wrap(local.LocalEngine, "finish", "apply (domain core)")
wrap(op.BucketProcessor, "_models", "apply: catch-up before shown")
wrap(op.BucketProcessor, "_emit", "outputs: records, decisions")
wrap(op, "state_record", "outputs: state_record")
wrap(partition.PartitionModel, "state_fields", "outputs: state_fields")
wrap(throttle.StateThrottle, "metrics_keys", "throttle: metrics_keys")
wrap(throttle.StateThrottle, "due", "throttle: due")
wrap(throttle.StateThrottle, "take_touched", "throttle: take_touched")
wrap(statelog, "save", "save (statelog)")
wrap(gc, "collect", "gc.collect(0) after the call")
wrap(local.LocalEngine, "models", "apply: catch-up before shown")
wrap(local.LocalEngine, "current", "apply: catch-up before shown")
wrap(statelog, "undefer", "queue: undefer")
wrap(op, "bucket_summary", "outputs: records, decisions")
wrap(local.LocalEngine, "take_decisions", "outputs: records, decisions")

def report():
    tot = sum(acc.values())
    print("\nstage CPU s (exclusive):", file=sys.stderr)
    for k, v in sorted(acc.items(), key=lambda kv: -kv[1]):
        print(f"  {k:45s} {v:7.2f}  {100*v/tot:5.1f} %", file=sys.stderr)
    print(f"  {'total':45s} {tot:7.2f}", file=sys.stderr)
atexit.register(report)
sys.argv = [sys.argv[1]] + sys.argv[2:]
runpy.run_path(sys.argv[0], run_name="__main__")
