"""`isr replay --engine spark`: the streaming job over files, bounded
(Trigger.AvailableNow), collecting its output on the driver. It must give
byte-identical decisions to `--engine local`."""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from typing import Optional

from isr.config import Settings
from isr.contract import DECISION_TYPES, Rejection, decode
from isr.contract.decisions import output_order
from isr.contract.records import SUMMARY, OutputRecord
from isr.engine.summary import summarize
from isr.replay import ReplayResult, ReplayStats


def _scan(paths: list[str]) -> tuple[int, int]:
    """(largest ts of a valid event, number of lines). The local engine runs
    its last checks at that ts; the Spark job is told so at end of input."""
    top, lines = -1, 0
    for path in paths:
        with open(path, "rb") as f:
            for raw in f:
                if raw.strip():
                    lines += 1
                    ev = decode(raw.rstrip(b"\r\n"))
                    if not isinstance(ev, Rejection) and ev.ts > top:
                        top = ev.ts
    return top, lines


def replay_spark(sources: list[str], settings: Settings, spark=None,
                 max_offsets_per_trigger: Optional[int] = None) -> ReplayResult:
    from isr.stream.files import LinesDataSource
    from isr.stream.job import spark_session, start

    workdir = tempfile.mkdtemp(prefix="isr-replay-")
    try:
        paths, labels = [], []
        for name in sources:
            if name == "-":  # the stream needs a file it can read twice
                path = os.path.join(workdir, "stdin.jsonl")
                with open(path, "wb") as f:
                    shutil.copyfileobj(sys.stdin.buffer, f)
                paths.append(path)
            else:
                paths.append(os.path.abspath(name))
            labels.append(name)
        spark = spark or spark_session(settings, settings.stream.master, "isr-replay")
        spark.dataSource.register(LinesDataSource)
        end_ts, lines = _scan(paths)
        reader = (spark.readStream.format("isr_lines").option("paths", json.dumps(paths))
                  .option("labels", json.dumps(labels)).option("end_ts", str(end_ts)))
        if max_offsets_per_trigger:
            reader = reader.option("maxOffsetsPerTrigger", str(max_offsets_per_trigger))
        source_df = reader.load().select("key", "value", "topic", "partition", "offset")
        rows: list[tuple] = []
        query = start(spark, settings, lambda _id, batch: rows.extend(batch),
                      source_df=source_df, trigger={"availableNow": True},
                      checkpoint=os.path.join(workdir, "checkpoint"))
        query.awaitTermination()
        return collect(rows, settings, lines)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def collect(records: list[OutputRecord], settings: Settings, lines: int = 0) -> ReplayResult:
    """Turn the job's output records into what `isr replay` prints."""
    decisions, states, dead, stats = [], {}, [], {}
    for r in records:
        kind, value = r.kind, r.value
        if kind == SUMMARY:
            for policy, numbers in json.loads(value).items():
                total = stats.setdefault(policy, [0, 0, 0])
                for i, n in enumerate(numbers):
                    total[i] += n
            continue
        record = DECISION_TYPES[kind].model_validate_json(value)
        if kind == "partition_state":
            states[(record.policy, record.cluster, record.topic, record.partition)] = record
        elif kind == "dead_letter":
            dead.append(record)
        else:
            decisions.append(record)
    decisions.sort(key=output_order)
    order = {p: i for i, p in enumerate(settings.monitor.policy)}
    final = [states[k] for k in sorted(states, key=lambda k: (order[k[0]], k[1:]))]
    dead.sort(key=lambda d: (d.source, d.offset))
    replay_stats = ReplayStats(lines=lines, accepted=lines - len(dead))
    for d in dead:
        replay_stats.dead_letters[d.reason_class] += 1
    policies = list(settings.monitor.policy)
    return ReplayResult(decisions, final, dead, replay_stats, summarize(policies, decisions, stats))
