"""A realistic cluster through the local path (issue 23): can `isr replay`
(the local engine, alerts on) follow it in real time, and with what headroom?

The cluster (the simulator, isr/sim/cluster.py, session grain): `--partitions`
partitions, RF 3, `--brokers` brokers, Kafka's own replica placement (every
broker pair shares partitions: one fetch session per leader/follower pair);
`--active` of the partitions get a produce of 100 messages every second, the
others none; every follower broker sends one FETCH per leader broker, which
waits at most `replica.fetch.wait.max.ms` (500 ms) for data, so every session
fetches at least every ~500 ms and at once when a partition it follows gets
data; broker `--stall-broker` stops (a GC pause) for `--stall-ms` every
`--stall-every-s` seconds.

It writes `--seconds` of that cluster as session events to a file, replays
the file with `isr replay` (a subprocess, alerts on, decisions to a file) and
reports events per CPU second, how many times faster than the cluster's own
time the replay ran per core (and by the wall clock), and its peak RSS. Then the same for the first
`--partition-seconds` of the same run, at the session grain and written as
per-partition fetches (the session FETCHes expanded: one `fetch` per
partition of the session), like for like.

    .venv/bin/python bench/bench_realistic.py --partitions 100000 --brokers 30 --seconds 60
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import orjson

from isr.sim.cluster import Simulator
from isr.sim.scenario import Scenario


def scenario(partitions: int, brokers: int, active: float, seconds: float, stall_broker: int,
             stall_ms: int, stall_every_s: float, stall_at_s: float = 10) -> Scenario:
    busy = max(1, round(partitions * active))
    topics = [{"name": "busy", "partitions": busy, "min_insync_replicas": 2,
               "placement": "kafka",
               "workload": {"kind": "steady", "interval_ms": 1000, "jitter_ms": 100,
                            "messages": 100}}]
    if partitions > busy:
        topics.append({"name": "quiet", "partitions": partitions - busy,
                       "min_insync_replicas": 2, "placement": "kafka",
                       "workload": {"kind": "idle"}})
    faults = []
    if stall_ms > 0:
        faults.append({"kind": "gc_pause", "broker": stall_broker, "at_ms": int(stall_at_s * 1000),
                       "duration_ms": stall_ms, "repeat_every_ms": int(stall_every_s * 1000)})
    return Scenario.model_validate({
        "name": "realistic", "title": "a realistic cluster", "description": "bench",
        "duration_ms": int(seconds * 1000), "brokers": list(range(1, brokers + 1)),
        "topics": topics, "faults": faults})


def write(sc: Scenario, path: Path, expand: bool, seconds: float) -> tuple[Counter, int, float]:
    """The run's events to `path`; (counts by type, partitions listed, seconds)."""
    counts: Counter = Counter()
    listed = 0
    start = time.perf_counter()
    end = sc.start_ts + int(seconds * 1000)
    with open(path, "wb") as out:
        for ev in Simulator(sc, grain="session", expand=expand).events():
            if ev["ts"] >= end:
                break
            counts[ev["type"]] += 1
            if ev["type"] == "fetch_session":
                listed += len(ev["partitions"])
            out.write(orjson.dumps(ev) + b"\n")
    return counts, listed, time.perf_counter() - start


def count(path: Path) -> tuple[Counter, int, float]:
    """What `write` returns, read back from a file it wrote (no simulator time)."""
    counts: Counter = Counter()
    listed = 0
    with open(path, "rb") as f:
        for line in f:
            ev = orjson.loads(line)
            counts[ev["type"]] += 1
            if ev["type"] == "fetch_session":
                listed += len(ev["partitions"])
    return counts, listed, 0.0


