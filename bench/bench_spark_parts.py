"""The parts of `isr replay --engine spark` without Spark, CPU seconds of
each, in one process: the driver's admission (with the row index), the file
source's planning (its line index) and read + pack of each range, each
bucket's one batch (`operator._call`: unpack, process, save), and with
--local the local replay of the same file, for comparison.

    python bench/bench_spark_parts.py events.jsonl [--local] [--buckets 2]

(docs/benchmarks.md, "The Spark path, decode once". It also runs on a tree
from before the row index: then the reader decodes every line.)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time

import pandas as pd

from isr.config import Settings
from isr.stream import files, operator, replay_spark
from isr.stream.partitioning import bucket_labels
from isr.stream.source import pack_option


class _State:
    exists = False

    def update(self, value) -> None:
        self.value = value


def bucket_frames(batches: list, label) -> list:
    """The packed batches' rows of one bucket, as the pandas frames Spark
    hands its stateful function."""
    frames = []
    for b in batches:
        d = b.to_pydict()
        mine = [k for k, x in enumerate(d["bucket"]) if x == label]
        frames.append(pd.DataFrame({"pack": [d["pack"][k] for k in mine],
                                    "summary": [d["summary"][k] for k in mine]}))
    return frames


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file")
    ap.add_argument("--buckets", type=int, default=2)
    ap.add_argument("--local", action="store_true")
    args = ap.parse_args()
    path, n = os.path.abspath(args.file), args.buckets
    settings = Settings()
    settings = settings.model_copy(update={"stream": settings.stream.model_copy(
        update={"state_buckets": n})})
    labels = bucket_labels(n)
    spent: dict[str, float] = {}
    work = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"spark-parts-{os.getpid()}")
    os.makedirs(work, exist_ok=True)
    c0 = time.process_time()
    try:
        admitted = replay_spark.Admission([path], [path], settings, n)
    except TypeError:  # a tree without the row index
        admitted = replay_spark.Admission([path], [path], settings)
    opts = {"paths": json.dumps([path]), "labels": json.dumps([path]),
            "end_ts": str(admitted.end_ts),
            "isr.pack": pack_option(labels, settings.monitor.max_future_ms, False)}
    if hasattr(admitted, "save_index"):
        admitted.save_index(os.path.join(work, "rows.npy"))
        opts.update({"index": os.path.join(work, "rows.npy"), "rows": json.dumps(admitted.rows)})
    else:
        with open(os.path.join(work, "skip.json"), "w") as f:
            json.dump(admitted.skip, f)
        opts["skip"] = os.path.join(work, "skip.json")
    spent["admission"] = time.process_time() - c0
    c0 = time.process_time()
    reader = files.LinesStreamReader(opts)
    ranges = reader.partitions({"row": 0}, {"row": reader.total})
    spent["line index"] = time.process_time() - c0
    c0 = time.process_time()
    batches = [b for r in ranges for b in reader.read(r)]
    spent["read + pack"] = time.process_time() - c0
    config = operator.job_processor_config(settings, False)
    for i, label in enumerate(labels):
        frames = bucket_frames(batches, label)
        c0 = time.process_time()
        operator._call(operator._processor(config), (i, n), iter(frames), _State(), ("q",))
        spent[f"bucket {i}"] = time.process_time() - c0
    shutil.rmtree(work, ignore_errors=True)
    total = sum(spent.values())
    print(", ".join(f"{k} {v:.2f}" for k, v in spent.items())
          + f"; total {total:.2f} CPU s, {total / admitted.lines * 1e6:.2f} us per line")
    if args.local:
        from isr.pipeline.local import replay
        c0 = time.process_time()
        replay([path], settings.monitor)
        local = time.process_time() - c0
        print(f"local replay {local:.2f} CPU s, {local / admitted.lines * 1e6:.2f} us per line")


if __name__ == "__main__":
    main()
