"""The live job's stateful operator on a file, without Kafka or Spark: the
micro-batches `isr run` hands its buckets, replayed through the operator's
own per-bucket call (operator._call: the state row loaded, the batch
processed, the row saved; the worker's engine cache hits as in a job whose
buckets stay on their worker), timed per batch and optionally profiled.

    python bench/bench_live_bucket.py FILE --set monitor.replica_lag_time_max_ms=4000 \\
        [--batch 20000] [--input-partitions 2] [--buckets 2] [--profile-from 2] [--top 40]

How the job's batches are made here: the file's lines go to
`--input-partitions` input partitions by their routing key (crc32, as
stable as Kafka's partitioner; which partition a key lands in does not
matter, only that a key's events stay in order), each micro-batch reads
`--batch` records in all, an equal share of each partition (Spark's Kafka
source with maxOffsetsPerTrigger), one packing task per input partition
(its own Packer), and every bucket gets each task's row. The settings are
the job's as bench_realistic_run.py runs it: policy kafka, alerts on,
output.state_interval_ms and metrics.per_partition at their defaults (a
`partition_metrics` record per bucket and batch), plus `--set`.

Printed: per batch the events read, each bucket call's CPU seconds
(time.process_time), and the CPU per event from batch `--profile-from` on;
an md5 of every output record (to compare trees: the same file and
arguments must give the same md5). `--profile`: a cProfile of the bucket
calls from batch `--profile-from` on, its top entries by own time and by
cumulative time.
"""

from __future__ import annotations

import argparse
import cProfile
import hashlib
import pstats
import time
import zlib

import orjson
import pandas as pd

from isr.config import load_settings
from isr.contract.events import routing_key
from isr.stream import statelog
from isr.stream.operator import BucketProcessor, _call
from isr.stream.packing import END_OF_INPUT, Packer