def replay(path: Path, out: Path, extra: list[str]) -> tuple[float, float, float]:
    """`isr replay` in a child process: (wall seconds, CPU seconds, its peak
    RSS in MB). On a machine shared with other work the CPU seconds are the
    fairer measure: the replay is one single-threaded process."""
    cmd = [sys.executable, "-m", "isr.cli", "replay", str(path), "-q", "-o", str(out), *extra]
    start = time.perf_counter()
    child = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _pid, status, usage = os.wait4(child.pid, 0)  # this child's own CPU time and peak RSS
    wall = time.perf_counter() - start
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode != 0:
        raise SystemExit(f"isr replay failed ({child.returncode}): "
                         f"{child.stderr.read().decode()[-2000:]}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def report(label: str, counts: Counter, listed: int, gen_s: float, seconds: float,
           wall: float, cpu: float, rss_mb: float, out: Path) -> None:
    n = sum(counts.values())
    changes = sum(1 for line in open(out, "rb") if b'"isr_change"' in line)
    kinds = ", ".join(f"{k} {v:,}" for k, v in sorted(counts.items()))
    print(f"{label}: {n:,} events over {seconds:g} s of cluster time ({n / seconds:,.0f}/s; "
          f"{kinds}" + (f"; {listed:,} partitions listed" if listed else "") + ")")
    print(f"  simulator {gen_s:.1f} s; isr replay {wall:.1f} s wall, {cpu:.1f} s CPU = "
          f"{n / cpu:,.0f} events per CPU second, {seconds / cpu:.2f}x real time per core "
          f"({seconds / wall:.2f}x by the wall clock), peak RSS {rss_mb:,.0f} MB, "
          f"{changes} isr_change records")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--partitions", type=int, default=100_000)
    ap.add_argument("--brokers", type=int, default=30)
    ap.add_argument("--active", type=float, default=0.10)
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--partition-seconds", type=float, default=2,
                    help="cluster time written per partition for the comparison (0: none)")
    ap.add_argument("--stall-broker", type=int, default=7)
    ap.add_argument("--stall-ms", type=int, default=35_000,
                    help="a stall longer than replica.lag.time.max.ms (30 s) shrinks")
    ap.add_argument("--stall-every-s", type=float, default=45)
    ap.add_argument("--policy", default="kafka")
    ap.add_argument("--stall-at-s", type=float, default=10)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a monitor setting for isr replay, "
                         "e.g. monitor.replica_lag_time_max_ms=10000")
    ap.add_argument("--steady-from", type=float, default=20,
                    help="also replay the first S s at the session grain: the difference of the "
                         "two replays' CPU is the steady state, without the fixed start (the "
                         "leader events, the first full requests) and end (every partition's "
                         "final state); 0: not measured")
    ap.add_argument("--dir", default=None, help="where the event files go (default: a temp dir)")
    ap.add_argument("--reuse", action="store_true",
                    help="replay the event files already in --dir instead of writing them again "
                         "(the 100 k cluster takes minutes of simulator time)")
    args = ap.parse_args()
    where = Path(args.dir or tempfile.mkdtemp(prefix="isr-realistic-"))
    where.mkdir(parents=True, exist_ok=True)
    sc = scenario(args.partitions, args.brokers, args.active, args.seconds, args.stall_broker,
                  args.stall_ms, args.stall_every_s, args.stall_at_s)
    extra = ["--policy", args.policy, *[x for kv in args.set for x in ("--set", kv)]]
    print(f"{args.partitions:,} partitions, RF 3, {args.brokers} brokers, {args.active:.0%} "
          f"produced to (100 messages/s each), broker {args.stall_broker} stalls "
          f"{args.stall_ms / 1000:g} s every {args.stall_every_s:g} s from +{args.stall_at_s:g} s; "
          f"policy {args.policy}, alerts on {' '.join(args.set)}; "
          f"load average {os.getloadavg()[0]:.1f} on "
          f"{os.cpu_count()} cores")
    runs = [("session grain", False, args.seconds)]
    steady = 0 < args.steady_from < args.seconds
    if steady:
        runs.append(("session grain, first seconds", False, args.steady_from))
    if args.partition_seconds > 0:  # like for like: the same first seconds at both grains
        runs += [("session grain, same window", False, args.partition_seconds),
                 ("partition grain", True, args.partition_seconds)]
    cpu_of: dict[float, float] = {}
    for label, expand, seconds in runs:
        path = where / f"{'partition' if expand else 'session'}-{seconds:g}.jsonl"
        if args.reuse and args.dir and path.exists():
            counts, listed, gen_s = count(path)
        else:
            counts, listed, gen_s = write(sc, path, expand, seconds)
        out = where / f"{path.stem}.out.jsonl"
        wall, cpu, rss = replay(path, out, extra)
        report(label, counts, listed, gen_s, seconds, wall, cpu, rss, out)
        if not expand:
            cpu_of[seconds] = cpu
        if not args.dir:
            path.unlink()
    if steady:
        # What following the cluster costs once started: a long-running job
        # pays the start once, and no replay's final states.
        per_s = (cpu_of[args.seconds] - cpu_of[args.steady_from]) / (args.seconds - args.steady_from)
        print(f"steady state (+{args.steady_from:g} s to +{args.seconds:g} s): {per_s:.3f} CPU s "
              f"per second of cluster time = {1 / per_s:.2f}x real time per core")


if __name__ == "__main__":
    main()
