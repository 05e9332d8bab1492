"""Summarise bench_realistic_run.py's --rss-log (<run dir>/rss.jsonl): the
peak RSS / PSS of each kind of process (jvm, driver, the PySpark daemon,
each worker, each engine process) and of their sum, how many of each lived
at once, and with `--every N` the timeline (every N-th sample: per kind).

    python bench/rss_timeline.py /tmp/rss/run/rrXXXX/rss.jsonl [--every 10]
"""

from __future__ import annotations

import argparse
from collections import defaultdict

import orjson


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("log")
    ap.add_argument("--every", type=int, default=0)
    args = ap.parse_args()
    samples = [orjson.loads(line) for line in open(args.log, "rb")]
    t0 = samples[0]["t"]
    peak_kind = defaultdict(int)      # kind -> peak of the kind's RSS sum
    peak_kind_pss = defaultdict(int)
    peak_count = defaultdict(int)
    peak_proc: dict[int, tuple] = {}  # pid -> (kind, peak RSS, peak PSS, last CPU)
    peak_sum = peak_sum_pss = 0
    kinds = ("jvm", "driver", "daemon", "worker", "engine")
    if args.every:
        print("   t s  " + " ".join(f"{k:>9}" for k in kinds) + "   sum MB  (n workers, n engines)")
    for i, s in enumerate(samples):
        by = defaultdict(int)
        by_pss = defaultdict(int)
        n = defaultdict(int)
        for pid, _parent, kind, rss, pss, cpu in s["procs"]:
            by[kind] += rss
            by_pss[kind] += pss
            n[kind] += rss > 0
            old = peak_proc.get(pid, (kind, 0, 0, 0))
            peak_proc[pid] = (kind, max(old[1], rss), max(old[2], pss), cpu)
        for k in by:
            peak_kind[k] = max(peak_kind[k], by[k])
            peak_kind_pss[k] = max(peak_kind_pss[k], by_pss[k])
            peak_count[k] = max(peak_count[k], n[k])
        peak_sum = max(peak_sum, sum(by.values()))
        peak_sum_pss = max(peak_sum_pss, sum(by_pss.values()))
        if args.every and i % args.every == 0:
            print(f"{s['t'] - t0:6.0f}  " + " ".join(f"{by[k] / 1024:9,.0f}" for k in kinds)
                  + f"  {sum(by.values()) / 1024:7,.0f}  ({n['worker']}, {n['engine']})")
    print(f"{len(samples)} samples over {samples[-1]['t'] - t0:.0f} s")
    for k in kinds:
        if k in peak_kind:
            print(f"  {k:7}: peak RSS {peak_kind[k] / 1024:7,.0f} MB (PSS {peak_kind_pss[k] / 1024:7,.0f}),"
                  f" up to {peak_count[k]} at once")
    print(f"  sum    : peak RSS {peak_sum / 1024:7,.0f} MB (PSS {peak_sum_pss / 1024:7,.0f})")
    print("  per process (pid kind peak-RSS-MB peak-PSS-MB CPU-s):")
    for pid, (kind, rss, pss, cpu) in sorted(peak_proc.items(), key=lambda x: x[1][0]):
        if kind in kinds:
            print(f"    {pid:>7} {kind:7} {rss / 1024:7,.0f} {pss / 1024:7,.0f} {cpu:8.1f}")


if __name__ == "__main__":
    main()
