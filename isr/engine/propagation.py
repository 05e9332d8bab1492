"""ZooKeeper-era ISR change propagation as a listener (`monitor.propagation =
"zk"`): leader-driven ISR changes, fed in time order once the engine has
reached their time, to one Propagation model per (policy, cluster, leader
broker) (isr/model/propagation.py)."""

from __future__ import annotations

from isr.engine.listeners import Listener
from isr.model.propagation import Propagation


class ZkPropagation(Listener):
    name = "propagation"

    def __init__(self) -> None:
        self.propagations: dict[tuple, Propagation] = {}
        # Changes not yet fed, as [ts, seq, policy, cluster, broker, topic, partition]:
        # partitions reach a check instant in any order, so they wait for on_time.
        self.backlog: list[list] = []

    def on_change(self, model, change, out: list) -> None:
        if change.cause == "leader":
            self.backlog.append([change.ts, change.seq, change.policy, change.cluster,
                                 change.leader, change.topic, change.partition])

    def on_time(self, until: int, inclusive: bool, out: list) -> None:
        """Feed the changes made final (all have ts < until) in time order, then
        run the 2.5 s propagation ticks up to `until`."""
        for ts, _seq, policy, cluster, broker, topic, partition in sorted(self.backlog):
            key = (policy, cluster, broker)
            p = self.propagations.get(key)
            if p is None:
                p = self.propagations[key] = Propagation(cluster, broker, policy)
            p.on_change(ts, topic, partition, out)
        self.backlog = []
        for p in self.propagations.values():
            p.advance(until, inclusive, out)

    def to_state(self) -> list:
        return [[p.to_list() for p in self.propagations.values()], self.backlog]

    def absorb(self, state: list) -> None:
        """Merge in another ZkPropagation's state (`to_state`): the
        partitions waiting under each leader, its latest change, propagation
        and tick. The Spark buckets each ran one over their share of a
        leader's partitions before the driver ran one for all
        (stream/propagation.py); their states merge into that one."""
        rows, backlog = state
        for row in rows:
            p = Propagation.from_list(row)
            key = (p.policy, p.cluster, p.broker)
            held = self.propagations.get(key)
            if held is None:
                self.propagations[key] = p
                continue
            held.waiting |= p.waiting
            held.last_change = max(held.last_change, p.last_change)
            held.last_propagation = max(held.last_propagation, p.last_propagation)
            held.next_tick = max(held.next_tick, p.next_tick)
        self.backlog.extend(backlog)

    def from_state(self, state: list) -> None:
        rows, self.backlog = state
        for row in rows:
            p = Propagation.from_list(row)
            self.propagations[(p.policy, p.cluster, p.broker)] = p
