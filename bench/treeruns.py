"""Run a bench's own `--one` child once per source tree and round, the
trees' order alternating by round (so neither always runs first on a
machine whose load drifts): bench_sink.py and bench_driver.py.

Each child imports `isr` from its tree only (PYTHONPATH, run from /) and
prints its result as JSON on its last line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Iterator


def interleaved(script: str, dump: str, trees: list, rounds: int,
                flags: list) -> Iterator[tuple[int, str, dict]]:
    """(round, tree name, the child's result) for each run; a failed child
    stops the bench with the tail of its stderr."""
    for r in range(rounds):
        for name, path in (trees if r % 2 == 0 else trees[::-1]):
            done = subprocess.run([sys.executable, str(Path(script).resolve()), dump,
                                   "--one", *flags], cwd="/", capture_output=True, text=True,
                                  env=dict(os.environ, PYTHONPATH=str(Path(path).resolve())))
            if done.returncode != 0:
                sys.exit(f"{Path(script).stem}: {name} failed: {done.stderr[-3000:]}")
            yield r, name, json.loads(done.stdout.splitlines()[-1])


def parser(doc: str):
    """The arguments every such bench takes: the records dump, NAME=PATH
    trees, --rounds, --set KEY=VALUE, and the child's hidden --one."""
    import argparse

    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("dump")
    ap.add_argument("trees", nargs="*", help="NAME=PATH, one per tree")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    return ap
