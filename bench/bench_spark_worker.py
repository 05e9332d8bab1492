"""What `isr replay --engine spark` spends per event in its Python workers,
without Spark: the file source's packing of a file from the admission's row
index (packrows.packed_rows), the decode the buckets do again
(decode_many), and each bucket's `BucketProcessor.process` of the whole
file in one batch with the end-of-input row, as a `--no-state` replay runs
it, plus the pandas DataFrame of its output rows (operator.process_bucket).

    python bench/bench_spark_worker.py FILE [--buckets 2] [--profile]

CPU seconds (time.process_time) of each part; run it on a big and a small
file and take the difference, as for the whole runs (docs/benchmarks.md,
issue 23, branch `sparkworker`). --profile: a cProfile of the buckets.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import tempfile
import time

import numpy as np

from isr.config import Settings
from isr.contract.decode import decode_many
from isr.gc_tuning import fewer_gc_passes
from isr.stream.files import LineRange
from isr.stream.operator import BucketProcessor, OutputRecord
from isr.stream.packing import END_OF_INPUT, Packer, hold_of, unpack
from isr.stream.packrows import packed_rows
from isr.stream.replay_spark import Admission


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file")
    ap.add_argument("--buckets", type=int, default=2)
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()
    settings = Settings()
    monitor = settings.monitor
    labels = list(range(args.buckets))
    with tempfile.TemporaryDirectory() as tmp:
        index = os.path.join(tmp, "rows.npy")
        Admission([args.file], ["in"], settings, args.buckets).save_index(index)
        n = len(np.load(index, mmap_mode="r"))
        r = LineRange(args.file, "in", 0, 1, n, 0, False, 0, frozenset(),
                      settings.input.max_line_bytes, index, n)
        t = time.process_time()
        batches = list(packed_rows(r, {"labels": labels, "max_future_ms": monitor.max_future_ms}))
        reader = time.process_time() - t
    lines = [line.rstrip(b"\r\n") for line in open(args.file, "rb") if line.strip()]
    t = time.process_time()
    decode_many(lines)
    decode = time.process_time() - t
    packer = Packer(labels, monitor.max_future_ms)
    import pandas as pd
    spent, rows_out = 0.0, 0
    prof = cProfile.Profile() if args.profile else None
    for b, label in enumerate(labels):
        packs = [blob for batch in batches for lab, blob in zip(
            batch.column("bucket").to_pylist(), batch.column("pack").to_pylist()) if lab == label]
        summaries = [s for batch in batches for lab, s in zip(
            batch.column("bucket").to_pylist(), batch.column("summary").to_pylist()) if lab == label]
        last = max((h for h in [hold_of(summaries)] if h is not None), default=0)
        (_l, end, _s) = packer.pack([last], [END_OF_INPUT], ["in"], [-1], [n], None)[b]
        p = BucketProcessor(monitor, 0)
        with fewer_gc_passes():
            bucket = p.restore(None, (b, args.buckets))
            t = time.process_time()
            if prof:
                prof.enable()
            rows = p.process(b, bucket, unpack(packs + [end]), hold_of(summaries))
            pd.DataFrame(rows, columns=list(OutputRecord._fields))
            if prof:
                prof.disable()
            spent += time.process_time() - t
        rows_out += len(rows)
    print(f"{n:,} rows, {args.buckets} buckets: reader packing {reader:.2f} CPU s, "
          f"a decode of every line {decode:.2f} CPU s, buckets' process {spent:.2f} CPU s "
          f"({rows_out:,} output rows)")
    if prof:
        pstats.Stats(prof).sort_stats("cumulative").print_stats(30)


if __name__ == "__main__":
    main()
