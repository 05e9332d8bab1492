"""The local engine: the leader model over a bounded or unbounded event feed.

It owns what is not a partition's business: ordering by event time
(Sequencer), cluster-wide broker events reaching every partition of their
cluster, several policies side by side, counting what was ignored, and the
ZooKeeper-era propagation stage. `isr replay --engine local` runs it; the
Spark job runs the same model through its own adapter.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Optional

from isr.config import MonitorSettings
from isr.contract.decisions import IsrChange, IsrPropagation, PartitionState
from isr.model.brokers import Brokers
from isr.model.partition import PartitionModel
from isr.model.propagation import Propagation
from isr.model.rules import Rules
from isr.engine.sequencer import Sequencer


@dataclass
class PolicySummary:
    policy: str
    shrinks: int = 0
    expands: int = 0
    controller_removals: int = 0
    partitions: int = 0
    partitions_under_min_isr: int = 0
    time_under_min_isr_ms: int = 0


@dataclass
class Outcome:
    """What became of one input event (the first policy's verdict)."""

    status: str  # applied | ignored | rejected | late
    reason: str = ""


APPLIED = Outcome("applied")


def rules_for(monitor: MonitorSettings, policy: str) -> Rules:
    return Rules.for_policy(
        policy,
        replica_lag_time_max_ms=monitor.replica_lag_time_max_ms,
        isr_expiration_interval_ms=monitor.isr_expiration_interval_ms,
        replica_lag_max_messages=monitor.replica_lag_max_messages,
    )


@dataclass
class LocalEngine:
    monitor: MonitorSettings
    policies: Optional[list[str]] = None
    # Called with (origin, reason) when the model rejects a released event;
    # `origin` is whatever the caller passed to `submit` (source, offset, bytes).
    on_reject: Optional[Callable[[Any, str], None]] = None
    decisions: list = field(default_factory=list)
    ignored: Counter = field(default_factory=Counter)

    def __post_init__(self) -> None:
        self.policies = list(self.policies or self.monitor.policy)
        self.rules = {p: rules_for(self.monitor, p) for p in self.policies}
        self.partitions: dict[str, dict[tuple, PartitionModel]] = {p: {} for p in self.policies}
        self.brokers: dict[str, Brokers] = {}
        self.sequencer = Sequencer(self.monitor.allowed_lateness_ms)
        self.max_ts = -1
        self._offered = 0

    # ------------------------------------------------------------ input
    def submit(self, event, seq: int, origin: Any = None) -> Outcome:
        """Offer one validated event; it is applied once the watermark passes it.
        Returns `late` at once, else `applied`; a model rejection of the event
        once released goes to `on_reject`."""
        if not self.sequencer.offer(event.ts, seq, (event, origin)):
            return Outcome("late", f"ts {event.ts} is before the watermark "
                                   f"{self.sequencer.watermark} (allowed lateness "
                                   f"{self.monitor.allowed_lateness_ms} ms)")
        if event.ts > self.max_ts:
            self.max_ts = event.ts
        self._offered += 1
        if self._offered % 1024 == 0:
            self._run(self.sequencer.release())
        return APPLIED

    def apply_in_order(self, events: Iterable) -> None:
        """Apply events already in (ts, arrival) order, bypassing the sequencer."""
        for event in events:
            if event.ts > self.max_ts:
                self.max_ts = event.ts
            self.apply(event)

    def finish(self) -> None:
        """End of a bounded input: apply everything, run checks up to the last ts."""
        self._run(self.sequencer.drain())
        self.advance_all(self.max_ts, inclusive=True)
        if self.monitor.propagation == "zk":
            self.decisions.extend(self._propagate())

    # ------------------------------------------------------------ model
    def _run(self, ready: list) -> None:
        for _ts, _seq, (event, origin) in ready:
            outcome = self.apply(event)
            if outcome.status == "rejected" and self.on_reject is not None:
                self.on_reject(origin, outcome.reason)

    def apply(self, event) -> Outcome:
        if event.type == "broker":
            self._on_broker(event)
            return APPLIED
        outcome = APPLIED
        key = (event.cluster, event.topic, event.partition)
        brokers = self.brokers.get(event.cluster)
        if brokers is None:
            brokers = self.brokers[event.cluster] = Brokers()
        out = self.decisions
        min_isr = self.monitor.min_isr_for(event.topic)
        for i, policy in enumerate(self.policies):
            parts = self.partitions[policy]
            model = parts.get(key)
            if model is None:
                model = parts[key] = PartitionModel.first_seen(self.rules[policy], event, min_isr)
            result = model.apply(event, brokers, out)
            if i == 0 and result is not None:
                outcome = Outcome(result[0], result[1])
                if result[0] == "ignored":
                    self.ignored[result[1]] += 1
        return outcome

    def _on_broker(self, event) -> None:
        brokers = self.brokers.get(event.cluster)
        if brokers is None:
            brokers = self.brokers[event.cluster] = Brokers()
        out, ts = self.decisions, event.ts
        cluster_parts = [
            m for parts in self.partitions.values() for m in parts.values()
            if m.cluster == event.cluster
        ]
        # Every partition reaches ts under the old broker state first.
        for m in cluster_parts:
            m.advance(ts, False, brokers, out)
        if brokers.apply(event.broker, event.state, event.broker_epoch):
            for m in cluster_parts:
                m.controller_removal(event.broker, event.state, event.broker_epoch, ts,
                                     brokers, out)

    def advance_all(self, until: int, inclusive: bool) -> None:
        """Checks for every partition, also those without new events."""
        out = self.decisions
        for parts in self.partitions.values():
            for m in parts.values():
                m.advance(until, inclusive, self.brokers[m.cluster], out)

    def _propagate(self) -> list[IsrPropagation]:
        props: dict[tuple, Propagation] = {}
        out: list[IsrPropagation] = []
        changes = sorted((d for d in self.decisions
                          if isinstance(d, IsrChange) and d.cause == "leader"), key=output_order)
        for d in changes:
            key = (d.policy, d.cluster, d.leader)
            p = props.get(key)
            if p is None:
                p = props[key] = Propagation(d.cluster, d.leader, d.policy)
            p.on_change(d.ts, d.topic, d.partition, out)
        for p in props.values():
            p.advance(self.max_ts, True, out)
        return out

    # ------------------------------------------------------------ output
    def states(self) -> list[PartitionState]:
        return [m.view() for policy in self.policies
                for _, m in sorted(self.partitions[policy].items())]

    def sorted_decisions(self) -> list:
        return sorted(self.decisions, key=output_order)

    def summary(self) -> list[PolicySummary]:
        rows = {p: PolicySummary(p) for p in self.policies}
        for d in self.decisions:
            if isinstance(d, IsrChange):
                row = rows[d.policy]
                if d.cause == "controller":
                    row.controller_removals += 1
                elif d.action == "shrink":
                    row.shrinks += 1
                else:
                    row.expands += 1
        for policy, parts in self.partitions.items():
            row = rows[policy]
            row.partitions = len(parts)
            for m in parts.values():
                under = m.time_under_min_isr(self.max_ts)
                if under > 0 or m.is_under_min_isr():
                    row.partitions_under_min_isr += 1
                row.time_under_min_isr_ms += under
        return list(rows.values())


_POLICY_ORDER = {"kafka": 0, "kip16": 1, "legacy": 2, "kip501": 3}


def output_order(d) -> tuple:
    """Canonical order of decisions: the same for every engine and batching."""
    if isinstance(d, IsrChange):
        seq = int(d.id.rsplit("/", 1)[1])
        return (d.ts, d.cluster, d.topic, d.partition, _POLICY_ORDER[d.policy], 0, seq)
    if isinstance(d, IsrPropagation):
        return (d.ts, d.cluster, "", -1, _POLICY_ORDER[d.policy], 1, d.broker)
    return (d.ts, getattr(d, "cluster", ""), getattr(d, "topic", ""),
            getattr(d, "partition", -1), _POLICY_ORDER.get(getattr(d, "policy", ""), 9), 2, 0)
