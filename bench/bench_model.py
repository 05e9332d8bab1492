"""The leader model alone, best of 3, for comparing two versions of the code.

    PYTHONPATH=<checkout> python bench/bench_model.py off|on|four

off: policy kafka, alerts off; on: kafka with the alert rules; four: the four
policies side by side with the alert rules. 300 k events of gen.py over 1,000
partitions, through `LocalEngine.apply_in_order`. Run it alternately against
each version (a `git worktree` of the older one): the machine drifts.
"""

from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from gen import stream  # noqa: E402

from isr.config import AlertSettings, MonitorSettings  # noqa: E402
from isr.contract import validate  # noqa: E402
from isr.pipeline.listeners import local_engine  # noqa: E402

SETTINGS = {
    "off": lambda: MonitorSettings(alerts=AlertSettings(enabled=False)),
    "on": lambda: MonitorSettings(),
    "four": lambda: MonitorSettings(policy=["kafka", "kip16", "legacy", "kip501"]),
}


def main() -> None:
    which = sys.argv[1] if len(sys.argv) > 1 else "on"
    events = [validate(e) for e in stream(1000, 300_000)]
    best, decisions = 0.0, 0
    for _ in range(3):
        engine = local_engine(SETTINGS[which]())
        start = time.perf_counter()
        engine.apply_in_order(events)
        best = max(best, len(events) / (time.perf_counter() - start))
        decisions = len(engine.decisions)
    print(f"{which} {os.environ.get('PYTHONPATH', '.')} {best:,.0f} events/s, "
          f"{decisions} decisions")


if __name__ == "__main__":
    main()
