"""Scale-out on a Spark standalone cluster: the same benchmark on 1 and on 2
workers (1 core each), all on this machine's loopback (the cluster of
tests/cluster.py: master, workers from the installed pyspark).

    python bench/bench_cluster.py --workers 1 stateful --events 1000000 --batch 1000000
    python bench/bench_cluster.py --workers 2 stateful --events 1000000 --batch 1000000

Everything after --workers N goes to bench_stream.py, with --master set to
the cluster and --buckets to N (one bucket per executor core). Ports:
TEST_SPARK_PORT_BASE (default 19400) and up, as in tests/cluster.py.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from cluster import StandaloneCluster  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, required=True)
    args, rest = ap.parse_known_args()
    with StandaloneCluster(Path(tempfile.mkdtemp(prefix="isr-bench-cluster-")),
                           workers=args.workers) as cluster:
        # Executors run this checkout's code with this interpreter's packages.
        conf = cluster.conf() + ["--conf", f"spark.executorEnv.PYTHONPATH={HERE.parent}"]
        env = dict(os.environ, PYSPARK_PYTHON=sys.executable,
                   PYTHONPATH=str(HERE.parent),
                   PYSPARK_SUBMIT_ARGS=" ".join(shlex.quote(c) for c in conf) + " pyspark-shell")
        cmd = [sys.executable, str(HERE / "bench_stream.py"), *rest,
               "--master", cluster.master_url, "--buckets", str(args.workers)]
        return subprocess.run(cmd, env=env).returncode


if __name__ == "__main__":
    sys.exit(main())
