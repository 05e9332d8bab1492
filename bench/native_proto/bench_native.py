"""What a native domain core would give (issue 23, branch `native`): the
`kafka` policy's per-partition leader model in Rust (src/lib.rs, PyO3)
against the Python model, on gen.py's per-partition streams, one core.

    python -P bench/native_proto/bench_native.py --so-dir /tmp/native/build \
        --mypyc-tree /tmp/native/mypyc --rounds 3

Each stage runs in its own child process (a mypyc-compiled tree cannot be
imported beside the plain one), in rounds whose stage order rotates; a child
decodes its input untimed, then times its stage in CPU seconds of its own
(process_time), the cyclic GC off as `isr replay` and the Spark operator's
calls run the engine (isr/gc_tuning.py; the reference runs as
bench_reference.py runs it). Stages:
  python         LocalEngine.apply_in_order + finish, alerts off (validated events)
  python-alerts  the same with the standard alert rules (bench_local's "model, kafka")
  mypyc          `python` on the tree given by --mypyc-tree (scripts/build-native run in it)
  rust-event     the Rust model, one Python call per event, from Python int columns
  rust-batch     the Rust model fed the whole stream as int64 columns in one call
  rust-file      rust-batch plus reading the JSON lines with orjson into the columns
  rust-json      the Rust model reading the file itself (serde_json, keys to ids in a
                 HashMap): a native replay of this grain, no Python per event
  reference      bench_reference.py's plain-Python reference model (it reads the file)
  replay         `isr replay`'s path from the file (decode + validate + engine), alerts off
Every model stage's isr_change decisions (ts, cluster/topic/partition, id,
action, leader, epoch, replicas, ISR before/after, HW, leader LEO, reason,
details) must equal the `python` stage's, compared sorted (the engine's end
checks visit partitions in its deadline order, the Rust model in id order):
the bench exits 1 on the first difference. The reference is compared by count.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import pickle
import statistics
import subprocess
import sys
import time
from array import array

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.dirname(HERE)
TREE = os.path.dirname(BENCH)
KIND = {"leader": 0, "append": 1, "fetch": 2}
NO_HW = -(1 << 63)
MODEL_STAGES = ("python", "python-alerts", "mypyc", "rust-event", "rust-batch", "rust-file",
                "rust-json")
ALL_STAGES = MODEL_STAGES + ("reference", "replay")


# ---------------------------------------------------------------- the child
def load_events(path: str) -> list:
    from isr.contract import validate
    import orjson
    with open(path, "rb") as f:
        return [validate(orjson.loads(line)) for line in f]


def columns_of(lines) -> tuple[list, list, int]:
    """The events as int columns (kind, ts, pid, leader, epoch, replica,
    fetch_ts, offset, leader_leo), the (replicas, isr) of leader events, and
    the pid -> key list. A leader event's replica column indexes its
    assignment, its offset column is its start offset, its leader_leo its hw."""
    import orjson
    cols: list[list] = [[] for _ in range(9)]
    kind, ts, pid, leader, epoch, replica, fetch_ts, offset, leo = cols
    pids: dict = {}
    keys: list = []
    assignments: list = []
    for line in lines:
        e = orjson.loads(line)
        key = (e.get("cluster", "default"), e["topic"], e["partition"])
        p = pids.get(key)
        if p is None:
            p = pids[key] = len(keys)
            keys.append(key)
        t = e["ts"]
        k = KIND[e["type"]]
        kind.append(k)
        ts.append(t)
        pid.append(p)
        leader.append(e["leader"])
        epoch.append(e["leader_epoch"])
        if k == 2:
            replica.append(e["replica"])
            received = e.get("received_ts")
            fetch_ts.append(t if received is None else received)
            offset.append(e["fetch_offset"])
            leo.append(e["leader_leo"])
        elif k == 1:
            replica.append(-1)
            fetch_ts.append(t)
            offset.append(-1)
            leo.append(e["leader_leo"])
        else:
            replica.append(len(assignments))
            assignments.append((e["replicas"], e["isr"]))
            fetch_ts.append(t)
            offset.append(e["leader_epoch_start_offset"])
            hw = e.get("hw")
            leo.append(NO_HW if hw is None else hw)
    return cols, assignments, keys


def normal_python(decisions) -> list:
    return sorted(
        (d.cluster, d.topic, d.partition, d.ts, d.id, d.action, d.leader, d.leader_epoch,
         tuple(d.replicas), tuple(d.isr_before), tuple(d.isr_after), d.hw, d.leader_leo,
         d.cause, d.bootstrap, d.reason,
         tuple((x.replica, x.leo, x.lag_ms, x.last_caught_up_ts, x.last_fetch_ts)
               for x in d.details))
        for d in decisions if getattr(d, "type", "") == "isr_change")


def normal_rust(decisions, keys: list) -> list:
    out = []
    for (pid, ts, action, leader, epoch, seq), (replicas, before, after), (hw, leo, reason,
                                                                           details) in decisions:
        cluster, topic, partition = keys[pid]
        out.append((cluster, topic, partition, ts, f"{cluster}/{topic}/{partition}/kafka/{seq}",
                    action, leader, epoch, tuple(replicas), tuple(before), tuple(after), hw, leo,
                    "leader", False, reason, tuple(details)))
    return sorted(out)


def run_model_python(path: str, alerts: bool, lag: int) -> tuple[float, list, dict]:
    from isr.config import AlertSettings, MonitorSettings
    from isr.gc_tuning import no_gc_passes
    from isr.pipeline.listeners import local_engine
    events = load_events(path)
    monitor = MonitorSettings(replica_lag_time_max_ms=lag)
    if not alerts:
        monitor = monitor.model_copy(update={"alerts": AlertSettings(enabled=False)})
    start = time.process_time()
    with no_gc_passes():  # as `isr replay` and the Spark operator's calls run the engine
        engine = local_engine(monitor)
        engine.apply_in_order(events)
        engine.finish()
    secs = time.process_time() - start
    return secs, normal_python(engine.decisions), {"ignored": sum(engine.ignored.values())}


def run_rust(path: str, stage: str, lag: int) -> tuple[float, list, dict]:
    import isr_native_proto as native
    from isr.gc_tuning import no_gc_passes
    if stage == "rust-json":
        start = time.process_time()
        with no_gc_passes():
            model = native.Model(lag)
            max_ts, keys = model.apply_file(path)
            model.finish(max_ts)
            decisions = model.take_decisions()
        secs = time.process_time() - start
        parts, held = model.memory()
        return secs, normal_rust(decisions, keys), {"counts": model.counts(), "partitions": parts,
                                                   "bytes": held}
    if stage == "rust-file":
        start = time.process_time()
        with no_gc_passes():
            with open(path, "rb") as f:
                cols, assignments, keys = columns_of(f)
            arrays = [array("q", c) for c in cols]
        decode = time.process_time() - start
    else:
        with open(path, "rb") as f:
            cols, assignments, keys = columns_of(f)
        arrays = [array("q", c) for c in cols]
        start = time.process_time()
    with no_gc_passes():
        max_ts = max(cols[1])
        model, decisions = feed_rust(native.Model(lag), stage, cols, arrays, assignments, max_ts)
    secs = time.process_time() - start
    parts, held = model.memory()
    extra = {"counts": model.counts(), "partitions": parts, "bytes": held}
    if stage == "rust-file":
        extra["decode_s"] = decode
    return secs, normal_rust(decisions, keys), extra


def feed_rust(model, stage: str, cols: list, arrays: list, assignments: list, max_ts: int):
    if stage == "rust-event":
        fetch, append, leader = model.fetch, model.append, model.leader
        for k, ts, pid, ld, ep, rep, fts, off, leo in zip(*cols):
            if k == 2:
                fetch(ts, pid, rep, ld, ep, fts, off, leo)
            elif k == 1:
                append(ts, pid, ld, ep, leo)
            else:
                replicas, isr = assignments[rep]
                leader(ts, pid, ld, ep, off, replicas, isr, None if leo == NO_HW else leo)
    else:
        model.apply_batch(*arrays, assignments)
    model.finish(max_ts)
    return model, model.take_decisions()


def run_child(args) -> None:
    lag = args.lag
    if args.stage in ("python", "mypyc", "python-alerts"):
        secs, decisions, extra = run_model_python(args.input, args.stage == "python-alerts", lag)
    elif args.stage.startswith("rust"):
        secs, decisions, extra = run_rust(args.input, args.stage, lag)
    elif args.stage == "reference":
        sys.path.insert(0, BENCH)
        from bench_reference import reference
        start = time.process_time()
        count = reference(args.input, lag)
        secs, decisions, extra = time.process_time() - start, None, {"count": count}
    elif args.stage == "replay":
        from isr.config import AlertSettings, MonitorSettings
        from isr.pipeline.local import replay
        monitor = MonitorSettings(replica_lag_time_max_ms=lag,
                                  alerts=AlertSettings(enabled=False))
        start = time.process_time()
        result = replay([args.input], monitor)
        secs = time.process_time() - start
        decisions, extra = normal_python(result.decisions), {}
    else:
        raise SystemExit(f"unknown stage {args.stage}")
    if decisions is not None:
        with open(args.out, "wb") as f:
            pickle.dump(decisions, f)
        extra["count"] = len(decisions)
        extra["digest"] = hashlib.md5(repr(decisions).encode()).hexdigest()
    import isr
    extra["isr"] = os.path.dirname(isr.__file__) if "isr" in sys.modules else ""
    print(json.dumps({"stage": args.stage, "cpu_s": secs, **extra}))


# ---------------------------------------------------------------- the parent
def make_input(path: str, partitions: int, events: int, round_ms) -> int:
    if not os.path.exists(path):
        sys.path.insert(0, BENCH)
        import orjson
        from gen import stream
        with open(path + ".tmp", "wb") as f:
            for e in stream(partitions, events, round_ms=round_ms):
                f.write(orjson.dumps(e) + b"\n")
        os.replace(path + ".tmp", path)
    with open(path, "rb") as f:
        return sum(1 for _ in f)


def child(stage: str, path: str, args, out: str) -> dict:
    tree = args.mypyc_tree if stage == "mypyc" else TREE
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([tree, args.so_dir]))
    cmd = [sys.executable, "-P", os.path.abspath(__file__), "--stage", stage, "--input", path,
           "--out", out, "--lag", str(args.lag)]
    if args.cpu is not None:
        cmd = ["taskset", "-c", str(args.cpu)] + cmd
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.stderr.write(done.stderr)
        raise SystemExit(f"stage {stage} failed")
    return json.loads(done.stdout.strip().splitlines()[-1])


def first_difference(a: str, b: str) -> str:
    with open(a, "rb") as f:
        left = pickle.load(f)
    with open(b, "rb") as f:
        right = pickle.load(f)
    for i, (x, y) in enumerate(zip(left, right)):
        if x != y:
            return f"decision {i}:\n  python {x}\n  other  {y}"
    return f"{len(left)} decisions against {len(right)}"


def parent(args) -> None:
    os.makedirs(args.work, exist_ok=True)
    streams = []
    for spec in args.streams:
        partitions, events, round_ms = (spec.split(":") + [""])[:3]
        name = f"p{partitions}-e{events}" + (f"-r{round_ms}" if round_ms else "")
        path = os.path.join(args.work, name + ".jsonl")
        n = make_input(path, int(partitions), int(events), int(round_ms) if round_ms else None)
        streams.append((name, path, n))
    stages = [s for s in args.stages.split(",") if s != "mypyc" or args.mypyc_tree]
    failed = False
    for name, path, n in streams:
        results: dict = {s: [] for s in stages}
        for rnd in range(args.rounds):
            order = stages[rnd % len(stages):] + stages[:rnd % len(stages)]
            for stage in order:
                out = os.path.join(args.work, f"{name}.{stage}.pkl")
                r = child(stage, path, args, out)
                r["load"] = os.getloadavg()[0]
                results[stage].append(r)
                print(f"# {name} round {rnd + 1} {stage}: {r['cpu_s']:.3f} CPU s "
                      f"(load {r['load']:.1f})", file=sys.stderr, flush=True)
        base = results["python"][0] if "python" in results else None
        print(f"\n{name}: {n:,} events; python {sys.version.split()[0]}; {args.rounds} rounds, "
              f"median CPU s; load average at the stages {min(r['load'] for v in results.values() for r in v):.1f}"
              f"-{max(r['load'] for v in results.values() for r in v):.1f}")
        py = statistics.median(r["cpu_s"] for r in results["python"]) if base else None
        ref = (statistics.median(r["cpu_s"] for r in results["reference"])
               if "reference" in results else None)
        print(f"{'stage':15} {'CPU s':>8} {'min':>8} {'max':>8} {'events/s':>12} "
              f"{'÷ python':>9} {'÷ reference':>11} {'decisions':>9} same")
        for stage, runs in results.items():
            secs = [r["cpu_s"] for r in runs]
            med = statistics.median(secs)
            same = ""
            if base is not None and "digest" in runs[0]:
                same = "yes" if all(r["digest"] == base["digest"] for r in runs) else "NO"
                if same == "NO":
                    failed = True
                    print(first_difference(os.path.join(args.work, f"{name}.python.pkl"),
                                           os.path.join(args.work, f"{name}.{stage}.pkl")))
            print(f"{stage:15} {med:8.3f} {min(secs):8.3f} {max(secs):8.3f} {n / med:12,.0f} "
                  f"{f'{py / med:.2f}' if py else '-':>9} {f'{ref / med:.2f}' if ref else '-':>11} "
                  f"{runs[0]['count']:9,} {same}")
        for stage in ("rust-batch", "rust-file", "rust-json"):
            if stage in results:
                r = results[stage][0]
                print(f"{stage}: {r['partitions']:,} partitions, {r['bytes'] / r['partitions']:.0f} "
                      f"bytes each held by the Rust model; ignored/rejected/unsupported "
                      f"{r['counts']}" + (f"; of its CPU s, decode {statistics.median(x['decode_s'] for x in results[stage]):.3f}"
                                          if stage == "rust-file" else ""))
        if "mypyc" in results:
            print(f"mypyc stage ran isr from {results['mypyc'][0]['isr']}")
    if failed:
        raise SystemExit("decisions differ")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--stage", help="(child) run one stage")
    ap.add_argument("--input")
    ap.add_argument("--out")
    ap.add_argument("--lag", type=int, default=30000, help="replica_lag_time_max_ms")
    ap.add_argument("--streams", nargs="+",
                    default=["1000:1000000", "100000:1000000:500", "100000:1000000"],
                    help="partitions:events[:round_ms] (gen.py)")
    ap.add_argument("--stages", default=",".join(ALL_STAGES))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--so-dir", default="/tmp/native/build",
                    help="where isr_native_proto.so is (see README.md)")
    ap.add_argument("--mypyc-tree", default=None, help="a tree scripts/build-native compiled")
    ap.add_argument("--work", default="/tmp/native/bench")
    ap.add_argument("--cpu", type=int, default=None, help="pin every child to this CPU")
    args = ap.parse_args()
    if args.stage:
        run_child(args)
    else:
        parent(args)


if __name__ == "__main__":
    main()
