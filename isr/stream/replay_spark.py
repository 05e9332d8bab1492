"""`isr replay --engine spark`: the streaming job over files, bounded
(Trigger.AvailableNow), collecting its output on the driver. It must give
byte-identical decisions to `--engine local`."""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from collections import Counter
from typing import Optional

from isr.config import Settings
from isr.contract import DECISION_TYPES, Rejection
from isr.contract.decode import decode_many
from isr.contract.decisions import output_order
from isr.contract.decisions import DeadLetter
from isr.contract.records import INTERNAL_KINDS, SUMMARY, OutputRecord
from isr.engine.sequencer import Sequencer
from isr.engine.summary import summarize
from isr.gc_tuning import fewer_gc_passes
from isr.linecap import Overlong, block_lines
from isr.pipeline.results import ReplayResult, ReplayStats, too_long


class Admission:
    """What the local engine's sequencer admits, judged once over the whole
    input before the job runs: the late and future lines become dead letters
    here and never reach the job, whatever its micro-batches, and the
    largest admitted ts is where the job's last checks run (`end_ts`).
    Lines are decoded in chunks (`decode_many`, the same verdicts as
    `decode` one at a time) and offered in file order, as `isr replay` does."""

    CHUNK = 8192  # lines decoded at a time

    def __init__(self, paths: list[str], labels: list[str], settings: Settings) -> None:
        monitor = settings.monitor
        self.sequencer = Sequencer(monitor.allowed_lateness_ms, monitor.max_future_ms)
        self.lines = 0
        self.skip: list[int] = []  # row indices over all files
        self.dead: list[DeadLetter] = []
        with fewer_gc_passes():  # as `isr replay`: the collector would walk every chunk
            for path, label in zip(paths, labels):
                self._read(path, label, settings.input.max_line_bytes)
        self.end_ts = self.sequencer.max_ts

    def _read(self, path: str, label: str, max_line_bytes: int) -> None:
        chunk: list[tuple[int, int, bytes]] = []  # (row index, line number, raw)
        with open(path, "rb") as f:
            # Read as the file source reads it (files.line_starts, line_columns).
            for number, raw in enumerate(block_lines(f, max_line_bytes), 1):
                if isinstance(raw, Overlong):  # never read, never reaches the job
                    self.skip.append(self.lines)
                    self.lines += 1
                    self.dead.append(too_long(label, number, raw))
                    continue
                if not raw.strip():
                    continue
                chunk.append((self.lines, number, raw.rstrip(b"\r\n")))
                self.lines += 1
                if len(chunk) >= self.CHUNK:
                    self._judge(chunk, label)
                    chunk = []
        self._judge(chunk, label)

    def _judge(self, chunk: list[tuple[int, int, bytes]], label: str) -> None:
        sequencer = self.sequencer
        offer = sequencer.offer
        for (index, number, raw), ev in zip(chunk, decode_many([c[2] for c in chunk])):
            if isinstance(ev, Rejection):
                continue  # the job dead-letters it itself
            verdict = offer(ev.ts, index, None)
            if verdict is not None:
                self.skip.append(index)
                self.dead.append(DeadLetter.of(label, number, raw,
                                               sequencer.refusal(verdict, ev.ts), verdict))
        sequencer.queued.clear()  # only the admission matters here


def replay_spark(sources: list[str], settings: Settings, spark=None,
                 max_offsets_per_trigger: Optional[int] = None) -> ReplayResult:
    from isr.stream.files import LinesDataSource
    from isr.stream.job import packing_reader, spark_session, start

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
        admitted = Admission(paths, labels, settings)
        skip = os.path.join(workdir, "skip.json")
        with open(skip, "w") as f:
            json.dump(admitted.skip, f)
        reader = (spark.readStream.format("isr_lines").option("paths", json.dumps(paths))
                  .option("labels", json.dumps(labels)).option("end_ts", str(admitted.end_ts))
                  .option("skip", skip)
                  .option("max_line_bytes", str(settings.input.max_line_bytes)))
        if max_offsets_per_trigger:
            reader = reader.option("maxOffsetsPerTrigger", str(max_offsets_per_trigger))
        rows: list[OutputRecord] = []
        query = start(spark, settings, lambda _id, batch: rows.extend(batch),
                      packed_source=lambda s: packing_reader(reader, s, live=False).load(),
                      trigger={"availableNow": True},
                      checkpoint=os.path.join(workdir, "checkpoint"), live=False)
        query.awaitTermination()
        return collect(rows, settings, admitted.lines, admitted.dead)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def collect(records: list[OutputRecord], settings: Settings, lines: int = 0,
            dead: Optional[list] = None) -> ReplayResult:
    """Turn the job's output records (and the dead letters judged before)
    into what `isr replay` prints."""
    decisions, states, stats = [], {}, {}
    anomalies: Counter = Counter()
    dead = list(dead or [])
    for r in records:
        kind, value = r.kind, r.value
        if kind in INTERNAL_KINDS:
            if kind != SUMMARY:
                continue
            summary = json.loads(value)  # operator.bucket_summary
            for policy, numbers in summary["models"].items():
                total = stats.setdefault(policy, [0, 0, 0])
                for i, n in enumerate(numbers):
                    total[i] += n
            anomalies.update(summary["session_anomalies"])  # each counted in one bucket
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
    replay_stats = ReplayStats(lines=lines, accepted=lines - len(dead),
                               session_anomalies=anomalies)
    for d in dead:
        replay_stats.dead_letters[d.reason_class] += 1
    policies = list(settings.monitor.policy)
    return ReplayResult(decisions, final, dead, replay_stats, summarize(policies, decisions, stats))
