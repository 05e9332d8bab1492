"""Benchmarks of the streaming job (Spark local[2] on this machine's 2 cores).

    python bench/bench_stream.py stateful --events 2000000 --partitions 5000
    python bench/bench_stream.py e2e --events 1000000 --partitions 5000
    python bench/bench_stream.py latency --rate 20000 --seconds 60

stateful  the job over a JSON-lines file (isr_lines source -> pre-stage ->
          stateful operator), output discarded: events/s from Spark's own
          progress reports (processed rows / batch durations), warm batches.
e2e       events already in the embedded broker -> isr_kafka source -> job ->
          Kafka sinks (exactly-once bookkeeping included): events/s over the run.
latency   a generator produces at --rate events/s with ts = wall clock; for each
          expand decision (caused by the fetch with the same ts) the time from
          that ts to the decision's arrival in the output topic: p50 / p99.
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import json
import multiprocessing
import os
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("ISR_SPARK_LOG_LEVEL", "ERROR")

import orjson  # noqa: E402
from cputime import tree_cpu_seconds  # noqa: E402
from gen import stream  # noqa: E402

from isr.config import load_settings  # noqa: E402
from isr.contract.records import INTERNAL_KINDS  # noqa: E402
from isr.sinks.progress import input_records  # noqa: E402


def _progress_rate(query) -> tuple[float, int]:
    """(events/s over warm batches, batches) from the query's progress reports."""
    reports = [p for p in query.recentProgress if input_records(p) > 0]
    warm = reports[1:] or reports  # the first batch pays for JIT and worker start
    rows = sum(input_records(p) for p in warm)
    ms = sum(p["durationMs"]["triggerExecution"] for p in warm)
    return (rows / (ms / 1000) if ms else 0.0), len(reports)


