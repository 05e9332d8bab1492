"""CPU by process kind over the steady part of bench_realistic_run.py runs
(issue 23, branch `floor`): from the first micro-batch's commit to the last,
i.e. without the job's start-up (JVM, Python imports, worker forks) and its
first batch, which the bench's "from the first batch's commit on" line gives
only as a total.

Reads a run directory's rss.jsonl (`--rss-log`: every poll's processes with
their CPU s) and its checkpoint's commits (bench_realistic_run.batches), and
prints, whole run (with the CPU spent before the first batch's offsets were
written, and before its commit) and steady part, the CPU s of the Python driver, the JVM,
the task workers (PySpark's daemon and the workers it forks) and the engine
processes, with the steady part's "x real time on 2 cores" per kind (the
cluster time the steady rows stand for / (CPU s / 2)).

    PYTHONPATH=/work/wt/floor /work/main/.venv/bin/python -P bench/floor/steady_split.py \\
        --events 675738 --seconds 20 /tmp/floor/run/rr*/
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench_realistic_run import batches  # noqa: E402

KINDS = {"driver": "driver", "jvm": "jvm", "daemon": "workers", "worker": "workers",
         "engine": "engines"}


def cpu_at(samples: list, t: float) -> dict[str, float]:
    """CPU s by kind at wall time t: each process's last sample at or before t."""
    last: dict[int, tuple[str, float]] = {}
    for s in samples:
        if s["t"] > t:
            break
        for pid, _parent, label, _rss, _pss, cpu in s["procs"]:
            last[pid] = (label, cpu)
    out = {k: 0.0 for k in ("driver", "jvm", "workers", "engines")}
    for label, cpu in last.values():
        if label in KINDS:
            out[KINDS[label]] += cpu
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+")
    ap.add_argument("--events", type=int, required=True, help="events in the input file")
    ap.add_argument("--seconds", type=float, required=True, help="its cluster time")
    args = ap.parse_args()
    for run in args.runs:
        run = Path(run)
        samples = [json.loads(line) for line in open(run / "rss.jsonl")]
        b = batches(run / "checkpoint")
        first, last = b[0]["end"], b[-1]["end"]
        steady_rows = sum(x["rows"] for x in b[1:])
        cluster_s = args.seconds * steady_rows / args.events
        a, z, end = cpu_at(samples, first), cpu_at(samples, last), cpu_at(samples, 1e18)
        s0 = cpu_at(samples, b[0]["start"])  # the first batch's offsets written
        steady = {k: z[k] - a[k] for k in z}
        tot = sum(steady.values())
        print(f"{run.name}: whole {sum(end.values()):.1f} CPU s ("
              + " / ".join(f"{k} {v:.1f}" for k, v in end.items())
              + f"); start-up to batch 0's offsets {sum(s0.values()):.1f}, to its commit "
              f"{sum(a.values()):.1f}; steady {tot:.1f} CPU s for {cluster_s:.1f} s of cluster time = "
              f"{2 * cluster_s / tot:.2f}x on 2 cores ("
              + " / ".join(f"{k} {v:.1f}" for k, v in steady.items()) + ")")


if __name__ == "__main__":
    main()
