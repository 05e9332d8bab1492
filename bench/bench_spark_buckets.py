"""The buckets' part of bench_spark_parts.py alone, for instruction counts
(docs/benchmarks.md, "The Spark operator's own costs"): the same set-up
(admission with the row index, the readers' read + pack), then each of the
2 buckets' `operator._call` on its packed rows, one batch each.

    python bench/bench_spark_buckets.py FILE [time|prof OUT.prof|skip]

`skip` stops before the buckets, so that under valgrind's cachegrind the
buckets' instructions are the difference between a run and a `skip` run.
`prof` profiles the buckets' calls (cProfile) into OUT.prof.
"""

from __future__ import annotations

import cProfile
import json
import os
import pstats
import shutil
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_spark_parts import _State, bucket_frames  # noqa: E402

from isr.config import Settings  # noqa: E402
from isr.stream import files, operator, replay_spark  # noqa: E402
from isr.stream.partitioning import bucket_labels  # noqa: E402
from isr.stream.source import pack_option  # noqa: E402


def main() -> None:
    path, n = os.path.abspath(sys.argv[1]), 2
    mode = sys.argv[2] if len(sys.argv) > 2 else "time"
    settings = Settings()
    settings = settings.model_copy(update={"stream": settings.stream.model_copy(
        update={"state_buckets": n})})
    labels = bucket_labels(n)
    work = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"spark-buckets-{os.getpid()}")
    os.makedirs(work, exist_ok=True)
    admitted = replay_spark.Admission([path], [path], settings, n)
    admitted.save_index(os.path.join(work, "rows.npy"))
    opts = {"paths": json.dumps([path]), "labels": json.dumps([path]),
            "end_ts": str(admitted.end_ts),
            "isr.pack": pack_option(labels, settings.monitor.max_future_ms, False),
            "index": os.path.join(work, "rows.npy"), "rows": json.dumps(admitted.rows)}
    reader = files.LinesStreamReader(opts)
    ranges = reader.partitions({"row": 0}, {"row": reader.total})
    batches = [b for r in ranges for b in reader.read(r)]
    config = operator.job_processor_config(settings, False)
    frames_of = [bucket_frames(batches, label) for label in labels]
    prof = cProfile.Profile() if mode == "prof" else None
    c0 = time.process_time()
    for i, frames in enumerate(frames_of if mode != "skip" else []):
        if prof:
            prof.enable()
        operator._call(operator._processor(config), (i, n), iter(frames), _State(), ("q",))
        if prof:
            prof.disable()
    print(f"buckets {time.process_time() - c0:.2f} CPU s", file=sys.stderr)
    if prof:
        prof.dump_stats(sys.argv[3])
        pstats.Stats(prof).sort_stats("tottime").print_stats(30)
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
