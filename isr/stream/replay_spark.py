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
from operator import attrgetter
from typing import Any, Optional

import numpy as np

from isr.config import Settings
from isr.contract import DECISION_TYPES, Rejection
from isr.contract.decode import decode_many
from isr.contract.decisions import output_order
from isr.contract.decisions import DeadLetter
from isr.contract.events import BROKER, LEADER, PARTITION, SCOPE
from isr.contract.records import INTERNAL_KINDS, SUMMARY, OutputRecord
from isr.engine.sequencer import LATE, Sequencer
from isr.engine.summary import summarize
from isr.gc_tuning import fewer_gc_passes
from isr.linecap import Overlong, block_line_lists
from isr.pipeline.results import ReplayResult, ReplayStats, too_long
from isr.stream import rowindex
from isr.stream.packing import bucket_of


class Admission:
    """What the local engine's sequencer admits, judged once over the whole
    input before the job runs: the late and future lines become dead letters
    here and never reach the job, whatever its micro-batches, and the
    largest admitted ts is where the job's last checks run (`end_ts`).
    Lines are decoded in chunks (`decode_many`, the same verdicts as
    `decode` one at a time) and offered in file order, as `isr replay` does.

    With `buckets` it also writes the row index (rowindex.py): each row's
    place in its file, ts and bucket, so that the file source's readers
    pack without decoding (files.packed_rows)."""

    CHUNK = 8192  # lines decoded at a time

    def __init__(self, paths: list[str], labels: list[str], settings: Settings,
                 buckets: Optional[int] = None) -> None:
        monitor = settings.monitor
        self.sequencer = Sequencer(monitor.allowed_lateness_ms, monitor.max_future_ms)
        self.lines = 0
        self.skip: list[int] = []  # row indices over all files
        self.dead: list[DeadLetter] = []
        self.buckets = buckets
        self.index = rowindex.Builder() if buckets else None
        self.rows: list[int] = []  # rows per file
        self._homes: dict[tuple, int] = {}  # (cluster, topic, partition) -> bucket
        with fewer_gc_passes():  # as `isr replay`: the collector would walk every chunk
            for path, label in zip(paths, labels):
                first = self.lines
                self._read(path, label, settings.input.max_line_bytes)
                self.rows.append(self.lines - first)
        self.end_ts = self.sequencer.max_ts

    def save_index(self, path: str) -> None:
        assert self.index is not None, "an index is built only with buckets"
        self.index.save(path)

    def _read(self, path: str, label: str, max_line_bytes: int) -> None:
        pos, number = 0, 0  # the next line's byte offset, the lines before it
        with open(path, "rb") as f:
            # Read as the file source reads it (files.line_starts, line_columns).
            for lines in block_line_lists(f, max_line_bytes):
                for start in range(0, len(lines), self.CHUNK):
                    chunk = lines[start:start + self.CHUNK]
                    pos = self._chunk(chunk, pos, number, label)
                    number += len(chunk)

    def _chunk(self, chunk: list, pos: int, number: int, label: str) -> int:
        """Judge a chunk of lines (the first is line `number` + 1, at byte
        `pos`); the byte offset after it."""
        events = None
        if Overlong not in set(map(type, chunk)):
            events = decode_many(chunk, len(chunk))  # one msgspec call unless a line is bad
            if Rejection in set(map(type, events)):  # or a blank line: line by line
                events = None
        if events is None:
            starts, numbers, raws, pos = _rows(chunk, pos, number)
            self._judge(starts, numbers, raws, label)
            return pos
        # every line an event: in bulk
        lengths = np.fromiter(map(len, chunk), np.int64, len(chunk)) + 1
        ends = np.cumsum(lengths) + pos
        numbers = np.arange(number + 1, number + 1 + len(chunk))
        self._judge_events(ends - lengths, numbers, chunk, events, label)
        return int(ends[-1])

    def _judge_events(self, starts, numbers, raws: list, events: list, label: str) -> None:
        """`_judge` of rows that are all events, their verdicts in bulk."""
        stamps = np.fromiter(map(_TS, events), np.int64, len(events))
        refused = self.sequencer.offer_stamps(stamps)
        if refused is None:  # one may be future: one at a time
            self._judge(starts, numbers, raws, label, events)
            return
        codes = self._codes(events) if self.index is not None else None
        for i, reason in refused:
            self.skip.append(self.lines + i)
            self.dead.append(DeadLetter.of(label, int(numbers[i]), raws[i].rstrip(b"\r\n"),
                                           reason, LATE))
            if codes is not None:
                codes[i] = rowindex.SKIP
        self.lines += len(events)
        if self.index is not None:
            self.index.add(starts, numbers, stamps, codes)

    def _judge(self, starts, numbers, raws: list, label: str, events=None) -> None:
        """Decode a chunk's rows (unless `events`), judge them in order, note
        where each goes."""
        sequencer = self.sequencer
        offer = sequencer.offer
        index = self.lines
        if events is None:
            decoded = iter(decode_many([r for r in raws if r.__class__ is bytes]))
            events = [next(decoded) if r.__class__ is bytes else None for r in raws]
        stamps, codes = [], []
        code_of = self._code if self.index is not None else None
        for number, raw, ev in zip(numbers, raws, events):
            ts, code = 0, rowindex.REJECTED
            if ev is None:  # never read, never reaches the job
                self.skip.append(index)
                self.dead.append(too_long(label, number, raw))
                code = rowindex.OVERLONG
            elif not isinstance(ev, Rejection):  # a rejection: the job dead-letters it
                ts = ev.ts
                verdict = offer(ts, index, None)
                if verdict is not None:
                    self.skip.append(index)
                    self.dead.append(DeadLetter.of(label, int(number), raw.rstrip(b"\r\n"),
                                                   sequencer.refusal(verdict, ts), verdict))
                    code = rowindex.SKIP
                elif code_of is not None:
                    code = code_of(ev)
            stamps.append(ts)
            codes.append(code)
            index += 1
        sequencer.queued.clear()  # only the admission matters here
        self.lines = index
        if self.index is not None:
            self.index.add(starts, numbers, stamps, codes)

    def _codes(self, events: list) -> list[int]:
        """`_code` of each event; of partition events in bulk."""
        # (`type`: the tag of the decoder's msgspec classes, made at import: contract/fast.py.)
        if any(SCOPE[kind.type] != PARTITION  # type: ignore[attr-defined]
               for kind in set(map(type, events))):
            return [self._code(ev) for ev in events]
        homes = self._homes
        keys = list(map(_KEY, events))
        codes = list(map(homes.get, keys))
        if None in codes:
            codes = [self._code_of_key(k) if c is None else c for k, c in zip(keys, codes)]
        return codes  # type: ignore[return-value]  # (no None left: replaced just above)

    def _code(self, event) -> int:
        scope = SCOPE[event.type]
        if scope == BROKER:
            return rowindex.ALL
        if scope == LEADER:
            return rowindex.SESSION
        return self._code_of_key((event.cluster, event.topic, event.partition))

    def _code_of_key(self, key: tuple) -> int:
        b = self._homes.get(key)
        if b is None:
            b = self._homes[key] = bucket_of(*key, self.buckets)
        return b


