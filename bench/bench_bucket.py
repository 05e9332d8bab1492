"""One state bucket's work per micro-batch, without Spark: what grows with
the partitions a bucket holds and what grows with the events of a batch.

    python bench/bench_bucket.py --partitions 25000 --round-ms 500

Applies 10 events per partition (gen.stream) through the bucket's engine,
moves the watermark, then times what the Spark operator does around it for
every batch: save the bucket (snapshot + pickle + zlib), restore it, and the
partition_state views of the partitions the batch touched.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from gen import stream  # noqa: E402

from isr.config import MonitorSettings  # noqa: E402
from isr.contract import validate  # noqa: E402
from isr.stream.operator import BucketProcessor  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--partitions", type=int, default=25000)
    ap.add_argument("--round-ms", type=int, default=500)
    args = ap.parse_args()
    n = args.partitions
    events = [validate(e) for e in stream(n, n * 10, round_ms=args.round_ms)]
    p = BucketProcessor(MonitorSettings())
    bucket = p.restore(None, (0, 1))
    start = time.perf_counter()
    for seq, e in enumerate(events):
        bucket.engine.submit(e, seq)
    bucket.engine.advance_watermark(events[-1].ts - 1000)
    applied = time.perf_counter()
    blob = p.save(bucket)
    saved = time.perf_counter()
    p.restore(blob, (0, 1))
    restored = time.perf_counter()
    views = [m.view() for key in bucket.touched.take() for m in p._models(bucket.engine, key)]
    viewed = time.perf_counter()
    print(f"{n} partitions, {len(events)} events (round {args.round_ms} ms): "
          f"apply {(applied - start) * 1e6 / len(events):.1f} us/event; per partition: "
          f"save {(saved - applied) * 1e6 / n:.1f} us, restore {(restored - saved) * 1e6 / n:.1f}"
          f" us, {len(views) // n} view(s) {(viewed - restored) * 1e6 / n:.1f} us; "
          f"state {len(blob) / n:.0f} bytes/partition")


if __name__ == "__main__":
    main()
