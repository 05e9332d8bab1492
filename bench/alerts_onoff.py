"""Alerts on ÷ off on bench_local.py's stream: its two rows "model, kafka,
alerts off" and "model, kafka (with alerts)", timed in CPU seconds
(time.process_time of LocalEngine.apply_in_order), PAIRS off/on pairs
alternated in one process (as the "Alerts on ÷ off" sections measured it).

    PYTHONPATH=TREE python bench/alerts_onoff.py 300000 1000 5   # EVENTS PARTITIONS PAIRS
"""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen import stream  # noqa: E402

from isr.config import AlertSettings, MonitorSettings  # noqa: E402
from isr.contract import validate  # noqa: E402
from isr.pipeline.listeners import local_engine  # noqa: E402


def main() -> None:
    n, parts, pairs = (int(x) for x in sys.argv[1:4])
    events = [validate(e) for e in stream(parts, n)]
    quiet = MonitorSettings(alerts=AlertSettings(enabled=False))
    off: list[float] = []
    on: list[float] = []
    for _ in range(pairs):
        for settings, spent in ((quiet, off), (MonitorSettings(), on)):
            engine = local_engine(settings)
            t = time.process_time()
            engine.apply_in_order(events)
            spent.append(time.process_time() - t)
    ratios = sorted(b / a for a, b in zip(off, on))
    mid = pairs // 2
    print(f"{n} events, {parts} partitions, load {os.getloadavg()[0]:.1f}: "
          f"off min {min(off):.3f} / median {sorted(off)[mid]:.3f} s; "
          f"on min {min(on):.3f} / median {sorted(on)[mid]:.3f} s; "
          f"on/off pairs median {ratios[mid]:.2f} ({ratios[0]:.2f}-{ratios[-1]:.2f}); "
          f"min/min {min(on) / min(off):.2f}")


if __name__ == "__main__":
    main()