def bench_stateful(args) -> None:
    from isr.stream.files import LinesDataSource
    from isr.stream.job import packing_reader, spark_session, start
    from isr.stream.source import SOURCE_COLUMNS

    work = tempfile.mkdtemp(prefix="isr-bench-")
    path = os.path.join(work, "events.jsonl")
    # The workers' engine cache (isr/stream/statelog.py) logs each bucket's hit or miss.
    cache_log = os.environ["ISR_STATE_CACHE_LOG"] = os.path.join(work, "cache.log")
    with open(path, "wb") as f:
        if args.active is not None:  # bench_statelog's shape: a share of partitions per second
            from bench_statelog import batches
            per_round = 3 * max(1, int(args.active * args.partitions))
            for batch in batches(args.partitions, args.active, max(1, args.events // per_round)):
                f.writelines(ev + b"\n" for ev in batch)
        else:
            for ev in stream(args.partitions, args.events, round_ms=args.round_ms):
                f.write(orjson.dumps(ev) + b"\n")
    settings = load_settings(None, [f"stream.state_buckets={args.buckets}",
                                    f"stream.state_store={args.state_store}",
                                    f"monitor.allowed_lateness_ms={args.lateness or 5000}",
                                    f"monitor.alerts.enabled={str(not args.no_alerts).lower()}"])
    spark = spark_session(settings, args.master, "isr-bench")
    if args.own_pool:
        _own_worker_pool(spark)
    spark.dataSource.register(LinesDataSource)
    reader = (spark.readStream.format("isr_lines").option("paths", json.dumps([path]))
              .option("end_ts", "0").option("maxOffsetsPerTrigger", str(args.batch)))
    if args.pack_stage:
        source = {"source_df": reader.load().select(*SOURCE_COLUMNS)}
    else:
        source = {"packed_source": lambda s: packing_reader(reader, s, live=False).load()}
    counts = {"rows": 0}
    # The decisions themselves, to compare runs: a digest of each kind's ids
    # (the internal records are one per bucket per batch, so their count
    # follows the buckets, not the input).
    ids: dict[str, list[str]] = collections.defaultdict(list)

    def collect(_batch_id, rows) -> None:
        counts["rows"] += len(rows)
        for r in rows:
            ids[r.kind].append(r.id if r.kind not in INTERNAL_KINDS else "")

    started = time.perf_counter()
    q = start(spark, settings, collect,
              trigger={"availableNow": True}, checkpoint=os.path.join(work, "ck"), live=False,
              **source)
    q.awaitTermination()
    wall = time.perf_counter() - started
    cpu = _tree_cpu_seconds()
    rate, batches = _progress_rate(q)
    if os.environ.get("ISR_BENCH_VERBOSE"):
        for p in q.recentProgress:
            print(p["batchId"], p["numInputRows"], p["durationMs"],
                  [{k: o.get(k) for k in ("allUpdatesTimeMs", "commitTimeMs", "numRowsTotal",
                                           "stateMemory", "customMetrics")}
                   for o in p["stateOperators"]])
    print(f"stateful{' (alerts off)' if args.no_alerts else ''}"
          f"{' (packing stage)' if args.pack_stage else ''}: {args.events} events, "
          f"{args.partitions} partitions, {args.master}, "
          f"{spark.conf.get('spark.sql.shuffle.partitions')} "
          f"buckets, {batches} batches of <= {args.batch}: {rate:,.0f} events/s in warm "
          f"batches; {args.events / wall:,.0f} events/s over {wall:.1f} s incl. start-up; "
          f"{counts['rows']} output rows")
    print(f"CPU of this process and its descendants still alive (JVM, Python workers): "
          f"{cpu:.1f} s, {cpu * 1e6 / args.events:.1f} us per event; load average "
          f"{os.getloadavg()[0]:.1f}")
    print("output rows by kind: " + ", ".join(
        f"{k} {len(v)}" + ("" if k in INTERNAL_KINDS else f" ({_digest(v)})")
        for k, v in sorted(ids.items())))
    if os.path.exists(cache_log):
        with open(cache_log) as f:
            loads = [line.split() for line in f]
        hits = sum(1 for x in loads if x[2] == "hit")
        caught = sum(1 for x in loads if x[2] == "catch-up")
        print(f"engine cache: {hits} hits, {caught} catch-ups of {len(loads)} bucket calls "
              f"({len({x[0] for x in loads})} Python workers)")
    state_bytes = _state_bytes(os.path.join(work, "ck"))
    if state_bytes:
        print(f"state store on disk after the run: {state_bytes / args.partitions:,.0f} bytes "
              f"per partition ({args.state_store} store, all versions Spark keeps)")
    shutil.rmtree(work, ignore_errors=True)


def _own_worker_pool(spark) -> None:
    """The buckets' Python workers apart from the source's: Spark keeps one
    pool of Python workers per (python, environment variables) of a function
    (SparkEnv.createPythonWorker), so a variable set only while the stateful
    function is made gives it its own pool (an experiment, issue 23)."""
    from isr.stream import job

    made = job.decisions_stream

    def decisions_stream(*a, **kw):
        env = spark.sparkContext.environment
        env["ISR_WORKER_POOL"] = "buckets"
        try:
            return made(*a, **kw)
        finally:
            env.pop("ISR_WORKER_POOL", None)

    job.decisions_stream = decisions_stream


def _tree_cpu_seconds() -> float:
    """utime + stime of this process and every live descendant (/proc)."""
    return tree_cpu_seconds(os.getpid())


def _digest(ids: list[str]) -> str:
    """The same decisions, in whatever order and batches: the same digest."""
    return hashlib.sha256("\n".join(sorted(ids)).encode()).hexdigest()[:12]


def _state_bytes(checkpoint: str) -> int:
    total = 0
    for root, _dirs, files in os.walk(os.path.join(checkpoint, "state")):
        total += sum(os.path.getsize(os.path.join(root, f)) for f in files)
    return total


def bench_e2e(args) -> None:
    from confluent_kafka import Producer

    from isr.kafka.embedded import EmbeddedBroker
    from isr.sim.output import produce
    from isr.pipeline.streaming import run_to_kafka
    from isr.stream.job import spark_session

    with EmbeddedBroker() as broker:
        broker.create_topics(["isr.fetch-events"], 4)
        p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 50,
                      "batch.num.messages": 10000, "log_level": 0})
        t = time.perf_counter()
        produce(stream(args.partitions, args.events, round_ms=args.round_ms), p, "isr.fetch-events")
        print(f"produced {args.events} events in {time.perf_counter() - t:.1f} s")
        work = tempfile.mkdtemp(prefix="isr-bench-")
        settings = load_settings(None, [
            f"kafka.bootstrap_servers={broker.bootstrap}", f"stream.state_buckets={args.buckets}",
            f"stream.checkpoint_location={work}/ck", f"stream.state_store={args.state_store}",
            f"input.max_offsets_per_trigger={args.batch}"])
        spark = spark_session(settings, args.master, "isr-bench")
        started = time.perf_counter()
        q = run_to_kafka(settings, spark=spark, trigger={"availableNow": True})
        q.awaitTermination()
        wall = time.perf_counter() - started
        rate, batches = _progress_rate(q)
        print(f"e2e: {args.events} events from the embedded broker to decisions in Kafka, "
              f"{batches} batches: {rate:,.0f} events/s in warm batches; "
              f"{args.events / wall:,.0f} events/s over {wall:.1f} s incl. start-up")
        shutil.rmtree(work, ignore_errors=True)


