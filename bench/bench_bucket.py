"""One state bucket through a run of micro-batches, without Spark: what the
stateful operator does per batch (restore the bucket, apply the batch, save
it) and what that costs per event and per partition.

    python bench/bench_bucket.py --partitions 10000 --events-per-partition 60 --batches 12

Events of gen.stream (10 per partition by default) are packed as the packing
stage does and cut into batches; each batch restores the bucket from the
bytes the last one saved, processes its records (the watermark moves to the
batch's largest ts minus `monitor.allowed_lateness_ms`, 5 s) and saves it.
With 5 s of lateness every event waits in the saved queue for several
batches, as in the live job. A run needs more than 5 s of event time (10
rounds) for any event to be applied.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import orjson

sys.path.insert(0, os.path.dirname(__file__))
from gen import stream  # noqa: E402

from isr.config import MonitorSettings  # noqa: E402
from isr.gc_tuning import fewer_gc_passes  # noqa: E402
from isr.stream.operator import BucketProcessor  # noqa: E402
from isr.stream.packing import Packer, hold_of, unpack  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--partitions", type=int, default=25000)
    ap.add_argument("--events-per-partition", type=int, default=10)
    ap.add_argument("--batches", type=int, default=8)
    ap.add_argument("--round-ms", type=int, default=500)
    ap.add_argument("--state-interval-ms", type=int, default=0,
                    help="output.state_interval_ms (0: a partition_state per touched partition)")
    ap.add_argument("--lateness", type=int, default=5000, help="monitor.allowed_lateness_ms")
    args = ap.parse_args()
    n = args.partitions
    values = [orjson.dumps(e) for e in stream(n, n * args.events_per_partition,
                                              round_ms=args.round_ms)]
    size = -(-len(values) // args.batches)
    monitor = MonitorSettings(allowed_lateness_ms=args.lateness)
    p = BucketProcessor(monitor, args.state_interval_ms)
    packer = Packer([0], monitor.max_future_ms)
    blob = None
    spent = {"restore": 0.0, "process": 0.0, "save": 0.0}
    out_rows = queued = 0
    for start in range(0, len(values), size):
        chunk = values[start:start + size]
        offsets = list(range(start, start + len(chunk)))
        (_label, packed, summary), = packer.pack([None] * len(chunk), chunk, ["in"] * len(chunk),
                                                 [0] * len(chunk), offsets, None,
                                                 [False] * len(chunk))
        t0 = time.perf_counter()
        bucket = p.restore(blob, (0, 1))
        t1 = time.perf_counter()
        out_rows += len(p.process(0, bucket, unpack([packed]), hold_of([summary])))
        t2 = time.perf_counter()
        blob = p.save(bucket)
        t3 = time.perf_counter()
        queued += len(bucket.engine.sequencer.queued)
        spent["restore"] += t1 - t0
        spent["process"] += t2 - t1
        spent["save"] += t3 - t2
    events = len(values)
    total = sum(spent.values())
    per = ", ".join(f"{k} {v * 1e6 / events:.1f}" for k, v in spent.items())
    print(f"{n} partitions, {events} events in {args.batches} batches (round {args.round_ms} ms):"
          f" {events / total:,.0f} events/s; us/event: {per}; "
          f"{queued // args.batches:,} events queued per batch on average; "
          f"last state {len(blob) / n:.0f} bytes/partition; {out_rows} output rows")


if __name__ == "__main__":
    with fewer_gc_passes():  # as the operator runs (operator.make_state_function)
        main()
