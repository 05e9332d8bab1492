"""Load generator benchmark: does `isr simulate --rate R` hold R events/s?

Runs the steady-10k scenario against the embedded broker at each requested
rate for --seconds of wall time (what `isr simulate --scenario steady-10k
--to kafka://TOPIC --rate R --duration S` does), then reads the topic back
and buckets the messages by their create time, one-second windows, to show
how steady the rate was, not just its average. Also measures the simulator
alone (to a file) for the ceiling.

    python bench/bench_loadgen.py --rates 20000,50000,100000 --seconds 30
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections import Counter

from rich.console import Console

from isr.config import load_settings
from isr.kafka.embedded import EmbeddedBroker
from isr.commands.simulate import simulate
from isr.sinks.kafka import read_to_end


def per_second(bootstrap: str, topic: str, partitions: int) -> list[int]:
    """Messages per whole second of create time, first and last (partial)
    seconds dropped."""
    counts: Counter = Counter()
    for msg in read_to_end({"bootstrap.servers": bootstrap},
                           {(topic, p): 0 for p in range(partitions)}):
        counts[msg.timestamp()[1] // 1000] += 1
    seconds = sorted(counts)
    return [counts[s] for s in seconds[1:-1]]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rates", default="20000,50000,100000")
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--partitions", type=int, default=4)
    args = ap.parse_args()
    console = Console(stderr=True)

    # The simulator alone: 10 s of steady-10k to a file.
    path = os.path.join(tempfile.mkdtemp(prefix="isr-loadgen-"), "events.jsonl")
    sent = simulate("steady-10k", path, None, 10, None, 1, None, console, False)
    print(f"simulator alone (steady-10k to a file): {sent.events} events in "
          f"{sent.seconds:.1f} s = {sent.rate:,.0f} events/s")
    os.remove(path)

    with EmbeddedBroker() as broker:
        settings = load_settings(None, [f"kafka.bootstrap_servers={broker.bootstrap}"])
        for rate in (float(r) for r in args.rates.split(",")):
            topic = f"loadgen-{int(rate)}-{int(time.time())}"
            sent = simulate("steady-10k", f"kafka://{topic}", rate, args.seconds, None,
                            args.partitions, lambda: settings, console, False)
            windows = per_second(broker.bootstrap, topic, args.partitions)
            spread = (f"per second min {min(windows):,} / max {max(windows):,} over "
                      f"{len(windows)} full seconds" if windows else "no full second")
            print(f"target {rate:,.0f} events/s for {args.seconds:.0f} s: sent {sent.events:,} "
                  f"in {sent.seconds:.1f} s = {sent.rate:,.0f} events/s "
                  f"({sent.rate / rate:.1%} of target); {spread}")


if __name__ == "__main__":
    main()
