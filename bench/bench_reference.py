"""`isr replay` against a straightforward reference model (issue 23: "`isr
replay` >= 2x a straightforward reference model on the same per-partition
events"), one run, one core.

The reference is Kafka's leader written out plainly, policy `kafka` only:
JSON lines read with orjson into dicts, one dict of plain lists per partition,
the KAFKA-4485 caught-up rule, the HW (min LEO over the ISR and the caught-up
followers outside it), ISR expansion, and Kafka's isr-expiration task as
Kafka runs it: at every check instant (every replica.lag.time.max.ms / 2 of
event time) every partition's ISR is scanned. No sequencer, no contract
validation, no alert rules, no outputs but the ISR changes. It reads the
`leader`, `append` and `fetch` events gen.py writes, in file order (gen.py
writes them in time order). Its decisions are counted against replay's.

    PYTHONPATH=. .venv/bin/python bench/bench_reference.py --partitions 5000 --events 1000000
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
from isr.pipeline.local import replay  # noqa: E402

LEO, LFLL, LFTS, LCUT = range(4)  # a follower: [leo, lastFetchLeaderLEO, lastFetchTime, lastCaughtUp]


def reference(path: str, lag_ms: int) -> int:
    """The ISR changes Kafka's leader makes on the events of `path`."""
    interval = lag_ms // 2
    parts: dict = {}  # key -> [leader, epoch, leader_leo, hw, isr, followers, start]
    changes = 0
    next_check = -1

    def hw_of(p, now):
        leader_leo, isr, followers = p[2], p[4], p[5]
        hw = leader_leo
        for r, f in followers.items():
            if f[LEO] < hw and (r in isr or f[LEO] == leader_leo or now - f[LCUT] <= lag_ms):
                hw = f[LEO]
        if hw > p[3]:
            p[3] = hw

    def check(now):
        nonlocal changes
        for p in parts.values():
            leader_leo, followers = p[2], p[5]
            out = [r for r in p[4] if r != p[0] and followers[r][LEO] != leader_leo
                   and now - followers[r][LCUT] > lag_ms]
            if out:
                p[4] = [r for r in p[4] if r not in out]
                hw_of(p, now)
                changes += 1

    with open(path, "rb") as f:
        for line in f:
            e = orjson.loads(line)
            ts = e["ts"]
            if next_check < 0:
                next_check = -(-ts // interval) * interval
            while next_check < ts:
                check(next_check)
                next_check += interval
            key = (e.get("cluster", "default"), e["topic"], e["partition"])
            kind = e["type"]
            if kind == "leader":
                isr = list(e["isr"])
                start = e["leader_epoch_start_offset"]
                followers = {r: [-1, -1, 0, ts if r in isr else 0]
                             for r in e["replicas"] if r != e["leader"]}
                parts[key] = [e["leader"], e["leader_epoch"], start, start, isr, followers, start]
                continue
            p = parts.get(key)
            if p is None or e["leader_epoch"] != p[1] or e["leader"] != p[0]:
                continue
            if kind == "append":
                if e["leader_leo"] > p[2]:
                    p[2] = e["leader_leo"]
                hw_of(p, ts)
            elif kind == "fetch":
                f = p[5].get(e["replica"])
                if f is None:
                    continue
                offset, fetch_leo = e["fetch_offset"], e["leader_leo"]
                fetch_ts = e.get("received_ts") or ts
                if offset >= fetch_leo:
                    f[LCUT] = max(f[LCUT], fetch_ts)
                elif offset >= f[LFLL]:
                    f[LCUT] = max(f[LCUT], f[LFTS])
                moved = f[LEO] != offset
                f[LEO], f[LFTS] = offset, fetch_ts
                if fetch_leo > f[LFLL]:
                    f[LFLL] = fetch_leo
                if fetch_leo > p[2]:
                    p[2] = fetch_leo
                r = e["replica"]
                if r not in p[4] and offset >= p[3] and offset >= p[6]:
                    p[4] = p[4] + [r]
                    hw_of(p, fetch_ts)
                    changes += 1
                elif moved:
                    hw_of(p, fetch_ts)
        while next_check <= ts:  # the end: every check up to the last event
            check(next_check)
            next_check += interval
    return changes


def timed(fn):
    """(CPU seconds of this process, result): on a shared machine the wall
    clock says little, and everything here runs in this one thread."""
    start = time.process_time()
    result = fn()
    return time.process_time() - start, result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--partitions", type=int, default=5000)
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--round-ms", type=int, default=None)
    args = ap.parse_args()
    with tempfile.NamedTemporaryFile("wb", suffix=".jsonl", delete=False) as f:
        for e in stream(args.partitions, args.events, round_ms=args.round_ms):
            f.write(orjson.dumps(e) + b"\n")
    try:
        on = MonitorSettings(policy=["kafka"])
        off = on.model_copy(update={"alerts": AlertSettings(enabled=False)})
        ref_s, ref_changes = timed(lambda: reference(f.name, on.replica_lag_time_max_ms))
        rows = [("reference model (plain Python, kafka)", ref_s, ref_changes)]
        for name, monitor in (("isr replay, kafka, alerts off", off),
                              ("isr replay, kafka, alerts on", on)):
            secs, result = timed(lambda: replay([f.name], monitor))
            rows.append((name, secs, sum(1 for d in result.decisions
                                         if getattr(d, "type", "") == "isr_change")))
    finally:
        os.unlink(f.name)
    print(f"{args.events:,} events, {args.partitions:,} partitions (RF 3), "
          f"python {sys.version.split()[0]}")
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; CPU seconds")
    print(f"{'':40} {'CPU s':>8} {'events/s':>10} {'÷ reference':>12} {'ISR changes':>12}")
    for name, secs, changes in rows:
        print(f"{name:40} {secs:8.2f} {args.events / secs:10,.0f} {ref_s / secs:12.2f} "
              f"{changes:12,}")


if __name__ == "__main__":
    main()
