"""A bucket's state cost per micro-batch, without Spark: state layout 1 (the
whole bucket restored and saved every batch) against layout 2 (a snapshot, a
log of what changed, the queue in chunks; the engine kept by the worker,
isr/stream/statelog.py), with the worker's cache hit every batch (`keep`) or
never (`drop`: another worker each time).

    python bench/bench_statelog.py --partitions 100000 --active 1.0
    python bench/bench_statelog.py --partitions 100000 --active 0.05

Batches 0 and 1 (not measured) open every partition (a leader event each,
applied once the watermark passes them in batch 1). Then each of --batches batches holds one round of the
`--active` share of the partitions (drawn at random each batch): an append
and a fetch from each follower, 1 s of event time per batch (so nothing
shrinks: 1 % to 10 % active is an idle-ish cluster whose followers' fetch
sessions are not in the input). State cost = the batch's time minus the
engine's own processing of it. Times are CPU seconds of this process
(time.process_time), so that a machine shared with other work still gives
comparable numbers; --wall for wall-clock time.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time

import orjson

sys.path.insert(0, os.path.dirname(__file__))

from isr.config import MonitorSettings  # noqa: E402
from isr.gc_tuning import fewer_gc_passes  # noqa: E402
from isr.stream import statelog  # noqa: E402
from isr.stream.operator import BucketProcessor  # noqa: E402
from isr.stream.packing import Packer, hold_of, unpack  # noqa: E402

T0 = 1_700_000_000_000


def batches(partitions: int, active: float, count: int, seed: int = 7):
    rng = random.Random(seed)
    parts = [(f"topic-{p % 20}", p // 20, rng.sample(range(1, 7), 3)) for p in range(partitions)]
    first = []
    for topic, partition, replicas in parts:
        first.append({"v": 1, "type": "leader", "ts": T0, "topic": topic, "partition": partition,
                      "leader": replicas[0], "leader_epoch": 1, "replicas": replicas,
                      "isr": replicas, "leader_epoch_start_offset": 0})
    out = [first]
    for b in range(1, count + 2):
        chosen = parts if active >= 1 else rng.sample(parts, max(1, int(active * partitions)))
        out.append(_round(chosen, T0 + b * 1000, 10 * (b + 1)))
    return [[orjson.dumps(e) for e in batch] for batch in out]


def _round(parts, ts: int, leo: int) -> list[dict]:
    events = []
    for topic, partition, replicas in parts:
        base = {"v": 1, "topic": topic, "partition": partition, "leader": replicas[0],
                "leader_epoch": 1}
        events.append({**base, "type": "append", "ts": ts, "leader_leo": leo})
        for r in replicas[1:]:
            events.append({**base, "type": "fetch", "ts": ts + 1, "replica": r,
                           "fetch_offset": leo, "leader_leo": leo})
    return events


class State:
    def __init__(self) -> None:
        self.row = None

    @property
    def exists(self):
        return self.row is not None

    @property
    def get(self):
        return (self.row,)

    def update(self, value) -> None:
        self.row = value[0]


_clock = time.process_time


def run(mode: str, data: list[list[bytes]], monitor: MonitorSettings) -> dict:
    p = BucketProcessor(monitor)
    packer = Packer([0], monitor.max_future_ms)
    layout, key = (0, 1), ("bench", mode)
    blob, state, first = None, State(), 0
    spent = {"state": 0.0, "process": 0.0, "events": 0, "rows": 0}
    statelog._CACHE.clear()
    for i, values in enumerate(data):
        (_l, packed, summary), = packer.pack(
            [None] * len(values), values, ["in"] * len(values), [0] * len(values),
            list(range(first, first + len(values))), None, [False] * len(values))
        first += len(values)
        table, hold = unpack([packed]), hold_of([summary])
        t0 = _clock()
        if mode == "layout1":
            bucket = p.restore(blob, layout)
        else:
            if mode == "drop":
                statelog._CACHE.clear()
            stored = statelog.load(p, state.row, layout, key)
            bucket = stored.bucket
        t1 = _clock()
        p.process(0, bucket, table, hold)
        t2 = _clock()
        if mode == "layout1":
            blob = p.save(bucket)
            size = len(blob)
        else:
            state.update((statelog.save(stored, bucket.arrived, key),))
            size = len(state.row)
        t3 = _clock()
        if i < 2:
            continue  # opening every partition (the leader events are applied in batch 1)
        spent["state"] += (t1 - t0) + (t3 - t2)
        spent["process"] += t2 - t1
        spent["events"] += len(values)
        spent["bytes"] = size
    statelog._CACHE.clear()
    return spent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--partitions", type=int, default=5000)
    ap.add_argument("--active", type=float, default=1.0, help="share of partitions per batch")
    ap.add_argument("--batches", type=int, default=6)
    ap.add_argument("--modes", default="layout1,keep,drop")
    ap.add_argument("--wall", action="store_true", help="wall-clock time, not CPU time")
    args = ap.parse_args()
    if args.wall:
        global _clock
        _clock = time.perf_counter
    monitor = MonitorSettings(allowed_lateness_ms=500)
    data = batches(args.partitions, args.active, args.batches)
    for mode in args.modes.split(","):
        s = run(mode, data, monitor)
        total = s["state"] + s["process"]
        print(f"{args.partitions} partitions, {args.active:.0%} active, {mode} "
              f"({'wall' if args.wall else 'CPU'}): "
              f"state {s['state'] * 1000 / args.batches:.1f} ms/batch "
              f"({s['state'] * 1e6 / args.batches / args.partitions:.2f} us per partition held), "
              f"process {s['process'] * 1000 / args.batches:.1f} ms/batch, "
              f"{s['events'] / total:,.0f} events/s, row {s['bytes'] / args.partitions:.0f} "
              f"bytes/partition", flush=True)


if __name__ == "__main__":
    with fewer_gc_passes():
        main()
