"""The end-of-run summary of the streaming job (`isr run`, spark-submit): the
counts `isr replay` prints, tallied on the driver from the records each
micro-batch writes and from Spark's progress reports."""

from __future__ import annotations

import json
from collections import Counter

import msgspec
import orjson

from isr.contract.decisions import Alert, IsrChange
from isr.contract.records import OutputRecord
from isr.engine.summary import summarize
from isr.pipeline.results import ReplayResult, ReplayStats
from isr.sinks.base import Run, Sink
from isr.sinks.progress import input_records


class _TalliedState(msgspec.Struct):
    """What the tally reads of a partition_state record. Decoded into this
    (msgspec skips the other fields, the followers' list among them) it costs
    ~0.8 us a record against ~3-5 us for the whole record as dicts
    (orjson.loads): at 100 k partitions ~10 k states a second of cluster
    time reach the driver (docs/benchmarks.md, branch `statecost`)."""

    cluster: str
    topic: str
    partition: int
    ts: int
    policy: str
    under_min_isr: bool


_read_state = msgspec.json.Decoder(_TalliedState).decode


class RunTally(Sink):
    """What the job decided so far. Only decisions (few) are kept whole; a
    partition is a key and, while under min ISR, the time it went under."""

    def __init__(self, policies: list[str]):
        self.policies = list(policies)
        self.changes: list[IsrChange] = []
        self.alerts: list[Alert] = []
        self._read: dict[int, int] = {}  # batchId -> input records
        self.dead_letters: Counter = Counter()
        self._partitions: dict[str, set[str]] = {p: set() for p in self.policies}
        self._under_since: dict[tuple[str, str], int] = {}  # (policy, partition) -> ts
        self._ever_under: set[tuple[str, str]] = set()
        self._under_ms: Counter = Counter()
        self._max_ts = 0

    def observe_progress(self, progress: dict) -> None:
        self._read[progress.get("batchId", -1)] = input_records(progress)

    def observe_query(self, query) -> None:
        """The progress reports the listener had not delivered when the query
        ended (Spark keeps the last ones on the query)."""
        for p in query.recentProgress:
            self.observe_progress(p if isinstance(p, dict) else json.loads(p.json))

    def open(self, run: Run) -> None:
        run.watch_progress(self.observe_progress)

    def write_batch(self, batch_id: int, records: list[OutputRecord]) -> None:
        self.observe_records(records)

    @property
    def read(self) -> int:
        return sum(self._read.values())

    def observe_records(self, records: list[OutputRecord]) -> None:
        for r in records:
            if r.kind == "isr_change":
                self.changes.append(IsrChange.model_validate_json(r.value))
            elif r.kind == "alert":  # transitions only: repeats would grow without end
                alert = Alert.model_validate_json(r.value)
                if not alert.is_repeat:
                    self.alerts.append(alert)
            elif r.kind == "dead_letter":
                self.dead_letters[orjson.loads(r.value).get("reason_class", "other")] += 1
            elif r.kind == "partition_state":
                self._state(_read_state(r.value))

    def _state(self, s: "_TalliedState") -> None:
        policy, ts = s.policy, s.ts
        key = f"{s.cluster}/{s.topic}/{s.partition}"
        self._partitions.setdefault(policy, set()).add(key)
        self._max_ts = max(self._max_ts, ts)
        started = self._under_since.get((policy, key))
        if s.under_min_isr:
            self._ever_under.add((policy, key))
            self._under_since.setdefault((policy, key), ts)
        elif started is not None:
            self._under_ms[policy] += max(0, ts - started)
            del self._under_since[(policy, key)]

    def result(self) -> ReplayResult:
        """The tally in the shape `console.print_summary` prints."""
        under_ms = Counter(self._under_ms)
        for (policy, _key), since in self._under_since.items():
            under_ms[policy] += max(0, self._max_ts - since)
        stats = {p: [len(keys), sum(1 for q, _ in self._ever_under if q == p), under_ms[p]]
                 for p, keys in self._partitions.items()}
        policies = self.policies + [p for p in stats if p not in self.policies]
        dead = sum(self.dead_letters.values())
        return ReplayResult(decisions=self.changes + self.alerts, states=[], dead_letters=[],
                            stats=ReplayStats(lines=self.read,
                                              accepted=max(0, self.read - dead),
                                              dead_letters=Counter(self.dead_letters)),
                            summary=summarize(policies, self.changes, stats))

    def print(self, console=None) -> None:
        from rich.console import Console

        from isr.console import print_summary

        console = console or Console(stderr=True)
        if not console.is_terminal:
            console.width = 120
        print_summary(self.result(), console)
