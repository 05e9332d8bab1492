"""The Python driver's work per micro-batch of `isr run`, without Spark: a
run's recorded output records (a `bench_live_bucket.py --dump`) fed batch
by batch through what the job's foreachBatch does after Spark computed the
batch: the records made from the collected Arrow table
(stream/job.collect_records), then the default sinks in their order
(pipeline/sinks.py Outputs.write_batch): Kafka (KafkaSink, its producer a
stub that keeps what it is given), Prometheus (Metrics, not served) and
the run's tally (RunTally). Several source trees, interleaved.

    python bench/bench_live_bucket.py FILE --set monitor.replica_lag_time_max_ms=10000 \\
        --batch 20000 --dump /tmp/x/records.jsonl
    python bench/bench_driver.py /tmp/x/records.jsonl main=/work/main new=. --rounds 3 [--check]

Each run is a child process (`--one`) importing `isr` from its tree only
(PYTHONPATH). Measured: CPU seconds (time.process_time) of each step over
all batches, and of all (the steps and what Outputs.write_batch does
around them). `--check`: md5s that must be equal between trees: every
message the Kafka sink produced (topic, key, value, headers, in order),
the scrape text after every batch (prometheus_client.generate_latest, as
served: families and series in their order, counters' `_created` blanked)
and the tally's summary. The stub producer costs what a dict append
costs; librdkafka's own copy of each value (its `produce`) is not in the
numbers.
"""

from __future__ import annotations

import gc
import hashlib
import json
import sys
import time
from pathlib import Path

from treeruns import interleaved, parser  # bench/ is on sys.path: the scripts run from it

STEPS = ("collect", "kafka", "metrics", "tally")


class StubProducer:
    """confluent_kafka.Producer's calls KafkaSink makes: `produce` keeps the
    message, `flush` delivers them (partition 0, offsets counting up)."""

    def __init__(self, digest) -> None:
        self.digest, self.queued, self.offsets = digest, [], {}

    def produce(self, topic, value=None, key=None, headers=None, on_delivery=None) -> None:
        self.queued.append((topic, key, value, headers, on_delivery))

    def poll(self, _timeout=0) -> int:
        return 0

    def flush(self, _timeout=None) -> int:
        for topic, key, value, headers, callback in self.queued:
            if self.digest is not None:
                self.digest.update(repr((topic, key, value, headers)).encode())
            offset = self.offsets.get(topic, 0)
            self.offsets[topic] = offset + 1
            if callback is not None:
                callback(None, _Message(topic, offset))
        self.queued = []
        return 0


class _Message:
    __slots__ = ("_topic", "_offset")

    def __init__(self, topic: str, offset: int) -> None:
        self._topic, self._offset = topic, offset

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return 0

    def offset(self) -> int:
        return self._offset


def load(path: str) -> list:
    """The dump's records by batch, each batch as the Arrow table Spark's
    `toArrow` hands the driver (SPARK_SCHEMA's columns)."""
    import orjson
    import pyarrow as pa

    rows: list[list] = []
    with open(path, "rb") as f:
        for line in f:
            batch, _bucket, *record = orjson.loads(line)
            while len(rows) <= batch:
                rows.append([])
            rows[batch].append(record)
    schema = pa.schema([("kind", pa.string()), ("key", pa.string()), ("id", pa.string()),
                        ("ts", pa.int64()), ("value", pa.string())])
    return [pa.table([pa.array(col, t.type) for col, t in zip(zip(*b), schema)] if b else
                     [pa.array([], t.type) for t in schema], schema=schema) for b in rows]


class _Table:
    """What collect_records calls on a DataFrame: toArrow()."""

    def __init__(self, table) -> None:
        self.table = table

    def toArrow(self):  # noqa: N802 - Spark's name
        return self.table


def one(args) -> dict:
    from prometheus_client import generate_latest

    from isr.config import load_settings
    from isr.pipeline.sinks import Outputs
    from isr.sinks.kafka import KafkaSink
    from isr.sinks.prometheus import Metrics
    from isr.stream.job import collect_records
    from isr.stream.tally import RunTally

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_sink import sorted_exposition

    tables = load(args.dump)
    settings = load_settings(None, ['monitor.policy=["kafka"]', *args.set])
    produced = hashlib.md5() if args.check else None
    kafka = KafkaSink({}, settings.output, "bench", topics_setup=None)
    kafka._producer = StubProducer(produced)
    kafka.bind("checkpoint")
    kafka._committed, kafka._recovered = (-1, {}), True  # (no commit topic to read)
    metrics = Metrics(settings.metrics)
    tally = RunTally(settings.monitor.policy)
    cpu = dict.fromkeys(STEPS, 0.0)
    # (Metrics.write_batch with a clock of one second a batch, as bench_live_bucket's --sink)
    metrics.write_batch = lambda batch_id, records: metrics.observe_records(
        records, now=1e9 + batch_id)
    for step, sink in zip(STEPS[1:], (kafka, metrics, tally)):
        sink.write_batch = _timed(sink.write_batch, cpu, step)
    outputs = Outputs([kafka, metrics, tally])  # what the job's foreachBatch calls
    scrapes = hashlib.md5()
    gc.collect()
    total = 0.0
    for n, table in enumerate(tables):
        t0 = time.process_time()
        records = collect_records(_Table(table))
        cpu["collect"] += time.process_time() - t0
        outputs.write_batch(n, records)
        del records
        total += time.process_time() - t0
        if args.check:
            scrapes.update(sorted_exposition(generate_latest(metrics.registry), False))
    out = {"cpu": cpu, "total": total, "batches": len(tables)}
    if args.check:
        result = tally.result()
        out.update(kafka_md5=produced.hexdigest(), scrapes_md5=scrapes.hexdigest(),
                   tally_md5=hashlib.md5(repr((
                       [d.model_dump_json() for d in result.decisions],
                       result.summary, sorted(result.stats.dead_letters.items()),
                   )).encode()).hexdigest())
    return out


def _timed(write_batch, cpu: dict, step: str):
    def timed(batch_id, records):
        t = time.process_time()
        try:
            return write_batch(batch_id, records)
        finally:
            cpu[step] += time.process_time() - t
    return timed


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one(args), default=str))
        return
    trees = [t.split("=", 1) for t in args.trees]
    flags = [f"--set={s}" for s in args.set] + ["--check"] * args.check
    results: dict[str, list] = {}
    for r, name, res in interleaved(__file__, args.dump, trees, args.rounds, flags):
        results.setdefault(name, []).append(res)
        c = res["cpu"]
        print(f"round {r} {name}: " + ", ".join(f"{s} {c[s]:.3f}" for s in STEPS)
              + f", all {res['total']:.3f} CPU s"
              + (f"; md5 kafka {res['kafka_md5'][:12]} scrapes {res['scrapes_md5'][:12]} "
                 f"tally {res['tally_md5'][:12]}" if args.check else ""), flush=True)
    for name, runs in results.items():
        print(f"{name}: " + ", ".join(
            f"{s} {min(r['cpu'][s] for r in runs):.3f}" for s in STEPS)
            + f", all {min(r['total'] for r in runs):.3f} CPU s (min of "
            f"{len(runs)})")


if __name__ == "__main__":
    main()
