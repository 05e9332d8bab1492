"""Synthetic fetch-state streams for benchmarks: a steady cluster where every
leader appends and every follower fetches, some followers slow or stalled.

    python bench/gen.py --partitions 1000 --events 1000000 > /tmp/events.jsonl
"""

from __future__ import annotations

import argparse
import random
import sys
from typing import Iterator, Optional

import orjson

T0 = 1_700_000_000_000  # in the past: the live job refuses times ahead of its clock


def stream(partitions: int, events: int, brokers: int = 6, seed: int = 7,
           step_ms: int = 1, round_ms: Optional[int] = None) -> Iterator[dict]:
    """Leader events first, then rounds over partitions: an append, then each
    follower fetches (usually from the LEO of its previous fetch; 1 in 50
    partitions has a follower that stalls for 40 s now and then).

    Event time moves `step_ms` per partition visited, so a round over N
    partitions takes N ms: with many partitions each one is visited seldom
    and looks lagging and silent. `round_ms` instead spreads every round over
    that much event time, as in a real cluster whose followers fetch every
    partition every ~500 ms whatever their number."""
    rng = random.Random(seed)
    parts = []
    for p in range(partitions):
        replicas = rng.sample(range(1, brokers + 1), 3)
        parts.append({"p": p, "topic": f"topic-{p % 20}", "partition": p // 20,
                      "leader": replicas[0], "followers": replicas[1:], "leo": 0,
                      "seen": {r: 0 for r in replicas[1:]},
                      "slow": p % 50 == 0})
        yield {"v": 1, "type": "leader", "ts": T0, "topic": parts[-1]["topic"],
               "partition": parts[-1]["partition"], "leader": replicas[0], "leader_epoch": 1,
               "replicas": replicas, "isr": replicas, "leader_epoch_start_offset": 0}
    produced, ts, rounds = partitions, T0, 0
    while produced < events:
        rounds += 1
        for i, part in enumerate(parts):
            if round_ms is None:
                ts += step_ms
            else:
                ts = T0 + (rounds - 1) * round_ms + (i + 1) * round_ms // partitions
            base = {"v": 1, "ts": ts, "topic": part["topic"], "partition": part["partition"],
                    "leader": part["leader"], "leader_epoch": 1}
            part["leo"] += rng.randint(1, 5)
            yield {**base, "type": "append", "leader_leo": part["leo"]}
            produced += 1
            for r in part["followers"]:
                if part["slow"] and r == part["followers"][-1] and (ts // 40000) % 3 == 1:
                    continue  # stalled for 40 s out of every 120 s
                yield {**base, "type": "fetch", "replica": r, "fetch_offset": part["seen"][r],
                       "leader_leo": part["leo"]}
                part["seen"][r] = part["leo"]
                produced += 1
            if produced >= events:
                return


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--partitions", type=int, default=1000)
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--round-ms", type=int, default=None,
                    help="event time of one round over all partitions (default: 1 ms a partition)")
    args = ap.parse_args()
    out = sys.stdout.buffer
    for ev in stream(args.partitions, args.events, seed=args.seed, round_ms=args.round_ms):
        out.write(orjson.dumps(ev))
        out.write(b"\n")


if __name__ == "__main__":
    main()
