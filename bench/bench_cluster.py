"""Scale-out on a Spark standalone cluster: the same benchmark on 1 and on 2
workers (1 core each), all on this machine's loopback (the cluster of
tests/cluster.py: master, workers from the installed pyspark).

    python bench/bench_cluster.py --workers 1 stateful --events 1000000 --batch 1000000
    python bench/bench_cluster.py --workers 2 stateful --events 1000000 --batch 1000000

Everything after --workers N goes to bench_stream.py, with --master set to
the cluster and --buckets to N (one bucket per executor core). Ports:
TEST_SPARK_PORT_BASE (default 19400) and up, as in tests/cluster.py.

After the run it reads Spark's event log of the application and prints where
each micro-batch's stateful tasks ran (executor, start and end), how much the
buckets' tasks overlapped in time, the executors' JVM CPU time (Spark's
task metrics: the Python workers' CPU is not in them), and the machine's
busy cores over the run (/proc/stat: everything on it, other users too).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from cluster import StandaloneCluster  # noqa: E402


def cpu_ticks() -> tuple[int, int]:
    """(busy, total) jiffies of the whole machine so far."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return sum(fields) - idle, sum(fields)


def task_ends(event_log: Path):
    """The SparkListenerTaskEnd events of an application's event log: a file
    of JSON lines, or (Spark 4's default) a directory of such files."""
    files = sorted(event_log.glob("events_*")) if event_log.is_dir() else [event_log]
    for path in files:
        if path.suffix == ".zstd":  # spark.eventLog.compress (an earlier run's)
            text = subprocess.run(["zstd", "-dc", str(path)], capture_output=True,
                                  check=True).stdout.decode()
        else:
            text = path.read_text()
        for line in text.splitlines():
            ev = json.loads(line)
            if ev.get("Event") == "SparkListenerTaskEnd":
                yield ev


def stateful_tasks(event_log: Path) -> list[dict]:
    """The tasks that read a shuffle (the buckets' stateful tasks: the only
    shuffle of the job)."""
    tasks = []
    for ev in task_ends(event_log):
        metrics = ev.get("Task Metrics") or {}
        read = metrics.get("Shuffle Read Metrics") or {}
        if not (read.get("Remote Blocks Fetched", 0) + read.get("Local Blocks Fetched", 0)):
            continue
        info = ev["Task Info"]
        tasks.append({"stage": ev["Stage ID"], "partition": info.get("Partition ID", info["Index"]),
                      "executor": info["Executor ID"], "locality": info["Locality"],
                      "start": info["Launch Time"], "end": info["Finish Time"],
                      "cpu_s": metrics.get("Executor CPU Time", 0) / 1e9})
    return tasks


def report(event_log: Path) -> None:
    tasks = stateful_tasks(event_log)
    by_stage: dict[int, list[dict]] = defaultdict(list)
    for t in tasks:
        by_stage[t["stage"]].append(t)
    both = 0
    for stage, ts in sorted(by_stage.items()):
        ts.sort(key=lambda t: t["partition"])
        lo, hi = min(t["start"] for t in ts), max(t["end"] for t in ts)
        overlap = max(0, min(t["end"] for t in ts) - max(t["start"] for t in ts))
        executors = {t["executor"] for t in ts}
        both += len(executors) > 1
        print(f"  stage {stage}: " + ", ".join(
            f"bucket task {t['partition']} on executor {t['executor']} ({t['locality']}) "
            f"{(t['start'] - lo) / 1000:.1f}-{(t['end'] - lo) / 1000:.1f} s"
            for t in ts) + f"; tasks overlap {overlap / 1000:.1f} s of {(hi - lo) / 1000:.1f} s")
    cpu: dict[str, float] = defaultdict(float)
    for ev in task_ends(event_log):
        cpu[ev["Task Info"]["Executor ID"]] += \
            (ev.get("Task Metrics") or {}).get("Executor CPU Time", 0) / 1e9
    print(f"stateful stages on more than one executor: {both} of {len(by_stage)}; "
          "executors' task CPU (JVM): "
          + ", ".join(f"executor {e} {s:.1f} s" for e, s in sorted(cpu.items())))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, required=True)
    args, rest = ap.parse_known_args()
    base = Path(tempfile.mkdtemp(prefix="isr-bench-cluster-"))
    events = base / "events"
    events.mkdir()
    with StandaloneCluster(base, workers=args.workers) as cluster:
        # Executors run this checkout's code with this interpreter's packages.
        conf = cluster.conf() + ["--conf", f"spark.executorEnv.PYTHONPATH={HERE.parent}",
                                 # The first batch waits for every executor, so
                                 # the buckets' state is spread from the start
                                 # (later batches run each bucket where its
                                 # state is loaded: spark.locality.wait).
                                 "--conf", "spark.scheduler.minRegisteredResourcesRatio=1.0",
                                 "--conf", "spark.eventLog.enabled=true",
                                 "--conf", "spark.eventLog.compress=false",
                                 "--conf", f"spark.eventLog.dir={events.as_uri()}"]
        env = dict(os.environ, PYSPARK_PYTHON=sys.executable,
                   PYTHONPATH=str(HERE.parent),
                   PYSPARK_SUBMIT_ARGS=" ".join(shlex.quote(c) for c in conf) + " pyspark-shell")
        cmd = [sys.executable, str(HERE / "bench_stream.py"), *rest,
               "--master", cluster.master_url, "--buckets", str(args.workers)]
        busy0, total0, t0 = *cpu_ticks(), time.monotonic()
        code = subprocess.run(cmd, env=env).returncode
        busy1, total1, t1 = *cpu_ticks(), time.monotonic()
    ncpu = os.cpu_count() or 1
    print(f"machine: {(busy1 - busy0) / (total1 - total0) * ncpu:.2f} of {ncpu} cores busy "
          f"on average over {t1 - t0:.0f} s (everything on it); load average now "
          f"{Path('/proc/loadavg').read_text().split()[:3]}")
    for log in sorted(events.iterdir()):
        report(log)
    return code


if __name__ == "__main__":
    if sys.argv[1:2] == ["--report"]:  # an event log kept from an earlier run
        sys.exit(report(Path(sys.argv[2])))
    sys.exit(main())