def latency_scenario(partitions: int):
    """Broker 3 pauses 12 s every 30 s (lag limit 10 s), so ISR changes keep coming."""
    from isr.sim.scenario import Scenario

    return Scenario.model_validate({
        "name": "latency", "title": "latency benchmark", "description": "bench",
        "brokers": [1, 2, 3, 4], "timing": {"replica_lag_time_max_ms": 10000},
        "topics": [{"name": "payments", "partitions": partitions, "min_insync_replicas": 2,
                    "workload": {"kind": "steady", "interval_ms": 50, "messages": 5}}],
        "faults": [{"kind": "gc_pause", "broker": 3, "at_ms": 18000, "duration_ms": 12000,
                    "repeat_every_ms": 30000}]})


def _feed(scenario, bootstrap: str, stop, sent) -> None:
    """The latency benchmark's generator process: the scenario in real time."""
    from confluent_kafka import Producer

    from isr.commands.simulate import feed_live

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "log_level": 0})
    parent = os.getppid()  # a killed benchmark must not leave its generator running
    sent.value = feed_live(scenario, producer, "isr.fetch-events",
                           lambda: stop.is_set() or os.getppid() != parent)


def bench_latency(args) -> None:
    from confluent_kafka import Consumer, TopicPartition

    from isr.kafka.embedded import EmbeddedBroker
    from isr.pipeline.streaming import run_to_kafka
    from isr.stream.job import spark_session

    with EmbeddedBroker() as broker:
        broker.create_topics(["isr.fetch-events"], 4)
        work = tempfile.mkdtemp(prefix="isr-bench-")
        settings = load_settings(None, [
            f"kafka.bootstrap_servers={broker.bootstrap}", f"stream.state_buckets={args.buckets}",
            f"stream.checkpoint_location={work}/ck", "stream.trigger_interval=0 seconds",
            f"stream.state_store={args.state_store}",
            f"monitor.allowed_lateness_ms={args.lateness or 200}",
            "monitor.replica_lag_time_max_ms=10000", "input.starting_offsets=latest",
            # One partition: the embedded broker makes 3 for -1, and this reads partition 0.
            "output.partitions=1"])
        spark = spark_session(settings, args.master, "isr-bench")
        q = run_to_kafka(settings, spark=spark)
        time.sleep(15)  # let the first (empty) batches and the Python workers start
        # A simulated cluster in real time: per partition, a produce every 50 ms
        # and two followers fetching after each: ~60 events/s per partition.
        scenario = latency_scenario(partitions=max(1, round(args.rate / 60)))
        # The generator runs in its own process: as a thread it shared the
        # GIL with the driver's foreachBatch (collect, sink) and slowed both.
        ctx = multiprocessing.get_context("spawn")
        stop, sent = ctx.Event(), ctx.Value("q", 0)
        gen = ctx.Process(target=_feed, args=(scenario, broker.bootstrap, stop, sent),
                          daemon=True)
        # Assigned, not subscribed: no group to join (the job writes one partition).
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "bench",
                             "enable.auto.commit": False, "log_level": 0})
        changes = TopicPartition(settings.output.changes_topic, 0, 0)
        consumer.assign([changes])
        t0 = time.time()
        gen.start()
        latencies, seen = [], collections.Counter()
        while time.time() - t0 < args.seconds:
            msg = consumer.poll(0.2)
            if msg is None or msg.error():
                continue
            d = json.loads(msg.value())
            seen[d["type"], d.get("action")] += 1
            if d["type"] == "isr_change" and d["action"] == "expand":
                latencies.append(time.time() * 1000 - d["ts"])
        stop.set()
        gen.join()
        held = sent.value / (time.time() - t0)
        warm = [p for p in q.recentProgress if input_records(p) > 0][1:]
        q.stop()
        low_high = consumer.get_watermark_offsets(changes)
        position = consumer.position([changes])[0].offset
        if warm:
            busy = [p["durationMs"]["triggerExecution"] for p in warm]
            parts = {k: statistics.median(p["durationMs"].get(k, 0) for p in warm)
                     for k in ("latestOffset", "queryPlanning", "walCommit", "addBatch",
                               "commitOffsets")}
            commit = statistics.median(o["commitTimeMs"] for p in warm
                                       for o in p["stateOperators"])
            print(f"batches with input: {len(warm) + 1}, duration p50 "
                  f"{statistics.median(busy):,.0f} ms, max {max(busy):,} ms; medians (ms): "
                  + ", ".join(f"{k} {v:,.0f}" for k, v in parts.items())
                  + f", state commit {commit:,.0f}; rows p50 "
                  f"{statistics.median(input_records(p) for p in warm):,.0f}")
        consumer.close()
        if latencies:
            latencies.sort()
            p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]
            print(f"latency: {held:,.0f} events/s held ({scenario.topics[0].partitions} "
                  f"partitions), "
                  f"allowed lateness {args.lateness or 200} ms: {len(latencies)} expand decisions, "
                  f"p50 {statistics.median(latencies):,.0f} ms, p99 {p99:,.0f} ms")
        else:
            # Seen here: the embedded broker's consumer now and then gets
            # nothing while the topic holds decisions (see the offsets).
            print(f"latency: no expand decision arrived; records seen: {dict(seen)}; "
                  f"{settings.output.changes_topic} offsets {low_high}, consumer at {position}")
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description="streaming job benchmarks")
    ap.add_argument("mode", choices=["stateful", "e2e", "latency"])
    ap.add_argument("--events", type=int, default=2_000_000)
    ap.add_argument("--partitions", type=int, default=5000)
    ap.add_argument("--buckets", default="4", help='stream.state_buckets (a number or "auto")')
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--batch", type=int, default=500_000, help="max events per micro-batch")
    ap.add_argument("--rate", type=int, default=20000)
    ap.add_argument("--seconds", type=int, default=60)
    ap.add_argument("--lateness", type=int, default=None,
                    help="monitor.allowed_lateness_ms (default: 5000 stateful, 200 latency)")
    ap.add_argument("--state-store", default="rocksdb", choices=["rocksdb", "hdfs"])
    ap.add_argument("--round-ms", type=int, default=None,
                    help="event time of one round over all partitions (gen.stream); "
                         "500 is a cluster whose followers fetch every partition every 500 ms")
    ap.add_argument("--no-alerts", action="store_true", help="monitor.alerts.enabled = false")
    ap.add_argument("--active", type=float, default=None,
                    help="stateful: one leader event per partition, then rounds 1 s apart "
                         "of this share of the partitions (an append and 2 fetches each), "
                         "as bench_statelog.py makes them")
    ap.add_argument("--own-pool", action="store_true",
                    help="stateful: the buckets' Python workers in a pool of their own")
    ap.add_argument("--pack-stage", action="store_true",
                    help="stateful: pack in a stage after the source (as before), not in its reader")
    args = ap.parse_args()
    {"stateful": bench_stateful, "e2e": bench_e2e, "latency": bench_latency}[args.mode](args)


if __name__ == "__main__":
    main()
