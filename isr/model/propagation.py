"""ZooKeeper-era ISR change propagation (KAFKA-2722; docs/rules.md, "ZooKeeper-era propagation").

Before AlterIsr (Kafka < 2.7) a leader wrote each ISR change to ZooKeeper at
once, but told the rest of the cluster in batches: every 2500 ms, if changes
were waiting and none came in the last 5 s (or nothing was sent for 60 s),
one isr_change_notification znode carried all of them. One model per
(cluster, leader broker); it sees leader-driven ISR changes in time order.
"""

from __future__ import annotations

from isr.contract.decisions import IsrPropagation, PropagatedPartition
from isr.model.rules import ceil_to

CHECK_INTERVAL_MS = 2500
BLACKOUT_MS = 5000
MAX_DELAY_MS = 60000


class Propagation:
    __slots__ = ("cluster", "broker", "policy", "waiting", "last_change", "last_propagation",
                 "next_tick")

    def __init__(self, cluster: str, broker: int, policy: str) -> None:
        self.cluster = cluster
        self.broker = broker
        self.policy = policy
        self.waiting: set[tuple[str, int]] = set()
        self.last_change = 0
        # 0: nothing was ever propagated, so the 60 s bound has long passed.
        self.last_propagation = 0
        self.next_tick = 0

    def on_change(self, ts: int, topic: str, partition: int, out: list) -> None:
        self.advance(ts, False, out)  # a tick at T sees changes with ts <= T
        self.waiting.add((topic, partition))
        self.last_change = ts

    def advance(self, until: int, inclusive: bool, out: list) -> None:
        while self.waiting:
            # Both comparisons are strict in Kafka: X + 5000 < T, Y + 60000 < T.
            ready = min(self.last_change + BLACKOUT_MS, self.last_propagation + MAX_DELAY_MS) + 1
            tick = max(self.next_tick, ceil_to(ready, CHECK_INTERVAL_MS))
            if tick > until or (tick == until and not inclusive):
                break
            out.append(IsrPropagation(
                cluster=self.cluster, broker=self.broker, ts=tick, policy=self.policy,
                partitions=[PropagatedPartition(topic=t, partition=p)
                            for t, p in sorted(self.waiting)],
            ))
            self.waiting.clear()
            self.last_propagation = tick
            self.next_tick = tick + CHECK_INTERVAL_MS
        self.next_tick = max(self.next_tick,
                             ceil_to(until + 1 if inclusive else until, CHECK_INTERVAL_MS))

    def to_list(self) -> list:
        return [self.cluster, self.broker, self.policy, sorted(self.waiting), self.last_change,
                self.last_propagation, self.next_tick]

    @classmethod
    def from_list(cls, values: list) -> "Propagation":
        cluster, broker, policy, waiting, last_change, last_propagation, next_tick = values
        p = cls(cluster, broker, policy)
        p.waiting = {(t, n) for t, n in waiting}
        p.last_change, p.last_propagation, p.next_tick = last_change, last_propagation, next_tick
        return p
