"""bench_live_bucket.py (the job's bucket calls without Spark) of one file by
several source trees, interleaved (each round reverses the order): the
buckets' CPU seconds, statelog.save's, the peak RSS and the outputs' md5s.

    python bench/compare_live_trees.py FILE ROUNDS before=/tmp/before after=. \\
        --batch 20000 --buckets 2 --end

Arguments after the trees go to bench_live_bucket.py; the runs add
`--set monitor.replica_lag_time_max_ms=10000` (the realistic files').
"""

import os
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> None:
    file, rounds = sys.argv[1], int(sys.argv[2])
    trees, extra = [], []
    for a in sys.argv[3:]:
        (trees if "=" in a and not a.startswith("-") and not extra else extra).append(a)
    trees = [t.split("=", 1) for t in trees]
    results = {name: [] for name, _ in trees}
    for r in range(rounds):
        for name, path in (trees if r % 2 == 0 else trees[::-1]):
            argv = [sys.executable, str(HERE / "live_save_cpu.py"), file,
                    "--set", "monitor.replica_lag_time_max_ms=10000", *extra]
            child = subprocess.run(argv, cwd="/tmp", capture_output=True, text=True,
                                   env=dict(os.environ, PYTHONPATH=str(Path(path).resolve())))
            out = child.stdout
            if child.returncode:
                sys.exit(f"{name} failed:\n{out[-2000:]}{child.stderr[-2000:]}")
            bucket = float(re.search(r"bucket CPU ([\d.]+) s in all", out).group(1))
            save = float(re.search(r"SAVE_CPU ([\d.]+)", out).group(1))
            rss = re.search(r"maxrss (\d+) MB", out).group(1)
            md5 = re.search(r"md5 ([0-9a-f]+);", out).group(1)
            decisions = re.search(r"md5 without partition_metrics ([0-9a-f]+)", out).group(1)
            stats = re.search(r"cache (\{.*?\})", out).group(1)
            results[name].append((bucket, save))
            print(f"round {r} {name}: bucket CPU {bucket:.2f} s, save CPU {save:.2f} s, "
                  f"maxrss {rss} MB, md5 {md5[:12]} / {decisions[:12]}, {stats}", flush=True)
    for name, rs in results.items():
        print(f"{name}: bucket CPU " + ", ".join(f"{b:.2f}" for b, _ in rs)
              + "; save CPU " + ", ".join(f"{s:.2f}" for _, s in rs))


if __name__ == "__main__":
    main()