class FakeState:
    """What applyInPandasWithState's GroupState gives the function: the row."""

    def __init__(self, row=None) -> None:
        self.row = row

    @property
    def exists(self) -> bool:
        return self.row is not None

    @property
    def get(self):
        return self.row

    def update(self, row) -> None:
        self.row = tuple(row)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file")
    ap.add_argument("--batch", type=int, default=20000, help="records per micro-batch in all")
    ap.add_argument("--input-partitions", type=int, default=2)
    ap.add_argument("--buckets", type=int, default=2)
    ap.add_argument("--policy", default="kafka")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--profile-from", type=int, default=2,
                    help="the first batch counted per event (and profiled)")
    ap.add_argument("--top", type=int, default=40)
    ap.add_argument("--profile-out", help="also write the profile's stats to this file")
    ap.add_argument("--end", action="store_true",
                    help="end with the end-of-input marker (every event applied, every "
                         "state out), to compare the whole run with `isr replay`'s CPU")
    ap.add_argument("--dump", help="write every output record to this file, one a line")
    ap.add_argument("--check-membership", action="store_true",
                    help="check, each batch, that every pending partition's membership as it "
                         "stands (what StateThrottle.due reads) is the one after catching it up")
    ap.add_argument("--batches", type=int, default=0, help="stop after this many (0: all)")
    ap.add_argument("--cut-factor", type=int, default=0,
                    help="SessionDriver.cut_factor for the buckets' engines (0: the "
                         "default, 2; `isr replay` uses 4)")
    ap.add_argument("--sink", action="store_true",
                    help="also feed each batch's records (every bucket's) to the driver's "
                         "Prometheus sink (isr/sinks/prometheus.py Metrics.observe_records, "
                         "not served) and time it")
    ap.add_argument("--sink-check", action="store_true",
                    help="with --sink: an md5 per batch of the sink's series that must be "
                         "exact every batch (all but the state timestamp and the time since "
                         "caught up), and of the cluster counts")
    ap.add_argument("--sink-exposition", action="store_true",
                    help="with --sink: after every batch an md5 of the sink's whole scrape text "
                         "(prometheus_client.generate_latest, each family's lines sorted; "
                         "bench_sink.py sorted_exposition), to compare trees' sinks")
    args = ap.parse_args()
    if args.cut_factor:
        from isr.engine.sessions import SessionDriver
        SessionDriver.cut_factor = args.cut_factor
    if args.check_membership:
        _check_membership()
    settings = load_settings(None, [f'monitor.policy=["{args.policy}"]',
                                    "monitor.alerts.enabled=true", *args.set])
    monitor = settings.monitor
    parts: list[list[bytes]] = [[] for _ in range(args.input_partitions)]
    for line in open(args.file, "rb"):
        line = line.rstrip(b"\r\n")
        if line.strip():
            key = routing_key(orjson.loads(line))
            parts[zlib.crc32(key) % args.input_partitions].append(line)
    labels = list(range(args.buckets))
    packers = [Packer(labels, monitor.max_future_ms) for _ in parts]
    end_packer = Packer(labels, monitor.max_future_ms)
    refresh = getattr(settings.metrics, "refresh_interval_ms", None)  # (not in older trees)
    busy = getattr(settings.metrics, "busy_refresh_interval_ms", None)  # (nor this)
    processor = BucketProcessor(monitor, settings.output.state_interval_ms,
                                settings.metrics.enabled and settings.metrics.per_partition,
                                *([] if refresh is None else [refresh]),
                                *([] if busy is None else [busy]))
    states = [FakeState() for _ in labels]
    digest = hashlib.md5()
    decisions = hashlib.md5()  # every record but partition_metrics
    sink = None
    if args.sink or args.sink_check or args.sink_exposition:
        from isr.sinks.prometheus import Metrics
        sink = Metrics(settings.metrics)
    sink_cpu = sink_from = 0.0
    sent_states = 0
    exact_digest, counts_digest = hashlib.md5(), hashlib.md5()
    exposition_digest, shown = hashlib.md5(), ""
    dump = open(args.dump, "wb") if args.dump else None
    # (the default timer, the wall clock: time.process_time as the timer
    # costs a system call per event and inflates the profile ~10x)
    prof = cProfile.Profile() if args.profile else None
    share = -(-args.batch // len(parts))
    pos = [0] * len(parts)
    batch = 0
    counted_events = counted_cpu = 0.0
    total_cpu = 0.0
    rows_out = 0
    last_ts = max(orjson.loads(lines[-1])["ts"] for lines in parts if lines)
    ended = not args.end
    while not ended or any(p < len(lines) for p, lines in zip(pos, parts)):
        rows_by_bucket: list[list] = [[] for _ in labels]
        n = 0
        if all(p >= len(lines) for p, lines in zip(pos, parts)):  # the end-of-input batch
            ended = True
            for b, (_label, pack, summary) in enumerate(end_packer.pack(
                    [str(last_ts)], [END_OF_INPUT], ["in"], [-1], [0], None)):
                rows_by_bucket[b].append((pack, summary))
        for i, lines in enumerate(parts):
            chunk = lines[pos[i]:pos[i] + share]
            if not chunk:
                continue
            offsets = list(range(pos[i], pos[i] + len(chunk)))
            pos[i] += len(chunk)
            n += len(chunk)
            for b, (_label, pack, summary) in enumerate(packers[i].pack(
                    [None] * len(chunk), chunk, ["in"] * len(chunk), [i] * len(chunk),
                    offsets, None, [False] * len(chunk))):
                rows_by_bucket[b].append((pack, summary))
        cpus = []
        batch_records = []
        for b in labels:
            pdf = pd.DataFrame({"pack": [p for p, _s in rows_by_bucket[b]],
                                "summary": [s for _p, s in rows_by_bucket[b]]})
            on = prof is not None and batch >= args.profile_from
            t = time.process_time()
            if on:
                prof.enable()
            out = _call(processor, (b, args.buckets), iter([pdf]), states[b], ("bench",))
            if on:
                prof.disable()
            cpu = time.process_time() - t
            cpus.append(cpu)
            rows_out += len(out)
            batch_records.extend(out)
            for r in out:
                line = orjson.dumps([batch, b, *r]) + b"\n"
                digest.update(line)
                if r.kind != "partition_metrics":
                    decisions.update(line)
                else:
                    sent_states += len(orjson.loads(r.value))  # (states and shared ids)
                if dump is not None:
                    dump.write(line)
        if sink is not None:
            t = time.process_time()
            sink.observe_records(batch_records, now=1e9 + batch)
            c = time.process_time() - t
            sink_cpu += c
            if batch >= args.profile_from:
                sink_from += c
            if args.sink_check:
                _sink_digest(sink, batch, exact_digest, counts_digest)
            if args.sink_exposition:
                from bench_sink import sorted_exposition
                from prometheus_client import generate_latest
                text = sorted_exposition(generate_latest(sink.registry))
                exposition_digest.update(text)
                shown = f", exposition md5 {hashlib.md5(text).hexdigest()[:12]} ({len(text):,} B)"
        total_cpu += sum(cpus)
        if batch >= args.profile_from:
            counted_cpu += sum(cpus)
            counted_events += n
        print(f"batch {batch}: {n:,} records, bucket CPU s "
              + " + ".join(f"{c:.2f}" for c in cpus)
              + (f", sink CPU s {c:.2f}" if sink is not None else "")
              + f", metrics states so far {sent_states:,}" + shown, flush=True)
        batch += 1
        if args.batches and batch >= args.batches:
            break
    per = counted_cpu / counted_events * 1e6 if counted_events else float("nan")
    print(f"{batch} batches, {rows_out:,} output rows, md5 {digest.hexdigest()}; "
          f"bucket CPU {total_cpu:.2f} s in all; from batch {args.profile_from}: "
          f"{counted_cpu:.2f} s for {counted_events:,.0f} records = {per:.1f} us/record; "
          f"cache {statelog.STATS}"
          + (f"; membership checked {CHECKED[0]:,} times" if args.check_membership else ""))
    print(f"md5 without partition_metrics {decisions.hexdigest()}; partition states sent to "
          f"the metrics {sent_states:,}"
          + (f"; sink CPU {sink_cpu:.2f} s in all, {sink_from:.2f} s from batch "
             f"{args.profile_from}" if sink is not None else "")
          + (f"; sink exact series md5 {exact_digest.hexdigest()}, counts md5 "
             f"{counts_digest.hexdigest()}" if args.sink_check else "")
          + (f"; exposition md5, every batch {exposition_digest.hexdigest()}"
             if args.sink_exposition else ""))
    if prof is not None:
        stats = pstats.Stats(prof)
        if args.profile_out:
            stats.dump_stats(args.profile_out)
        stats.sort_stats("tottime").print_stats(args.top)
        stats.sort_stats("cumulative").print_stats(args.top)


# The sink's series a batch must leave exact (the others move with time).
TIMES = {"isr_partition_state_timestamp_seconds", "isr_follower_time_since_caught_up_seconds"}


def _sink_digest(sink, batch: int, exact, counts) -> None:
    """Add the sink's series after `batch` to the digests: `counts` the
    cluster-level counts, `exact` every per-partition and per-follower
    series but TIMES (sorted, so the order they were set in is no matter)."""
    from isr.sinks.prometheus import COUNTS
    rows, crows = [], []
    for family in sink.registry.collect():
        if family.name in TIMES:
            continue
        for sample in family.samples:
            if not sample.name.startswith(("isr_partition", "isr_follower")) and \
                    sample.name not in COUNTS:
                continue
            row = (sample.name, tuple(sorted(sample.labels.items())), sample.value)
            (crows if sample.name in COUNTS else rows).append(row)
    exact.update(repr((batch, sorted(rows))).encode())
    counts.update(repr((batch, sorted(crows))).encode())


def _check_membership() -> None:
    """StateThrottle.due, checking first that no pending partition's
    membership changes when it is brought up to date (which due does only
    for the partitions whose state goes out). Catching every one up changes
    no output (the lazy catch-up is exact), so the md5 stays the same."""
    from isr.stream import throttle

    due = throttle.StateThrottle.due

    def checked(self, models_of, now, flush=False, current=None):
        if current is not None:
            for key in sorted(self.pending):
                for m in models_of(key):
                    before = throttle.membership(m)
                    assert before == throttle.membership(current(m)), key
                    CHECKED[0] += 1
        return due(self, models_of, now, flush, current)

    throttle.StateThrottle.due = checked


CHECKED = [0]


if __name__ == "__main__":
    main()
