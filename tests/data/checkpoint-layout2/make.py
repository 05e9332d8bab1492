"""Writes this directory's checkpoint with the state layout of the time (see
README.md): the streaming job over input.jsonl (fetch sessions), stopped by
a failing sink at batch STOP_AT, as a crash would stop it.

    PYTHONPATH=. PYSPARK_PYTHON=.venv/bin/python .venv/bin/python \
        tests/data/checkpoint-layout2/make.py
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "integration"))
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

import workload  # noqa: E402

from isr.config import load_settings  # noqa: E402

# What the restart test (tests/integration/test_state_layout.py) runs with too.
SETTINGS = workload.BASE + ["monitor.policy=kafka,kip16", "stream.state_buckets=2"]
ROWS_PER_BATCH = 150
STOP_AT = 5  # batches 0..4 are committed, batch 5 fails in the sink


class Stop(Exception):
    pass


def query(spark, settings, input_path: Path, checkpoint: Path, write_batch):
    """The job over the input file, as `isr replay --engine spark` runs it."""
    from isr.stream.files import LinesDataSource
    from isr.stream.job import packing_reader, start
    from isr.stream.replay_spark import Admission

    spark.dataSource.register(LinesDataSource)
    admitted = Admission([str(input_path)], ["input.jsonl"], settings)
    skip = checkpoint.parent / "skip.json"
    skip.write_text(json.dumps(admitted.skip))
    reader = (spark.readStream.format("isr_lines")
              .option("paths", json.dumps([str(input_path)]))
              .option("labels", json.dumps(["input.jsonl"]))
              .option("end_ts", str(admitted.end_ts)).option("skip", str(skip))
              .option("maxOffsetsPerTrigger", str(ROWS_PER_BATCH)))
    return start(spark, settings, write_batch,
                 packed_source=lambda s: packing_reader(reader, s, live=False).load(),
                 trigger={"availableNow": True}, checkpoint=str(checkpoint), live=False)


def main() -> None:
    from isr.stream.job import spark_session

    settings = load_settings(None, SETTINGS)
    input_path = HERE / "input.jsonl"
    workload.write_file(input_path, workload.session_lines())
    checkpoint = HERE / "checkpoint"
    shutil.rmtree(checkpoint, ignore_errors=True)
    spark = spark_session(settings, "local[2]", "isr-make-checkpoint")
    outputs = []

    def write_batch(batch_id, records):
        if batch_id == STOP_AT:
            raise Stop(f"stopped at batch {batch_id}")
        outputs.extend([batch_id, *r] for r in records)

    q = query(spark, settings, input_path, checkpoint, write_batch)
    try:
        q.awaitTermination()
    except Exception as exc:  # noqa: BLE001 - the sink's Stop, through Spark
        assert "stopped at batch" in str(exc), exc
    with open(HERE / "outputs.jsonl", "w") as f:
        for row in outputs:
            f.write(json.dumps(row) + "\n")
    (checkpoint.parent / "skip.json").unlink()
    print(f"{len(outputs)} output records of batches 0..{STOP_AT - 1}")


if __name__ == "__main__":
    main()
