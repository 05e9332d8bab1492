"""The files an operator needs beside the wheel: the spark-submit job script,
the configuration, the Prometheus rules and the Grafana dashboards.

In the repository they live where docker-compose and the tests use them
(conf/, jobs/); setup.py copies them into the wheel under isr/ops/ (this
list, read by setup.py without importing the package). `isr files --out DIR`
writes them out of either."""

from __future__ import annotations

import shutil
from pathlib import Path

# (path in the repository, path under isr/ops/ and under `isr files --out DIR`)
OPS_FILES = [
    ("jobs/isr_monitor.py", "isr_monitor.py"),
    ("conf/isr.toml", "isr.toml"),
    ("conf/prometheus/rules.yml", "prometheus/rules.yml"),
    ("conf/prometheus/prometheus.yml", "prometheus/prometheus.yml"),
    ("conf/alertmanager/alertmanager.yml", "alertmanager/alertmanager.yml"),
    ("conf/grafana/dashboards/isr-overview.json", "grafana/dashboards/isr-overview.json"),
    ("conf/grafana/dashboards/isr-partition.json", "grafana/dashboards/isr-partition.json"),
    ("conf/grafana/dashboards/isr-job.json", "grafana/dashboards/isr-job.json"),
]


def source_of(target: str) -> Path:
    """Where one of the files is in this installation: the wheel's package
    data, else (a source checkout, an editable install) the repository."""
    packaged = Path(__file__).parent / "ops" / target
    if packaged.is_file():
        return packaged
    repo = Path(__file__).resolve().parent.parent
    for source, name in OPS_FILES:
        if name == target:
            return repo / source
    raise KeyError(target)


def write_files(out: Path) -> list[Path]:
    """Copy every file into `out` (created), keeping its relative path."""
    written = []
    for _source, target in OPS_FILES:
        src = source_of(target)
        if not src.is_file():
            raise FileNotFoundError(2, "not in this installation", str(src))
        dest = out / target
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dest)
        written.append(dest)
    return written
