"""`isr replay` of one file by several source trees, interleaved: CPU
seconds, peak RSS and the output's md5 per run, or instruction counts.

    git archive main | tar -x -C /tmp/before
    python bench/compare_trees.py FILE before=/tmp/before after=. --rounds 2 \\
        --set monitor.replica_lag_time_max_ms=10000 --alerts on,off
    python bench/compare_trees.py FILE before=/tmp/before after=. --instructions 10,30

On a shared machine one program's CPU seconds vary by ±25 % and a run's
place in a round moves them too, so the trees alternate (each round reverses
the order) and only what differs by more than that means anything.
`--instructions A,B` counts instructions instead (valgrind's cachegrind,
no cache simulation) on the file's first A and first B MB, cut at a line
end: B − A is the steady state without the start. Every run is from / with
PYTHONPATH at its tree, so no other tree is imported.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path


def replay_argv(file: Path, out: Path, alerts: str, extra: list[str]) -> list[str]:
    argv = [sys.executable, "-m", "isr.cli", "replay", str(file), "-q", "-o", str(out)]
    for setting in extra:
        argv += ["--set", setting]
    return argv + ["--set", f"monitor.alerts.enabled={'true' if alerts == 'on' else 'false'}"]


def timed_run(tree: Path, argv: list[str]) -> tuple[float, int]:
    """CPU seconds (user + sys) and peak RSS (kB) of one child process."""
    child = subprocess.Popen(argv, cwd="/", env=dict(os.environ, PYTHONPATH=str(tree)))
    _pid, status, usage = os.wait4(child.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"compare_trees: {' '.join(argv)} failed")
    return usage.ru_utime + usage.ru_stime, usage.ru_maxrss


def instructions(tree: Path, argv: list[str]) -> int:
    """Instructions the run executes (cachegrind's I refs)."""
    done = subprocess.run(["valgrind", "--tool=cachegrind", "--cache-sim=no",
                           "--cachegrind-out-file=/dev/null", *argv],
                          cwd="/", env=dict(os.environ, PYTHONPATH=str(tree)),
                          capture_output=True, text=True)
    found = re.search(r"I\s+refs:\s+([\d,]+)", done.stderr)
    if done.returncode != 0 or found is None:
        sys.exit(f"compare_trees: valgrind failed: {done.stderr.strip()[-300:]}")
    return int(found.group(1).replace(",", ""))


def head_slice(file: Path, mb: int, into: Path) -> Path:
    """The file's first `mb` MB, cut after the last whole line."""
    with open(file, "rb") as f:
        data = f.read(mb << 20)
    path = into / f"head-{mb}mb.jsonl"
    path.write_bytes(data[: data.rfind(b"\n") + 1])
    return path


def md5(path: Path) -> str:
    return hashlib.md5(path.read_bytes()).hexdigest()[:12]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("file", type=Path)
    parser.add_argument("trees", nargs="+", help="NAME=PATH, one per tree")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--alerts", default="on", help="on, off or on,off")
    parser.add_argument("--set", action="append", default=[], dest="settings",
                        help="an isr replay --set, repeatable")
    parser.add_argument("--instructions", help="A,B: instruction counts on the first A and B MB")
    args = parser.parse_args()
    trees = [(name, Path(path).resolve()) for name, path in (t.split("=", 1) for t in args.trees)]
    file = args.file.resolve()
    work = Path(tempfile.mkdtemp(prefix="compare-trees-"))
    if args.instructions:
        small, big = (head_slice(file, int(mb), work) for mb in args.instructions.split(","))
        for alerts in args.alerts.split(","):
            for name, tree in trees:
                counts = [instructions(tree, replay_argv(f, work / f"{name}.out", alerts, args.settings))
                          for f in (small, big)]
                print(f"{name} alerts {alerts}: {counts[0]:,} / {counts[1]:,} instructions, "
                      f"steady state {counts[1] - counts[0]:,}, output {md5(work / f'{name}.out')}",
                      flush=True)
        return 0
    print("round tree alerts CPU-s peak-RSS-MB md5 load")
    for round_no in range(args.rounds):
        order = trees if round_no % 2 == 0 else trees[::-1]
        for name, tree in order:
            for alerts in args.alerts.split(","):
                out = work / f"{name}.{alerts}.out"
                cpu, rss = timed_run(tree, replay_argv(file, out, alerts, args.settings))
                load = os.getloadavg()[0]
                print(f"{round_no + 1} {name} {alerts} {cpu:.1f} {rss // 1024} {md5(out)} {load:.1f}",
                      flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
