"""A sampling profile of `isr replay` (SIGPROF at every CPU tick: self and
inclusive samples per function), and the difference of two such profiles:
the 60 s file's minus the 20 s file's is the steady state's (docs/benchmarks.md,
"The time-only fetch and the catch-up's common course"). cProfile's per-call
overhead inflates call-heavy code; this does not (a sample lands at the next
eval-breaker point: a call or a loop's back edge).

    python bench/sampleprof.py run OUT.pkl FILE [isr replay options...]
    python bench/sampleprof.py diff A.pkl B.pkl [N]
"""

from __future__ import annotations

import atexit
import collections
import pickle
import runpy
import signal
import sys


def run(out: str, argv: list[str]) -> None:
    own, incl = collections.Counter(), collections.Counter()

    def sample(_sig, frame) -> None:
        code = frame.f_code
        own[(code.co_filename.split("/")[-1], code.co_name)] += 1
        seen = set()
        while frame is not None:
            code = frame.f_code
            key = (code.co_filename.split("/")[-1], code.co_name)
            if key not in seen:
                seen.add(key)
                incl[key] += 1
            frame = frame.f_back

    def dump() -> None:
        signal.setitimer(signal.ITIMER_PROF, 0)
        with open(out, "wb") as f:
            pickle.dump((own, incl), f)

    atexit.register(dump)
    signal.signal(signal.SIGPROF, sample)
    signal.setitimer(signal.ITIMER_PROF, 0.001, 0.001)
    sys.argv = ["isr", "replay", *argv]
    runpy.run_module("isr.cli", run_name="__main__")


def diff(a: str, b: str, n: int) -> None:
    with open(a, "rb") as f:
        before = pickle.load(f)
    with open(b, "rb") as f:
        after = pickle.load(f)
    total = sum(after[0].values()) - sum(before[0].values())
    for name, x, y in (("self", before[0], after[0]), ("inclusive", before[1], after[1])):
        print(f"== {name} ({total} samples)")
        delta = {k: v - x.get(k, 0) for k, v in y.items()}
        for k, v in sorted(delta.items(), key=lambda kv: -kv[1])[:n]:
            print(f"{v:7d} {v / total:6.1%}  {k[0]}:{k[1]}")


if __name__ == "__main__":
    if sys.argv[1] == "run":
        run(sys.argv[2], sys.argv[3:])
    else:
        diff(sys.argv[2], sys.argv[3], int(sys.argv[4]) if len(sys.argv) > 4 else 40)