_TS = attrgetter("ts")
_KEY = attrgetter("cluster", "topic", "partition")


def _rows(chunk: list, pos: int, number: int):
    """The rows of a chunk of lines, line by line: blank lines are no rows, a row is its line
    without a trailing carriage return, an overlong line is a row (`Overlong`)."""
    starts, numbers, raws = [], [], []
    for raw in chunk:
        number += 1
        if raw.__class__ is Overlong:
            starts.append(pos)
            numbers.append(number)
            raws.append(raw)
            pos += raw.length + 1
            continue
        if raw.strip():
            starts.append(pos)
            numbers.append(number)
            raws.append(raw.rstrip(b"\r\n"))
        pos += len(raw) + 1
    return starts, numbers, raws, pos


def replay_spark(sources: list[str], settings: Settings, spark=None,
                 max_offsets_per_trigger: Optional[int] = None) -> ReplayResult:
    from isr.stream.files import LinesDataSource
    from isr.stream.buckets import resolve
    from isr.stream.job import close_state_stores, packing_reader, spark_session, start

    workdir = tempfile.mkdtemp(prefix="isr-replay-")
    query = None
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
        spark = spark or spark_session(settings, settings.stream.master, "isr-replay",
                                       memory_defaults=False, write_archive=True)
        spark.dataSource.register(LinesDataSource)
        checkpoint = os.path.join(workdir, "checkpoint")
        # The bucket count first: the admission notes each row's bucket (rowindex.py).
        buckets = resolve(spark, settings.stream.state_buckets, checkpoint)
        settings = settings.model_copy(update={
            "stream": settings.stream.model_copy(update={"state_buckets": buckets})})
        admitted = Admission(paths, labels, settings, buckets)
        index = os.path.join(workdir, "rows.npy")
        admitted.save_index(index)
        reader = (spark.readStream.format("isr_lines").option("paths", json.dumps(paths))
                  .option("labels", json.dumps(labels)).option("end_ts", str(admitted.end_ts))
                  .option("index", index).option("rows", json.dumps(admitted.rows))
                  .option("max_line_bytes", str(settings.input.max_line_bytes)))
        if max_offsets_per_trigger:
            reader = reader.option("maxOffsetsPerTrigger", str(max_offsets_per_trigger))
        rows: list[OutputRecord] = []
        query = start(spark, settings, lambda _id, batch: rows.extend(batch),
                      packed_source=lambda s: packing_reader(reader, s, live=False).load(),
                      trigger={"availableNow": True},
                      checkpoint=checkpoint, live=False)
        query.awaitTermination()
        return collect(rows, settings, admitted.lines, admitted.dead)
    finally:
        if query is not None:  # as the job does: no RocksDB instance left open for the exit
            close_state_stores(spark)
        shutil.rmtree(workdir, ignore_errors=True)


def collect(records: list[OutputRecord], settings: Settings, lines: int = 0,
            dead: Optional[list] = None) -> ReplayResult:
    """Turn the job's output records (and the dead letters judged before)
    into what `isr replay` prints."""
    decisions: list = []
    states: dict = {}
    stats: dict = {}
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
        record: Any = DECISION_TYPES[kind].model_validate_json(value)  # (by its kind, below)
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
