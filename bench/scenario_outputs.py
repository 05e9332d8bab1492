"""The decisions of a source tree on every simulator scenario, as md5 sums:
the exactness check of a change that must keep every output byte-identical.

    python bench/scenario_outputs.py --tree . --out /tmp/scen/after
    python bench/scenario_outputs.py --tree /tmp/before --out /tmp/scen/before \\
        --against /tmp/scen/after/outputs.md5

The inputs (written once into `--events`, default /tmp/isr-scenarios): every
scenario of isr/sim/scenarios at both grains (per-partition `fetch` events and
`fetch_session` events; steady-10k only its first 3 s), and two bench/gen.py
streams (200 k events over 1,000 partitions, 100 k over 200 with 500 ms
rounds). Each is replayed by `--tree`'s `isr replay`, alerts on, under each of
the four policies and the four side by side: 28 files × 5 = 140 outputs.
The inputs come from the simulator of the tree this script runs from, so
two trees compared against each other read the same events.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
from pathlib import Path

import orjson

POLICIES = ("kafka", "kip16", "legacy", "kip501", "kafka,kip16,legacy,kip501")
STEADY_CUT_MS = 3000  # steady-10k is long: its first 3 s carry every rule


def write_events(into: Path) -> list[Path]:
    """The scenario and generator files, written unless already there."""
    from gen import stream  # bench/gen.py

    from isr.sim.cluster import Simulator
    from isr.sim.scenario import load_scenario, scenario_names

    into.mkdir(parents=True, exist_ok=True)
    files = []
    for grain in ("partition", "session"):
        for name in scenario_names():
            path = into / f"{name}.{grain}.jsonl"
            files.append(path)
            if not path.exists():
                scenario = load_scenario(name)
                end = scenario.start_ts + STEADY_CUT_MS if name == "steady-10k" else None
                events = Simulator(scenario, grain=grain).events()
                _write(path, (e for e in events if end is None or e["ts"] < end))
    for name, events in (("gen-1000", lambda: stream(1000, 200_000)),
                         ("gen-200-r500", lambda: stream(200, 100_000, round_ms=500))):
        path = into / f"{name}.partition.jsonl"
        files.append(path)
        if not path.exists():
            _write(path, events())
    return files


def _write(path: Path, events) -> None:
    part = path.with_suffix(".part")
    with open(part, "wb") as out:
        for event in events:
            out.write(orjson.dumps(event) + b"\n")
    part.rename(path)  # an interrupted run leaves no half file behind


def replay_all(tree: Path, files: list[Path], out: Path) -> dict[str, str]:
    """name -> md5 of `tree`'s output for every file × policy set."""
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=str(tree.resolve()))
    sums = {}
    for path in files:
        for policy in POLICIES:
            name = f"{path.stem}.{policy}.jsonl"
            target = out / name
            # from / so that no tree but `tree` is on the path
            done = subprocess.run(
                [sys.executable, "-m", "isr.cli", "replay", str(path.resolve()), "-q",
                 "-o", str(target.resolve()), "--policy", policy],
                env=env, cwd="/", capture_output=True, text=True)
            if done.returncode != 0:
                sys.exit(f"scenario_outputs: {name} failed ({done.returncode}): "
                         f"{done.stderr.strip().splitlines()[-1:]}")
            sums[name] = hashlib.md5(target.read_bytes()).hexdigest()
    return sums


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", type=Path, default=Path("."),
                        help="the source tree whose isr replay runs (default: .)")
    parser.add_argument("--out", type=Path, required=True, help="directory for the outputs")
    parser.add_argument("--events", type=Path, default=Path("/tmp/isr-scenarios"),
                        help="directory of the input files (written on first use)")
    parser.add_argument("--against", type=Path, help="an outputs.md5 to compare with")
    args = parser.parse_args()
    sums = replay_all(args.tree, write_events(args.events), args.out)
    listing = "".join(f"{digest}  {name}\n" for name, digest in sorted(sums.items()))
    (args.out / "outputs.md5").write_text(listing)
    print(f"{len(sums)} outputs, md5 list in {args.out / 'outputs.md5'}")
    if args.against is None:
        return 0
    theirs = dict(line.split()[::-1] for line in args.against.read_text().splitlines())
    differ = sorted(n for n in sums.keys() | theirs.keys() if sums.get(n) != theirs.get(n))
    for name in differ:
        print(f"differs: {name}")
    print("identical" if not differ else f"{len(differ)} of {len(sums)} differ")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    sys.exit(main())
