"""A small built-in event generator for `isr demo` and the docker-compose
stack: a few partitions whose leaders append and whose followers fetch in
real time, with one follower that pauses now and then (a GC pause longer
than replica.lag.time.max.ms) so that the ISR visibly shrinks and expands.
The full cluster simulator is its own piece of work.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator, Optional

import orjson


@dataclass
class Partition:
    topic: str
    partition: int
    replicas: list[int]
    leo: int = 0
    seen: dict[int, int] = field(default_factory=dict)

    @property
    def leader(self) -> int:
        return self.replicas[0]


class DemoCluster:
    """Events for `partitions` partitions over brokers 1..4 (RF 3). Broker
    `paused_broker` stops fetching for `pause_ms` out of every `period_ms`."""

    def __init__(self, partitions: int = 6, seed: int = 1, paused_broker: int = 3,
                 pause_ms: int = 14000, period_ms: int = 40000, tick_ms: int = 250) -> None:
        rng = random.Random(seed)
        self.rng = rng
        self.parts = [Partition("payments", p, rng.sample([1, 2, 3, 4], 3))
                      for p in range(partitions)]
        self.paused_broker, self.pause_ms, self.period_ms = paused_broker, pause_ms, period_ms
        self.tick_ms = tick_ms
        self.started: Optional[int] = None

    def _base(self, p: Partition, ts: int) -> dict:
        return {"v": 1, "ts": ts, "topic": p.topic, "partition": p.partition,
                "leader": p.leader, "leader_epoch": 1}

    def tick(self, now_ms: int) -> Iterator[dict]:
        """The events of one tick at wall-clock time `now_ms`."""
        if self.started is None:
            self.started = now_ms
            for p in self.parts:
                p.seen = {r: 0 for r in p.replicas[1:]}
                yield {**self._base(p, now_ms), "type": "leader", "replicas": p.replicas,
                       "isr": p.replicas, "leader_epoch_start_offset": 0,
                       "min_insync_replicas": 2}
        paused = (now_ms - self.started) % self.period_ms > self.period_ms - self.pause_ms
        for p in self.parts:
            p.leo += self.rng.randint(1, 20)
            yield {**self._base(p, now_ms), "type": "append", "leader_leo": p.leo}
            for r in p.replicas[1:]:
                if paused and r == self.paused_broker:
                    continue
                yield {**self._base(p, now_ms), "type": "fetch", "replica": r,
                       "fetch_offset": p.seen[r], "leader_leo": p.leo}
                p.seen[r] = p.leo

    def run(self, emit: Callable[[str, bytes], None], stop: Callable[[], bool],
            clock: Callable[[], float] = time.time) -> int:
        """Emit (key, value) in real time until `stop()`; returns events sent."""
        sent = 0
        next_tick = clock()
        while not stop():
            for ev in self.tick(int(clock() * 1000)):
                emit(f"{ev['topic']}/{ev['partition']}", orjson.dumps(ev))
                sent += 1
            next_tick += self.tick_ms / 1000
            time.sleep(max(0.0, next_tick - clock()))
        return sent
