"""`isr files`: the operators' files out of the installed package."""

from __future__ import annotations

import argparse
import sys

from isr import __version__
from isr.config import ConfigError


def add_parser(sub) -> None:
    p = sub.add_parser("files", help="write the job script, config, Prometheus rules and "
                                     "Grafana dashboards out of the installed package",
                       description="Write the files an operator needs beside the wheel into "
                                   "DIR and print their paths: isr_monitor.py (the script to "
                                   "spark-submit), isr.toml, prometheus/rules.yml, "
                                   "grafana/dashboards/*.json.")
    p.add_argument("--out", required=True, metavar="DIR", help="directory to write (created)")
    p.set_defaults(func=cmd_files)


def cmd_files(args: argparse.Namespace) -> int:
    from pathlib import Path

    from isr.ops import write_files

    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out}: not a directory")
    for path in write_files(out):
        print(path)
    print(f"then: spark-submit --py-files isr_monitor-{__version__}-py3-none-any.whl "
          f"{out / 'isr_monitor.py'} --config {out / 'isr.toml'} (docs/streaming.md)",
          file=sys.stderr)
    return 0
