"""The realistic cluster through the streaming job `isr run` (issue 23).

bench/bench_realistic.py writes a realistic cluster's events (session grain)
to a file and replays it with `isr replay`. This puts such a file into a topic
of a real Apache Kafka cluster (isr/kafka/cluster.py: 1 KRaft controller + 3
brokers from Maven jars, on this helper's ports), then runs `isr run
--available-now` (Spark local[2], alerts on, input.source = "kafka": Spark's
own Kafka source; decisions, alerts, state and commits to Kafka topics) over
it and reports:

- wall time from the job's start to its last micro-batch's commit (the
  checkpoint's commits/N files), and from its first batch's commit on (the
  steady part, without Spark's start-up and the first batch);
- CPU seconds of every process of the job (the `isr run` Python driver, the
  Spark JVM, the Python workers; /proc polled every 0.5 s like
  bench/cputime.py) over the whole run and over the steady part, and the
  cluster's time over them: "x real time on 2 cores" = cluster seconds /
  (CPU seconds / 2);
- peak RSS (and PSS) of the driver JVM, the Python driver and the Python
  workers, each and summed;
- each micro-batch from Spark's progress reports (the Spark event log,
  stream.spark_conf spark.eventLog.*): input rows, duration and its parts,
  the state operator's update and commit times;
- whether the isr_change and alert records the job wrote are `isr replay`'s
  of the same file (the replay's output file, bench_realistic.py's
  <stem>.out.jsonl), below the stream's last watermark (newest ts - the
  allowed lateness), as tests/integration/test_real_kafka_job.py compares.

The input topic has 2 partitions by default (`--input-partitions`). The
Kafka source then hands over events of one ts under different routing keys
in another order than the file's; the contract's tie order (docs/contract.md,
"Order of events") makes the decisions independent of it, so they are
replay's either way (before it, the leader-resume shrinks of a stall were
missed: docs/benchmarks.md, "Same-ts ties across input partitions"; checked
since in the `latency` runs of 2026-11-28, every change identical).

`--from-requestlogs DIR` (run mode): instead of the file itself, its
request logs (bench/render_requestlog.py: one kafka-request-<N>.log per
leader broker and metadata-events.jsonl; rendered into DIR when missing)
go through `isr tap request-log LOG --broker N --to kafka://TOPIC`, one
process per broker (--tap-jobs at a time; CPU seconds of each by os.wait4,
and of the tap of an empty log, its start-up), each into a topic of its own
(--tap-topics broker, the default; the metadata events into one more, or
with `first` ahead of the first broker's records in its topic) or all into
one (--tap-topics one). The job reads every input topic; its
isr_change and alert records are compared with `isr replay --merge` of the
input topics' records (each partition's, in offset order, as the job reads
them) and its isr_change records with --replay-out (the original file's
replay). docs/tap.md says which layout and source a backfill needs.

    PYTHONPATH=/work/wt/taprun python bench/bench_realistic_run.py run \\
        /tmp/cheapfetch/real20k/session-20.jsonl --from-requestlogs /tmp/taprun/r20k \\
        --source python --set monitor.replica_lag_time_max_ms=10000 \\
        --set monitor.allowed_lateness_ms=2000 --replay-out /tmp/taprun/r20k/direct.out.jsonl \\
        --port-base 23100 --work /tmp/taprun/run --keep

The cluster outlives one invocation (--keep) so that several runs share it
and a topic already holding the file is not written again;
`bench_realistic_run.py stop` stops it.

    PYTHONPATH=/work/wt/realrun /work/main/.venv/bin/python \\
        bench/bench_realistic_run.py run /tmp/real60/session-60.jsonl \\
        --set monitor.replica_lag_time_max_ms=10000 --max-offsets 100000 --keep
    ... bench/bench_realistic_run.py stop

`latency` mode: the file is fed at real-time pace with every ts shifted to
the wall clock while the job runs continuously (trigger_interval 0); for
each isr_change the time from its ts to its arrival in the changes topic:
p50 / p99. The shift is a whole number of isr-expiration periods (the
feed's start waits up to one period): the checks run at multiples of the
period (isr/model/rules.py `ceil_to`), so any other shift moves them
against the file's events and gives other decisions than the file's
replay (a stall's shrinks fall between two checks or not: 201 or 465
changes at 20 k, docs/benchmarks.md, 2026-11-28 evening). The changes
that arrived are then compared with the replay's (--replay-out), shifted.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Optional

import orjson

sys.path.insert(0, os.path.dirname(__file__))
from cputime import _parents, _stats  # noqa: E402

from isr.contract.events import routing_key  # noqa: E402
from isr.model.rules import ceil_to  # noqa: E402
from isr.sinks.progress import input_records  # noqa: E402
from isr.stream.running import descendants  # noqa: E402

PY = sys.executable
TREE = Path(__file__).resolve().parents[1]


# ------------------------------------------------------------------ cluster
def cluster(args, start: bool = True):
    from isr.kafka.cluster import ClusterConfig, KafkaCluster

    conf = ClusterConfig(dir=Path(args.work) / "kafka", port_base=args.port_base,
                         jmx_exporter=False, detach=True,
                         broker_heap="-Xms256m -Xmx1g")
    c = KafkaCluster(conf)
    if start and not c.running():
        t = time.monotonic()
        c.start()
        print(f"kafka: started in {time.monotonic() - t:.0f} s ({c.bootstrap})", flush=True)
    return c


def ends(bootstrap: str, topic: str) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench", "log_level": 0})
    try:
        md = c.list_topics(topic, timeout=10).topics[topic]
        if md.error is not None:
            return {}
        return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                for p in md.partitions}
    finally:
        c.close()


def load(bootstrap: str, topic: str, path: str, partitions: int) -> int:
    """The file's lines into `topic` (keyed as the contract says), unless it
    holds that many records already. Returns the line count."""
    from confluent_kafka import Producer

    from isr.kafka.client import ensure_topics, send

    with open(path, "rb") as f:
        lines = sum(1 for _ in f)
    have = sum(ends(bootstrap, topic).values())
    if have == lines:
        print(f"kafka: {topic} holds the file's {lines:,} events already", flush=True)
        return lines
    if have:
        raise SystemExit(f"{topic} holds {have} records, the file {lines}: use another --topic")
    ensure_topics({"bootstrap.servers": bootstrap}, [topic], partitions, 1)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "batch.num.messages": 10000,
                  "queue.buffering.max.messages": 500000, "message.max.bytes": 10_000_000,
                  "compression.type": "none", "acks": "all", "log_level": 0})
    t = time.monotonic()
    with open(path, "rb") as f:
        for n, line in enumerate(f, 1):
            line = line.rstrip(b"\n")
            send(p, topic, line, routing_key(orjson.loads(line)))
            if n % 10000 == 0:
                p.poll(0)
    left = p.flush(120)
    if left:
        raise SystemExit(f"{left} events not acknowledged")
    print(f"kafka: {lines:,} events into {topic} ({partitions} partitions) in "
          f"{time.monotonic() - t:.0f} s", flush=True)
    return lines


# ------------------------------------------------------------------ request logs, tapped
def tap_one(log: str, broker: Optional[int], topic: str, bootstrap: str, cwd: Path,
            err) -> float:
    """`isr tap request-log LOG --broker N --to kafka://TOPIC` as an operator
    runs it (a process of its own); its CPU seconds (os.wait4: the process,
    start-up included)."""
    cmd = [PY, "-m", "isr.cli", "tap", "request-log", log, "--broker", str(broker),
           "--to", f"kafka://{topic}", "--quiet", "--set", f"kafka.bootstrap_servers={bootstrap}"]
    child = subprocess.Popen(cmd, cwd=cwd, env=dict(os.environ, PYTHONPATH=str(TREE)),
                             stdout=subprocess.DEVNULL, stderr=err)
    _pid, status, usage = os.wait4(child.pid, 0)
    if status:
        raise SystemExit(f"the tap of {log} exited {status >> 8}")
    return usage.ru_utime + usage.ru_stime


def tap_into_kafka(args, bootstrap: str, base: str) -> tuple[list[str], list, float]:
    """The rendered request logs of args.from_requestlogs (bench/bench_reqtap.py
    --render; rendered from args.file here when missing) into the cluster:
    each broker's log through `isr tap request-log ... --to kafka://TOPIC`,
    --tap-jobs at a time, and the metadata events the request-log tap does not
    make (`leader`, `broker`: `isr tap metadata` in a real deployment) with
    the contract's keys. --tap-topics broker: one topic per broker's tap and
    one for the metadata; one: all into one topic, the metadata first.
    Returns the input topics, (broker, log bytes, CPU s) per tap, and the CPU
    s of the tap of an empty log (its start-up)."""
    from concurrent.futures import ThreadPoolExecutor

    from isr.kafka.client import ensure_topics

    sys.path.insert(0, os.path.dirname(__file__))
    import render_requestlog
    from bench_reqtap import broker_logs

    where = Path(args.from_requestlogs)
    if not broker_logs(str(where)):
        t = time.process_time()
        render_requestlog.render(args.file, str(where))
        print(f"render: {args.file} as request logs into {where} "
              f"({time.process_time() - t:.1f} CPU s)", flush=True)
    logs = broker_logs(str(where))
    per_broker = args.tap_topics in ("broker", "first")
    meta = {"broker": f"{base}.meta", "one": f"{base}.in",
            "first": f"{base}.b{logs[0][0]}"}[args.tap_topics]
    if per_broker and sum(ends(bootstrap, f"{base}.b{logs[-1][0]}").values()):
        print(f"kafka: the taps wrote {base}.* already (--topic {base})", flush=True)
        return list(dict.fromkeys([meta, *[f"{base}.b{b}" for b, _p in logs]])), [], 0.0
    load(bootstrap, meta, str(where / "metadata-events.jsonl"),
         1 if args.tap_topics == "broker" else args.input_partitions)
    topic_of = {b: f"{base}.b{b}" if per_broker else meta for b, _p in logs}
    topics = list(dict.fromkeys([meta, *topic_of.values()]))
    ensure_topics({"bootstrap.servers": bootstrap}, topics, args.input_partitions, 1)
    cwd = Path(args.work)  # no conf/isr.toml there
    err = open(cwd / f"{base}.taps.err", "w")
    (cwd / "empty.log").write_bytes(b"")
    startup = tap_one(str(cwd / "empty.log"), 0, f"{base}.empty", bootstrap, cwd, err)
    t = time.monotonic()
    with ThreadPoolExecutor(args.tap_jobs) as pool:
        cpu = list(pool.map(lambda bp: tap_one(bp[1], bp[0], topic_of[bp[0]], bootstrap, cwd,
                                                err), logs))
    rows = [(b, os.path.getsize(p), c) for (b, p), c in zip(logs, cpu)]
    total = sum(cpu)
    worst = max(rows, key=lambda r: r[2])
    n = sum(sum(ends(bootstrap, t).values()) for t in topics)
    print(f"taps: {len(logs)} request logs ({sum(r[1] for r in rows):,} bytes) into "
          f"{len(topics)} topic(s), {n:,} events with the metadata's, in "
          f"{time.monotonic() - t:.0f} s wall ({args.tap_jobs} at a time); CPU s: {total:.1f} in "
          f"all, {total - len(logs) * startup:.1f} without the start-ups ({startup:.2f} s each, "
          f"the tap of an empty log); per broker mean {total / len(logs):.2f}, busiest "
          f"broker {worst[0]} {worst[2]:.2f} ({worst[1]:,} bytes) = "
          f"{(worst[2] - startup) / args.seconds:.4f} CPU s per cluster s without its "
          f"start-up; all taps {(total - len(logs) * startup) / args.seconds:.3f} CPU s per "
          f"cluster s", flush=True)
    print("  CPU s per broker's tap: " + ", ".join(f"{b} {c:.2f}" for b, _s, c in rows),
          flush=True)
    return topics, rows, startup


def dump_inputs(bootstrap: str, topics: list[str], where: Path) -> list[str]:
    """Each input topic partition's records, in offset order, as a JSON-lines
    file: what the job reads, for `isr replay --merge`."""
    from isr.sinks.kafka import read_to_end

    where.mkdir(parents=True, exist_ok=True)
    files = []
    for topic in topics:
        for p in sorted(ends(bootstrap, topic)):
            path = where / f"{topic}-{p}.jsonl"
            with open(path, "wb") as f:
                for m in read_to_end({"bootstrap.servers": bootstrap}, {(topic, p): 0}):
                    f.write(m.value() + b"\n")
            files.append(str(path))
    return files


def replay_merged(args, files: list[str], out: Path) -> None:
    cmd = [PY, "-m", "isr.cli", "replay", "--merge", *files, "-q", "-o", str(out),
           "--policy", args.policy, *[x for kv in args.set for x in ("--set", kv)]]
    subprocess.run(cmd, cwd=args.work, env=dict(os.environ, PYTHONPATH=str(TREE)), check=True,
                   stdout=subprocess.DEVNULL)


# ------------------------------------------------------------------ watching
class Watch(threading.Thread):
    """Polls the job's process tree: CPU seconds (last seen per pid), RSS and
    PSS per kind (driver / jvm / workers), over time."""

    def __init__(self, root: int, period: float = 0.5, log: Optional[str] = None):
        super().__init__(daemon=True)
        self.root, self.period = root, period
        # --rss-log: one JSON line per sample, every process of the job:
        # [pid, parent, kind, RSS kB, PSS kB, CPU s] (kind: driver, jvm,
        # daemon = PySpark's worker daemon, worker = a worker it forked)
        self.log = open(log, "a") if log else None
        self.mine = {root}
        self.cpu: dict[int, float] = {}
        self.kind: dict[int, str] = {}
        self.engines: set[int] = set()
        self.samples: list[tuple[float, float]] = []   # (time, total CPU s)
        self.peak = {"driver": 0, "jvm": 0, "workers": 0, "sum": 0}
        self.peak_pss = dict(self.peak)
        self.peak_workers = 0
        self.done = threading.Event()

    def classify(self, pid: int) -> str:
        if pid == self.root:
            return "driver"
        try:
            cmd = open(f"/proc/{pid}/cmdline", "rb").read()
        except OSError:
            return "other"
        if not cmd:  # exiting (or its memory busy): keep the kind it had
            return "other"
        if b"isr.stream.engineproc" in cmd:  # a bucket's engine process (engineproc.py)
            self.engines.add(pid)
        return "jvm" if b"java" in cmd.split(b"\0")[0] else "workers"

    @staticmethod
    def memory(pid: int) -> tuple[int, int]:
        rss = pss = 0
        try:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                for line in f:
                    if line.startswith("Rss:"):
                        rss = int(line.split()[1]) * 1024
                    elif line.startswith("Pss:"):
                        pss = int(line.split()[1]) * 1024
        except OSError:
            pass
        return rss, pss

    def run(self) -> None:
        while not self.done.is_set():
            self.sample()
            self.done.wait(self.period)
        self.sample()

    def sample(self) -> None:
        stats = _stats()
        self.mine = descendants(_parents(stats), self.mine)
        rss = {"driver": 0, "jvm": 0, "workers": 0}
        pss = dict(rss)
        workers = 0
        procs: list = []
        for pid in sorted(self.mine):
            if pid not in stats:
                continue
            self.cpu[pid] = stats[pid][1]
            # again each time: the launcher script becomes the JVM (exec);
            # a process gone meanwhile keeps the kind it had
            kind = self.classify(pid)
            if kind == "other" and pid in self.kind:
                kind = self.kind[pid]
            self.kind[pid] = kind
            if kind not in rss:
                continue
            r, p = self.memory(pid)
            rss[kind] += r
            pss[kind] += p
            workers += kind == "workers" and r > 0
            if self.log is not None:
                parent = stats[pid][0]
                label = kind if kind != "workers" else (
                    "engine" if pid in self.engines else
                    "worker" if self.kind.get(parent) == "workers" else "daemon")
                procs.append([pid, parent, label, r >> 10, p >> 10, stats[pid][1]])
        for peak, now in ((self.peak, rss), (self.peak_pss, pss)):
            for k, v in now.items():
                peak[k] = max(peak[k], v)
            peak["sum"] = max(peak["sum"], sum(now.values()))
        self.peak_workers = max(self.peak_workers, workers)
        self.samples.append((time.time(), sum(self.cpu.values())))
        if self.log is not None:
            self.log.write(orjson.dumps({"t": round(self.samples[-1][0], 2),
                                         "procs": procs}).decode() + "\n")
            self.log.flush()

    def cpu_at(self, t: float) -> float:
        """Total CPU seconds at wall time t (linear between samples)."""
        prev = (self.samples[0][0], 0.0)
        for s in self.samples:
            if s[0] >= t:
                span = s[0] - prev[0]
                return prev[1] + (s[1] - prev[1]) * ((t - prev[0]) / span if span else 1)
            prev = s
        return self.samples[-1][1]

    def cpu_by_kind(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for pid, cpu in self.cpu.items():
            out[self.kind.get(pid, "other")] = out.get(self.kind.get(pid, "other"), 0) + cpu
        return out


# ------------------------------------------------------------------ the job
def job_settings(args, bootstrap: str, topics, prefix: str, run_dir: Path,
                 latency: bool = False) -> list[str]:
    topics = [topics] if isinstance(topics, str) else list(topics)
    s = [f"kafka.bootstrap_servers={bootstrap}", f"input.source={args.source}",
         f"input.topics={json.dumps(topics)}",
         f"input.starting_offsets={'latest' if latency else 'earliest'}",
         f'monitor.policy=["{args.policy}"]', "monitor.alerts.enabled=true",
         f"output.changes_topic={prefix}.changes", f"output.state_topic={prefix}.state",
         f"output.dead_letter_topic={prefix}.dead", f"output.alerts_topic={prefix}.alerts",
         f"output.commit_topic={prefix}.commits", "output.partitions=1",
         f"stream.checkpoint_location={run_dir / 'checkpoint'}", f"stream.query_name={prefix}",
         f"delivery.state_dir={run_dir / 'delivery'}",
         f"metrics.port={args.port_base + 50}", "metrics.address=127.0.0.1",
         'stream.spark_conf={"spark.eventLog.enabled"="true","spark.eventLog.compress"="false","spark.eventLog.dir"="file://'
         f'{run_dir / "eventlog"}","spark.driver.port"="{args.port_base + 60}",'
         f'"spark.blockManager.port"="{args.port_base + 61}"' + '}']
    if args.max_offsets:
        s.append(f"input.max_offsets_per_trigger={args.max_offsets}")
    if latency:
        s.append("stream.trigger_interval=0 seconds")
    return s + args.set


def start_job(args, settings: list[str], run_dir: Path, available_now: bool):
    env = dict(os.environ, PYSPARK_PYTHON=PY, PYSPARK_DRIVER_PYTHON=PY,
               PYTHONPATH=str(TREE), ISR_SPARK_LOG_LEVEL="ERROR",
               # each bucket call's engine cache hit / catch-up / miss (statelog.py)
               ISR_STATE_CACHE_LOG=str(run_dir / "cache.log"))
    if args.floor:  # bench/floor/sitecustomize.py: a bench-only shim, in every process
        env["PYTHONPATH"] = os.pathsep.join((str(TREE / "bench" / "floor"), str(TREE)))
        env["ISR_BENCH_FLOOR"] = args.floor
    else:
        env.pop("ISR_BENCH_FLOOR", None)
    cmd = [PY, "-m", "isr.cli", "run", *(["--available-now"] if available_now else []),
           *[a for o in settings for a in ("--set", o)]]
    (run_dir / "eventlog").mkdir(parents=True, exist_ok=True)
    # cwd: run_dir, so no conf/isr.toml is read (as for bench_realistic.py's replay)
    return subprocess.Popen(cmd, cwd=run_dir, env=env, stdout=open(run_dir / "job.out", "w"),
                            stderr=open(run_dir / "job.err", "w"))


def batches(checkpoint: Path) -> list[dict]:
    """Each committed micro-batch: records read (offsets/N - offsets/N-1),
    when its offsets were written (its start) and when it was committed."""
    out, before = [], None
    commits = sorted(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
    for n in commits:
        text = (checkpoint / "offsets" / str(n)).read_text().strip().splitlines()[-1]
        read = json.loads(text)
        if all(isinstance(v, dict) for v in read.values()):  # Spark's: {topic: {partition: o}}
            offsets = {f"{t}/{p}": o for t, ps in read.items() for p, o in ps.items()}
        else:  # the Python source's: {"topic/partition": o, "~behind": [...], "~clock": ms}
            offsets = {k: o for k, o in read.items() if not k.startswith("~")}
        rows = sum(o - (before or {}).get(k, 0) for k, o in offsets.items())
        out.append({"batch": n, "rows": rows,
                    "start": (checkpoint / "offsets" / str(n)).stat().st_mtime,
                    "end": (checkpoint / "commits" / str(n)).stat().st_mtime})
        before = offsets
    return out


def progress_reports(run_dir: Path) -> list[dict]:
    out = []
    for path in sorted(glob.glob(str(run_dir / "eventlog" / "**" / "*"), recursive=True)):
        if os.path.isdir(path):
            continue
        with open(path, "rb") as f:
            for line in f:
                if b"QueryProgressEvent" in line[:200]:
                    out.append(json.loads(line)["progress"])
    return out


def describe_progress(reports: list[dict]) -> None:
    for p in reports:  # the event log's reports have the rows under sources only
        p.setdefault("numInputRows", input_records(p))
        p.setdefault("inputRowsPerSecond", sum(s.get("inputRowsPerSecond", 0)
                                               for s in p.get("sources") or []))
        p.setdefault("processedRowsPerSecond", sum(s.get("processedRowsPerSecond", 0)
                                                   for s in p.get("sources") or []))
    with_input = [p for p in reports if p.get("numInputRows")]
    if not with_input:
        print("progress: no reports with input (event log missing?)")
        return
    print(f"progress: {len(with_input)} batches with input; per batch (ms):")
    keys = ("latestOffset", "queryPlanning", "walCommit", "addBatch", "commitOffsets",
            "triggerExecution")
    print("  batch    rows   " + " ".join(f"{k[:12]:>12}" for k in keys)
          + "  stateUpd stateCommit  in rows/s proc rows/s")
    for p in with_input:
        d = p["durationMs"]
        ops = p.get("stateOperators") or [{}]
        print(f"  {p['batchId']:>5} {p['numInputRows']:>8,} "
              + " ".join(f"{d.get(k, 0):>12,}" for k in keys)
              + f"  {sum(o.get('allUpdatesTimeMs', 0) for o in ops):>8,}"
              + f" {sum(o.get('commitTimeMs', 0) for o in ops):>11,}"
              + f"  {p.get('inputRowsPerSecond', 0):>9,.0f} {p.get('processedRowsPerSecond', 0):>11,.0f}")
    warm = with_input[1:] or with_input
    rows = sum(p["numInputRows"] for p in warm)
    ms = sum(p["durationMs"]["triggerExecution"] for p in warm)
    add = sum(p["durationMs"].get("addBatch", 0) for p in warm)
    upd = sum(o.get("allUpdatesTimeMs", 0) for p in warm for o in p.get("stateOperators") or [])
    com = sum(o.get("commitTimeMs", 0) for p in warm for o in p.get("stateOperators") or [])
    print(f"  warm batches: {rows:,} rows in {ms / 1000:.1f} s = {rows / (ms / 1000):,.0f} rows/s;"
          f" addBatch {add / ms:.0%} of it; state operator updates {upd / 1000:.1f} s, "
          f"commits {com / 1000:.1f} s (task time, summed over state partitions)")
    last = with_input[-1].get("stateOperators") or [{}]
    print(f"  state rows {sum(o.get('numRowsTotal', 0) for o in last):,}, memory "
          f"{sum(o.get('memoryUsedBytes', 0) for o in last) / 2**20:,.0f} MB (last batch)")


def describe_cache(run_dir: Path) -> None:
    from collections import Counter

    try:
        calls = [line.split() for line in open(run_dir / "cache.log")]
    except OSError:
        return
    kinds = Counter(c[2] for c in calls)
    print(f"  engine cache: {len(calls)} bucket calls: "
          + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items()))
          + f"; {len({c[0] for c in calls})} worker processes ran buckets")


def records(bootstrap: str, topic: str) -> list[dict]:
    from isr.sinks.kafka import read_to_end

    parts = ends(bootstrap, topic)
    return [json.loads(m.value()) for m in read_to_end(
        {"bootstrap.servers": bootstrap}, {(topic, p): 0 for p in parts})]


def newest_ts(paths) -> int:
    newest = 0
    for path in [paths] if isinstance(paths, str) else paths:
        with open(path, "rb") as f:
            for line in f:
                newest = max(newest, orjson.loads(line)["ts"])
    return newest


DECISION = ("ts", "cluster", "topic", "partition", "action", "isr_before", "isr_after", "policy")


def decision(d: dict, shift: int = 0) -> tuple:
    """An isr_change record's DECISION fields (not the reason's numbers),
    its ts moved by `shift`."""
    return tuple(str(d["ts"] + shift if k == "ts" else d.get(k)) for k in DECISION)


def compare(args, bootstrap: str, prefix: str, newest: int, replay_out: str,
            label: str = "replay", kinds=("isr_change", "alert")) -> bool:
    """The job's records of `kinds` against `replay_out`'s below the last
    watermark (`newest` - the allowed lateness): True when identical. A
    difference of isr_change records is also told by their decisions alone
    (ts, partition, action, ISRs, policy: not the reason's numbers)."""
    from isr.config import load_settings

    lateness = load_settings(None, args.set).monitor.allowed_lateness_ms
    watermark = newest - lateness
    expected: dict[str, list] = {k: [] for k in kinds}
    beyond = 0
    with open(replay_out, "rb") as f:
        for line in f:
            d = orjson.loads(line)
            if d["type"] in expected:
                if d["ts"] < watermark:
                    expected[d["type"]].append(d)
                else:
                    beyond += 1
    topic_of = {"isr_change": f"{prefix}.changes", "alert": f"{prefix}.alerts"}
    got = {kind: records(bootstrap, topic_of[kind]) for kind in kinds}
    dead = records(bootstrap, f"{prefix}.dead")
    all_same = True
    for kind in expected:
        e = sorted(expected[kind], key=lambda d: d["id"])
        g = sorted(got[kind], key=lambda d: d["id"])
        same = e == g
        all_same &= same
        print(f"compare {kind} with {label}: job {len(g):,}, {label} {len(e):,} below the last "
              f"watermark ({watermark}): {'IDENTICAL' if same else 'DIFFERENT'}", flush=True)
        if not same:
            eid, gid = {d["id"] for d in e}, {d["id"] for d in g}
            by_id = {d["id"]: d for d in g}
            print(f"  only {label} {len(eid - gid)}, only job {len(gid - eid)}, "
                  f"e.g. {sorted(eid - gid)[:3]} / {sorted(gid - eid)[:3]}; "
                  f"{sum(by_id[d['id']] != d for d in e if d['id'] in by_id)} of both differ")
            if kind == "isr_change":
                same_decisions = sorted(map(decision, e)) == sorted(map(decision, g))
                print(f"  as decisions ({', '.join(DECISION)}): "
                      f"{'identical' if same_decisions else 'DIFFERENT'}")
    print(f"compare with {label}: {beyond} decisions at or past the watermark (not expected); "
          f"dead letters {len(dead)}"
          + (f" e.g. {[(d.get('reason')) for d in dead[:3]]}" if dead else ""), flush=True)
    return all_same


def mb(b: float) -> str:
    return f"{b / 2**20:,.0f} MB"


def run(args) -> None:
    if args.replay_out and not Path(args.replay_out).is_file():
        # checked first: the comparison comes after minutes of running
        raise SystemExit(f"--replay-out {args.replay_out}: no such file (isr replay -o writes it)")
    c = cluster(args)
    try:
        _run(args, c)
    finally:  # a failed run or comparison leaves no cluster behind
        if not args.keep:
            c.stop()


def _run(args, c) -> None:
    bootstrap = c.bootstrap
    path = args.file
    cluster_s = args.seconds
    if args.from_requestlogs:
        base = args.topic or f"tr{uuid.uuid4().hex[:6]}"
        topic, _rows, _startup = tap_into_kafka(args, bootstrap, base)
        n = sum(sum(ends(bootstrap, t).values()) for t in topic)
        inputs = dump_inputs(bootstrap, topic, Path(args.work) / f"{base}.inputs")
        merged_out = Path(args.work) / f"{base}.replay.out.jsonl"
        replay_merged(args, inputs, merged_out)
        print(f"isr replay --merge of the {len(inputs)} input partitions' records: "
              f"{merged_out}", flush=True)
    else:
        topic = args.topic or f"rr.{Path(path).parent.name}.{Path(path).stem}"
        n = load(bootstrap, topic, path, args.input_partitions)
    for rep in range(args.repeat):
        prefix = f"rr{uuid.uuid4().hex[:6]}"
        run_dir = Path(args.work) / prefix
        run_dir.mkdir(parents=True)
        settings = job_settings(args, bootstrap, topic, prefix, run_dir)
        load_avg = os.getloadavg()
        kafka_cpu0 = kafka_cpu(c)
        t0 = time.time()
        job = start_job(args, settings, run_dir, available_now=True)
        w = Watch(job.pid, args.period, str(run_dir / "rss.jsonl") if args.rss_log else None)
        w.start()
        code = job.wait()
        t_end = time.time()
        w.done.set()
        w.join()
        kafka_used = kafka_cpu(c) - kafka_cpu0
        if code != 0:
            print((run_dir / "job.err").read_text()[-3000:])
            raise SystemExit(f"isr run exited {code}")
        b = batches(run_dir / "checkpoint")
        total = sum(x["rows"] for x in b)
        first, last = b[0], b[-1]
        cpu_all = sum(w.cpu.values())
        cpu_first = w.cpu_at(first["end"])
        cpu_last = w.cpu_at(last["end"])
        steady_rows = total - first["rows"]
        steady_cluster_s = cluster_s * steady_rows / n
        steady_cpu = cpu_last - cpu_first
        steady_wall = last["end"] - first["end"]
        kinds = w.cpu_by_kind()
        print(f"\nrun {rep + 1}/{args.repeat} ({prefix}): {n:,} events = {cluster_s:g} s of cluster "
              f"time; {len(b)} batches (max {args.max_offsets or 'all'} records each), "
              f"{total:,} records read; load average before {load_avg[0]:.2f} "
              f"{load_avg[1]:.2f}, after {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f}")
        print(f"  whole run: {last['end'] - t0:.1f} s wall to the last commit "
              f"({t_end - t0:.1f} s to exit), {cpu_all:.1f} CPU s "
              f"({', '.join(f'{k} {v:.1f}' for k, v in sorted(kinds.items()))}) = "
              f"{cluster_s / cpu_all:.2f}x real time per core, "
              f"{2 * cluster_s / cpu_all:.2f}x on 2 cores; "
              f"{cluster_s / (last['end'] - t0):.2f}x by the wall clock")
        engine_cpu = sum(c for pid, c in w.cpu.items() if pid in w.engines)
        print(f"  workers split: engine processes {engine_cpu:.1f} CPU s, task workers and "
              f"daemon {kinds.get('workers', 0.0) - engine_cpu:.1f}")
        print(f"  first batch: {first['rows']:,} records, committed {first['end'] - t0:.1f} s "
              f"after the start, {cpu_first:.1f} CPU s by then")
        if steady_rows:
            print(f"  from the first batch's commit on: {steady_rows:,} records = "
                  f"{steady_cluster_s:.1f} s of cluster time in {steady_wall:.1f} s wall, "
                  f"{steady_cpu:.1f} CPU s = {steady_cluster_s / steady_cpu:.2f}x per core, "
                  f"{2 * steady_cluster_s / steady_cpu:.2f}x on 2 cores, "
                  f"{steady_cluster_s / steady_wall:.2f}x by the wall clock")
        print(f"  peak RSS: driver JVM {mb(w.peak['jvm'])}, Python driver "
              f"{mb(w.peak['driver'])}, Python workers {mb(w.peak['workers'])} "
              f"(up to {w.peak_workers} processes); sum {mb(w.peak['sum'])} "
              f"(PSS: {mb(w.peak_pss['jvm'])}, {mb(w.peak_pss['driver'])}, "
              f"{mb(w.peak_pss['workers'])}; sum {mb(w.peak_pss['sum'])})")
        print(f"  the Kafka cluster (4 JVMs) used {kafka_used:.1f} CPU s meanwhile", flush=True)
        describe_progress(progress_reports(run_dir))
        describe_cache(run_dir)
        if args.from_requestlogs:
            compare(args, bootstrap, prefix, newest_ts(inputs), str(merged_out),
                    "replay --merge of the input topics")
            if args.replay_out:  # the alerts follow the appends, which the tap infers
                compare(args, bootstrap, prefix, newest_ts(inputs), args.replay_out,
                        "replay of the original events", kinds=("isr_change",))
        elif args.replay_out:
            compare(args, bootstrap, prefix, newest_ts(path), args.replay_out)


def kafka_cpu(c) -> float:
    stats = _stats()
    pids = [c.pid(n) for n in c.nodes]
    return sum(stats[p][1] for p in pids if p in stats)


def latency(args) -> None:
    """The file at real-time pace, ts shifted to the wall clock."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    from isr.kafka.client import ensure_topics, send

    c = cluster(args)
    bootstrap = c.bootstrap
    prefix = f"rl{uuid.uuid4().hex[:6]}"
    topic = f"{prefix}.in"
    ensure_topics({"bootstrap.servers": bootstrap}, [topic], args.input_partitions, 1)
    run_dir = Path(args.work) / prefix
    run_dir.mkdir(parents=True)
    settings = job_settings(args, bootstrap, topic, prefix, run_dir, latency=True)
    t0 = time.time()
    job = start_job(args, settings, run_dir, available_now=False)
    w = Watch(job.pid)
    w.start()
    ensure_topics({"bootstrap.servers": bootstrap}, [f"{prefix}.changes"], 1, 1)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench",
                         "enable.auto.commit": False, "log_level": 0})
    consumer.assign([TopicPartition(f"{prefix}.changes", 0, 0)])
    # the job's start-up: wait for its first (empty) batches
    while not (run_dir / "checkpoint" / "commits").is_dir() or not any(
            (run_dir / "checkpoint" / "commits").iterdir()):
        if job.poll() is not None:
            raise SystemExit((run_dir / "job.err").read_text()[-3000:])
        time.sleep(0.5)
    time.sleep(args.warmup)
    print(f"latency: job up after {time.time() - t0:.0f} s; feeding {args.file} in real time",
          flush=True)
    latencies: list[float] = []
    arrived: list[dict] = []

    def poll_changes(timeout: float) -> None:
        m = consumer.poll(timeout)
        while m is not None:
            if not m.error():
                d = json.loads(m.value())
                if d["type"] == "isr_change":
                    latencies.append(time.time() * 1000 - d["ts"])
                    arrived.append(d)
            m = consumer.poll(0)

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "log_level": 0,
                  "queue.buffering.max.messages": 500000, "message.max.bytes": 10_000_000})
    shift = None
    behind = []
    fed_from = time.time()
    cpu0 = w.samples[-1][1] if w.samples else 0.0
    kafka_cpu0 = kafka_cpu(c)
    n = 0
    period = check_period(args)
    with open(args.file, "rb") as f:
        for line in f:
            ev = orjson.loads(line)
            now_ms = time.time() * 1000
            if shift is None:
                shift = ceil_to(int(now_ms) - ev["ts"], period)
                first_ts = ev["ts"] + shift
            ev["ts"] += shift
            wait = (ev["ts"] - time.time() * 1000) / 1000
            if wait > 0.005:
                p.poll(0)
                poll_changes(0)
                time.sleep(wait)
            elif wait < -0.05:
                behind.append(-wait)
            send(p, topic, orjson.dumps(ev), routing_key(ev))
            n += 1
            if n % 2000 == 0:
                p.poll(0)
    p.flush(60)
    fed = time.time() - fed_from
    last_ts = ev["ts"]
    print(f"latency: fed {n:,} events in {fed:.1f} s (the file spans "
          f"{(last_ts - first_ts) / 1000:.1f} s); "
          f"the feeder was behind by > 50 ms at {len(behind):,} events "
          f"(max {max(behind, default=0):.2f} s)", flush=True)
    deadline = time.time() + args.drain
    while time.time() < deadline:
        poll_changes(0.2)
    cpu1 = w.samples[-1][1]
    kafka_used = kafka_cpu(c) - kafka_cpu0
    job.send_signal(2)
    try:
        job.wait(60)
    except subprocess.TimeoutExpired:
        job.kill()
        job.wait()
    w.done.set()
    w.join()
    consumer.close()
    if latencies:
        latencies.sort()
        p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]
        print(f"latency: {len(latencies)} isr_change records: event->decision p50 "
              f"{statistics.median(latencies):,.0f} ms, p99 {p99:,.0f} ms, max "
              f"{latencies[-1]:,.0f} ms (allowed lateness {args.lateness_note})")
    else:
        print("latency: no isr_change arrived")
    if args.replay_out:
        same_as_replay(args.replay_out, arrived, shift)
    print(f"latency: job CPU while fed and drained ({fed + args.drain:.0f} s wall): "
          f"{cpu1 - cpu0:.1f} CPU s = {(cpu1 - cpu0) / (fed + args.drain):.2f} cores busy; "
          f"Kafka {kafka_used:.1f} CPU s; peak RSS sum {mb(w.peak['sum'])} (JVM "
          f"{mb(w.peak['jvm'])}, driver {mb(w.peak['driver'])}, workers {mb(w.peak['workers'])})")
    describe_progress(progress_reports(run_dir))
    describe_cache(run_dir)
    if not args.keep:
        c.stop()


def check_period(args) -> int:
    """The isr-expiration period of the run's settings (its checks' spacing)."""
    from isr.config import load_settings
    from isr.model.rules import Rules

    monitor = load_settings(None, [f'monitor.policy=["{args.policy}"]', *args.set]).monitor
    return Rules.for_policy(args.policy, monitor.replica_lag_time_max_ms,
                            monitor.isr_expiration_interval_ms).interval_ms


def same_as_replay(replay_out: str, arrived: list[dict], shift: int) -> None:
    """Print whether the changes that arrived are the file's replay's
    (their decisions, ts shifted): the job ran the same rules on the same
    events, so they must be, whatever the batches."""
    with open(replay_out, "rb") as f:
        expected = sorted(decision(d, shift) for d in map(orjson.loads, f)
                          if d["type"] == "isr_change")
    got = sorted(map(decision, arrived))
    print(f"latency: isr_change records {'IDENTICAL to' if got == expected else 'DIFFERENT from'}"
          f" the replay's ({len(got)} arrived, {len(expected)} in {replay_out})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("mode", choices=["run", "latency", "stop"])
    ap.add_argument("file", nargs="?")
    ap.add_argument("--seconds", type=float, default=None,
                    help="the file's cluster time (default: from session-<N>.jsonl)")
    ap.add_argument("--replay-out", default=None,
                    help="isr replay's output of the file (default: <file>.out.jsonl if present)")
    ap.add_argument("--topic", default=None)
    ap.add_argument("--input-partitions", type=int, default=2)
    ap.add_argument("--source", choices=("kafka", "python"), default="kafka",
                    help="input.source: Spark's Kafka source (default) or the Python one")
    ap.add_argument("--from-requestlogs", metavar="DIR",
                    help="run mode: the file's request logs in DIR (bench/bench_reqtap.py "
                         "--render; rendered here when missing) through `isr tap "
                         "request-log --to kafka://` per broker instead of the file itself; "
                         "compared with `isr replay --merge` of the input topics")
    ap.add_argument("--tap-topics", choices=("broker", "first", "one"), default="broker",
                    help="with --from-requestlogs: a topic per broker's tap and one for the "
                         "metadata events (broker), the metadata events ahead of the first "
                         "broker's tap in its topic (first), or everything in one topic (one)")
    ap.add_argument("--tap-jobs", type=int, default=2, help="taps running at a time")
    ap.add_argument("--max-offsets", type=int, default=100_000,
                    help="input.max_offsets_per_trigger (0: all in one batch)")
    ap.add_argument("--policy", default="kafka")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--work", default="/tmp/realrun/run")
    ap.add_argument("--port-base", type=int, default=21100)
    ap.add_argument("--keep", action="store_true", help="leave the Kafka cluster running")
    ap.add_argument("--warmup", type=float, default=10)
    ap.add_argument("--drain", type=float, default=20)
    ap.add_argument("--period", type=float, default=0.5, help="the process poll's period, s")
    ap.add_argument("--floor", default="", metavar="MODE",
                    help="bench/floor/sitecustomize.py's shim in the job's processes: 'engine' "
                         "(bucket calls without domain work) or 'engine,pack' (no decode either)")
    ap.add_argument("--rss-log", action="store_true",
                    help="write every poll's per-process RSS/PSS/CPU to <run dir>/rss.jsonl "
                         "(bench/rss_timeline.py summarises it)")
    args = ap.parse_args()
    args.lateness_note = next((s.split("=", 1)[1] for s in args.set
                               if s.startswith("monitor.allowed_lateness_ms=")), "5000")
    Path(args.work).mkdir(parents=True, exist_ok=True)
    if args.mode == "stop":
        cluster(args, start=False).stop()
        return
    if args.seconds is None:
        args.seconds = float(Path(args.file).stem.rsplit("-", 1)[1])
    if args.replay_out is None:
        out = Path(args.file).with_suffix(".out.jsonl")
        args.replay_out = str(out) if out.exists() else None
    {"run": run, "latency": latency}[args.mode](args)


if __name__ == "__main__":
    main()
