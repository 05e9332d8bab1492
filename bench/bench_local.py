"""Benchmark of the local engine (the pure leader model), one core.

    python bench/bench_local.py --events 1000000 --partitions 1000

Measures, in one run so the ratios are fair on a noisy machine:
  baseline   a plain Python loop doing a simpler version of the logic (two-branch
             caught-up time, LEO and HW on list state), the yardstick
  model      LocalEngine.apply_in_order on decoded events, policy kafka
  engine     the same through the lateness sequencer (submit + finish)
  replay     `isr replay`'s path from JSON lines: decode + validate + engine
  4 policies the model with kafka, kip16, legacy and kip501 side by side
and the state size per follower replica.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import orjson

sys.path.insert(0, os.path.dirname(__file__))
from gen import stream  # noqa: E402

from isr.config import AlertSettings, MonitorSettings  # noqa: E402
from isr.contract import validate  # noqa: E402
from isr.pipeline.listeners import local_engine  # noqa: E402
from isr.pipeline.local import replay  # noqa: E402


def baseline(events: list) -> float:
    """A simpler version of the same logic on plain lists: per-partition state,
    two-branch caught-up time, LEO update, HW = min LEO over the ISR on a LEO
    change or an append. No policies, checks, eligibility or decisions."""
    start = time.perf_counter()
    parts: dict = {}
    for e in events:
        key = (e.cluster, e.topic, e.partition)
        p = parts.get(key)
        if p is None:
            p = parts[key] = [0, 0, {}]  # leader_leo, hw, followers
        kind = e.type
        if kind == "fetch":
            f = p[2].get(e.replica)
            if f is None:
                f = p[2][e.replica] = [-1, -1, 0, 0]  # leo, lfll, lfts, lcut
            offset, leo, ts = e.fetch_offset, e.leader_leo, e.ts
            if offset >= leo:
                f[3] = ts
            elif offset >= f[1]:
                f[3] = f[2]
            changed = f[0] != offset
            f[0], f[2] = offset, ts
            if leo > f[1]:
                f[1] = leo
            if leo > p[0]:
                p[0] = leo
            if changed:
                hw = min([p[0]] + [x[0] for x in p[2].values()])
                if hw > p[1]:
                    p[1] = hw
        elif kind == "append":
            if e.leader_leo > p[0]:
                p[0] = e.leader_leo
            hw = min([p[0]] + [x[0] for x in p[2].values()])
            if hw > p[1]:
                p[1] = hw
    return len(events) / (time.perf_counter() - start)


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description="local engine benchmark")
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--partitions", type=int, default=1000)
    args = ap.parse_args()

    raw = list(stream(args.partitions, args.events))
    events = [validate(e) for e in raw]
    n = len(events)
    rows = [("baseline (plain loop, simpler rule)", baseline(events))]

    quiet = MonitorSettings(alerts=AlertSettings(enabled=False))
    e0 = local_engine(quiet)
    rows.append(("model, kafka, alerts off", n / timed(lambda: e0.apply_in_order(events))))
    engine = local_engine(MonitorSettings())
    rows.append(("model, kafka (with alerts)", n / timed(lambda: engine.apply_in_order(events))))
    decisions = len(engine.decisions)
    state_bytes = sum(len(orjson.dumps(m.to_list())) for m in engine.partitions["kafka"].values())
    followers = sum(len(m.followers) for m in engine.partitions["kafka"].values())

    def through_sequencer():
        e = local_engine(MonitorSettings())
        for seq, ev in enumerate(events):
            e.submit(ev, seq)
        e.finish()
    rows.append(("engine + sequencer, kafka", n / timed(through_sequencer)))

    all_policies = MonitorSettings(policy=["kafka", "kip16", "legacy", "kip501"])
    e4 = local_engine(all_policies)
    rows.append(("model, 4 policies side by side", n / timed(lambda: e4.apply_in_order(events))))
    e4q = local_engine(all_policies.model_copy(update={"alerts": quiet.alerts}))
    rows.append(("model, 4 policies, alerts off", n / timed(lambda: e4q.apply_in_order(events))))

    with tempfile.NamedTemporaryFile("wb", suffix=".jsonl", delete=False) as f:
        for e in raw:
            f.write(orjson.dumps(e) + b"\n")
    try:
        rows.append(("replay from JSON lines (decode+validate+engine)",
                     n / timed(lambda: replay([f.name], MonitorSettings()))))
    finally:
        os.unlink(f.name)

    base = rows[0][1]
    print(f"{n} events, {args.partitions} partitions (RF 3), {decisions} kafka decisions; "
          f"python {sys.version.split()[0]}")
    print(f"{'stage':50} {'events/s':>12} {'vs baseline':>12}")
    for name, rate in rows:
        print(f"{name:50} {rate:12,.0f} {rate / base:12.2f}")
    print(f"state: {state_bytes / len(engine.partitions['kafka']):.0f} bytes per partition, "
          f"{state_bytes / followers:.0f} bytes per follower replica (JSON, incl. partition fields)")


if __name__ == "__main__":
    main()
