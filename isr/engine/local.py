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

import orjson

from isr.alerts.evaluator import AlertEvaluator
from isr.alerts.watch import Watch
from isr.config import MonitorSettings
from isr.contract.decisions import (
    Alert, IsrChange, IsrPropagation, PartitionState, alert_order_fields,
)
from isr.contract.decode import Rejection, validate
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


def late_reason(ts: int, watermark: int, allowed_lateness_ms: int) -> str:
    return (f"ts {ts} is before the watermark {watermark} "
            f"(allowed lateness {allowed_lateness_ms} ms)")


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
    # True: the watermark comes from outside (Spark's, per micro-batch) through
    # advance_watermark(wm) instead of from the events seen here.
    external_watermark: bool = False
    # Called with (partition key, ts) after each partition event is applied
    # under every policy (the what-if report follows the models with it).
    after_apply: Optional[Callable[[tuple, int], None]] = None
    decisions: list = field(default_factory=list)
    ignored: Counter = field(default_factory=Counter)

    def __post_init__(self) -> None:
        self.policies = list(self.policies or self.monitor.policy)
        self.rules = {p: rules_for(self.monitor, p) for p in self.policies}
        self.partitions: dict[str, dict[tuple, PartitionModel]] = {p: {} for p in self.policies}
        self.brokers: dict[str, Brokers] = {}
        self.sequencer = Sequencer(
            None if self.external_watermark else self.monitor.allowed_lateness_ms)
        self.touched: set[tuple] = set()  # partitions changed since take_touched_states
        self.max_ts = -1
        # zk mode: per (policy, cluster, leader broker) batching, fed with
        # leader-driven ISR changes once the watermark has made them final.
        self.propagations: dict[tuple, Propagation] = {}
        self._backlog: list[list] = []  # [ts, seq, policy, cluster, broker, topic, partition]
        self._scanned = 0
        # Alerts (alerts.md): one Watch per partition and policy, beside its model.
        self.alerting = (AlertEvaluator(self.monitor.alerts, self.monitor.replica_lag_time_max_ms)
                         if self.monitor.alerts.enabled else None)
        self.watches: dict[str, dict[tuple, Watch]] = {p: {} for p in self.policies}

    # ------------------------------------------------------------ input
    def submit(self, event, seq: int, origin: Any = None) -> Outcome:
        """Offer one validated event; it is applied once the watermark passes it.
        Returns `late` at once, else `applied`; a model rejection of the event
        once released goes to `on_reject`."""
        sequencer = self.sequencer
        if not sequencer.offer(event.ts, seq, event, origin):
            return Outcome("late", late_reason(event.ts, sequencer.watermark,
                                               self.monitor.allowed_lateness_ms))
        if event.ts > self.max_ts:
            self.max_ts = event.ts
        if len(sequencer.pending) >= sequencer.release_at:
            self._run(sequencer.release())
        return APPLIED

    def apply_in_order(self, events: Iterable) -> None:
        """Apply events already in (ts, arrival) order, bypassing the sequencer."""
        for event in events:
            self.apply_next(event)

    def apply_next(self, event) -> Outcome:
        """Apply the next event of an input the caller keeps in order."""
        if event.ts > self.max_ts:
            self.max_ts = event.ts
        return self.apply(event)

    def advance_watermark(self, watermark: Optional[int] = None) -> None:
        """Streaming: apply what the watermark released and run every check
        before it, idle partitions included. Decisions up to the watermark are
        then final. An external watermark is given here."""
        if watermark is not None:
            self.sequencer.external_watermark = max(self.sequencer.external_watermark, watermark)
        self._run(self.sequencer.release())
        watermark = self.sequencer.watermark
        if watermark >= 0:
            self.advance_all(watermark, inclusive=False)
            self._propagate(watermark, inclusive=False)

    def take_decisions(self) -> list:
        """Hand over the decisions taken so far (streaming emits them per batch)."""
        self._collect_changes()
        taken, self.decisions = self.decisions, []
        self._scanned = 0
        for d in taken:
            if isinstance(d, IsrChange):
                self.touched.add((d.cluster, d.topic, d.partition))
        return taken

    def take_touched_states(self) -> list[PartitionState]:
        """The partition_state of every partition changed since the last call
        (call after take_decisions: a decision counts as a change)."""
        touched, self.touched = self.touched, set()
        return [self.partitions[p][key].view() for p in self.policies for key in sorted(touched)
                if key in self.partitions[p]]

    def finish(self, until: Optional[int] = None) -> None:
        """End of a bounded input: apply everything, run checks up to the last
        ts (or `until`, the last ts of the whole input when this engine holds
        only part of it)."""
        self._run(self.sequencer.drain())
        until = self.max_ts if until is None else max(until, self.max_ts)
        self.max_ts = until
        self.advance_all(until, inclusive=True)
        self._propagate(until, inclusive=True)

    # ------------------------------------------------------------ model
    def _run(self, ready: list) -> None:
        apply = self.apply
        for _ts, _seq, event, origin in ready:
            outcome = apply(event)
            if outcome.status == "rejected" and self.on_reject is not None:
                self.on_reject(origin, outcome.reason)

    def _brokers_of(self, cluster: str) -> Brokers:
        brokers = self.brokers.get(cluster)
        if brokers is None:
            brokers = self.brokers[cluster] = Brokers()
        return brokers

    def apply(self, event) -> Outcome:
        """Apply one event now, under every policy (the caller keeps the order)."""
        if event.type == "broker":
            self._on_broker(event)
            return APPLIED
        outcome = APPLIED
        key = (event.cluster, event.topic, event.partition)
        self.touched.add(key)
        brokers = self.brokers.get(event.cluster) or self._brokers_of(event.cluster)
        out = self.decisions
        first = True
        alerting = self.alerting
        for policy, parts in self.partitions.items():
            model = parts.get(key)
            if model is None:
                model = parts[key] = PartitionModel.first_seen(
                    self.rules[policy], event, self.monitor.min_isr_for(event.topic))
            if alerting is None:
                result = model.apply(event, brokers, out)
            else:
                result = self._apply_watched(policy, model, event, brokers, out)
            if first and result is not None:
                outcome = Outcome(result[0], result[1])
                if result[0] == "ignored":
                    self.ignored[result[1]] += 1
            first = False
        if self.after_apply is not None:
            self.after_apply(key, event.ts)
        return outcome

    def _apply_watched(self, policy: str, model: PartitionModel, event, brokers: Brokers,
                       out: list):
        """model.apply with the partition's alerts evaluated around it: checks
        before the event, time up to it, the event's own ISR changes, the event."""
        w = self._watch(policy, model)
        self._advance_model(policy, model, event.ts, False, brokers, out, w)
        start = len(out)
        result = model.apply(event, brokers, out)
        if len(out) > start:
            self._watch_changes(w, model, out, start)
        if result is None:
            self.alerting.after_event(w, model, event, out)
        else:  # ignored or rejected: the feed is alive, nothing else changed
            w.last_event_ts = event.ts
            self.alerting.advance(w, model, event.ts, True, out)
        return result

    def _watch(self, policy: str, model: PartitionModel) -> Watch:
        watches = self.watches[policy]
        w = watches.get(model.key)
        if w is None:
            w = watches[model.key] = Watch(model.cluster, model.topic, model.partition, policy)
        return w

    def _watch_changes(self, w: Watch, model: PartitionModel, out: list, start: int) -> None:
        for d in [d for d in out[start:] if isinstance(d, IsrChange)]:
            self.alerting.on_change(w, model, d, out)

    def _advance_model(self, policy: str, m: PartitionModel, until: int, inclusive: bool,
                       brokers: Brokers, out: list, w: Optional[Watch] = None) -> None:
        """Checks (and alert time) of one partition up to `until`."""
        if self.alerting is None:
            m.advance(until, inclusive, brokers, out)
            return
        w = w or self._watch(policy, m)
        start = len(out)
        m.advance(until, inclusive, brokers, out)
        if len(out) > start:
            self._watch_changes(w, m, out, start)
        self.alerting.advance(w, m, until, inclusive, out)

    def _on_broker(self, event) -> None:
        brokers = self._brokers_of(event.cluster)
        out, ts = self.decisions, event.ts
        cluster_parts = [
            (policy, m) for policy, parts in self.partitions.items() for m in parts.values()
            if m.cluster == event.cluster
        ]
        # Every partition reaches ts under the old broker state first.
        for policy, m in cluster_parts:
            self._advance_model(policy, m, ts, False, brokers, out)
        if brokers.apply(event.broker, event.state, event.broker_epoch):
            for policy, m in cluster_parts:
                start = len(out)
                m.controller_removal(event.broker, event.state, event.broker_epoch, ts,
                                     brokers, out)
                if self.alerting is not None:
                    self._watch_changes(self._watch(policy, m), m, out, start)

    def advance_all(self, until: int, inclusive: bool) -> None:
        """Checks (and alerts) for every partition, also those without new events."""
        out = self.decisions
        for policy, parts in self.partitions.items():
            for m in parts.values():
                self._advance_model(policy, m, until, inclusive, self.brokers[m.cluster], out)

    def _collect_changes(self) -> None:
        if self.monitor.propagation != "zk":
            return
        for d in self.decisions[self._scanned:]:
            if isinstance(d, IsrChange) and d.cause == "leader":
                self._backlog.append([d.ts, d.seq, d.policy, d.cluster,
                                      d.leader, d.topic, d.partition])
        self._scanned = len(self.decisions)

    def _propagate(self, until: int, inclusive: bool) -> None:
        """Feed the ISR changes made final (all have ts < until) in time order,
        then run the 2.5 s propagation ticks up to `until`."""
        self._collect_changes()
        if self.monitor.propagation != "zk":
            return
        out = self.decisions
        for ts, _seq, policy, cluster, broker, topic, partition in sorted(self._backlog):
            key = (policy, cluster, broker)
            p = self.propagations.get(key)
            if p is None:
                p = self.propagations[key] = Propagation(cluster, broker, policy)
            p.on_change(ts, topic, partition, out)
        self._backlog = []
        for p in self.propagations.values():
            p.advance(until, inclusive, out)
        self._scanned = len(out)

    # ------------------------------------------------------------ state store
    SNAPSHOT_VERSION = 2  # 2: alert watches

    def snapshot(self) -> bytes:
        """Everything needed to continue exactly where this engine stands,
        except the decisions already taken. Origins must be JSON-able."""
        pending = [[ts, seq, ev.model_dump(mode="json"), origin]
                   for ts, seq, ev, origin in self.sequencer.pending]
        return orjson.dumps({
            "v": self.SNAPSHOT_VERSION,
            "policies": self.policies,
            "partitions": {p: [m.to_list() for m in parts.values()]
                           for p, parts in self.partitions.items()},
            "brokers": {c: b.to_list() for c, b in self.brokers.items()},
            "sequencer": [self.sequencer.max_ts, pending, self.sequencer.external_watermark],
            "max_ts": self.max_ts,
            "propagations": [p.to_list() for p in self.propagations.values()],
            "backlog": self._backlog,
            "ignored": dict(self.ignored),
            "watches": {p: [w.to_list() for w in ws.values()] for p, ws in self.watches.items()},
        })

    @classmethod
    def restore(cls, monitor: MonitorSettings, blob: bytes,
                on_reject: Optional[Callable[[Any, str], None]] = None,
                external_watermark: bool = False) -> "LocalEngine":
        data = orjson.loads(blob)
        if data["v"] != cls.SNAPSHOT_VERSION:
            raise ValueError(f"engine state version {data['v']} is not {cls.SNAPSHOT_VERSION}")
        engine = cls(monitor, policies=data["policies"], on_reject=on_reject,
                     external_watermark=external_watermark)
        if list(monitor.policy) != data["policies"]:
            raise ValueError(f"state was written for policies {data['policies']}, "
                             f"the configuration says {list(monitor.policy)}")
        for policy, rows in data["partitions"].items():
            rules = engine.rules[policy]
            models = (PartitionModel.from_list(rules, row) for row in rows)
            engine.partitions[policy] = {m.key: m for m in models}
        engine.brokers = {c: Brokers.from_list(rows) for c, rows in data["brokers"].items()}
        max_ts, pending, external = data["sequencer"]
        engine.sequencer.max_ts = max_ts
        engine.sequencer.external_watermark = external
        for ts, seq, ev, origin in pending:
            event = validate(ev)
            if isinstance(event, Rejection):  # only if the contract itself changed
                raise ValueError(f"a pending event no longer validates: {event.reason}")
            engine.sequencer.pending.append((ts, seq, event, origin))
        for row in data["propagations"]:
            p = Propagation.from_list(row)
            engine.propagations[(p.policy, p.cluster, p.broker)] = p
        engine._backlog = data["backlog"]
        engine.max_ts = data["max_ts"]
        engine.ignored = Counter(data["ignored"])
        for policy, rows in data["watches"].items():
            watches = (Watch.from_list(row) for row in rows)
            engine.watches[policy] = {(w.cluster, w.topic, w.partition): w for w in watches}
        return engine

    # ------------------------------------------------------------ output
    def states(self) -> list[PartitionState]:
        return [m.view() for policy in self.policies
                for _, m in sorted(self.partitions[policy].items())]

    def sorted_decisions(self) -> list:
        return sorted(self.decisions, key=output_order)

    def summary(self) -> list[PolicySummary]:
        return summarize(self.policies, self.decisions, self.model_stats())

    def model_stats(self) -> dict[str, list[int]]:
        """Per policy: [partitions, partitions ever under min ISR, ms under min ISR]."""
        stats = {}
        for policy, parts in self.partitions.items():
            row = stats[policy] = [len(parts), 0, 0]
            for m in parts.values():
                under = m.time_under_min_isr(self.max_ts)
                if under > 0 or m.is_under_min_isr():
                    row[1] += 1
                row[2] += under
        return stats


def summarize(policies: list[str], decisions: Iterable, stats: dict[str, list[int]]
              ) -> list[PolicySummary]:
    """The replay summary from the decisions and the models' statistics."""
    rows = {p: PolicySummary(p) for p in policies}
    for d in decisions:
        if isinstance(d, IsrChange):
            row = rows[d.policy]
            if d.cause == "controller":
                row.controller_removals += 1
            elif d.action == "shrink":
                row.shrinks += 1
            else:
                row.expands += 1
    for policy, (partitions, under, under_ms) in stats.items():
        row = rows[policy]
        row.partitions += partitions
        row.partitions_under_min_isr += under
        row.time_under_min_isr_ms += under_ms
    return list(rows.values())


_POLICY_ORDER = {"kafka": 0, "kip16": 1, "legacy": 2, "kip501": 3}


def output_order(d) -> tuple:
    """Canonical order of decisions: the same for every engine and batching."""
    if isinstance(d, IsrChange):
        return (d.ts, d.cluster, d.topic, d.partition, _POLICY_ORDER[d.policy], 0, d.seq)
    if isinstance(d, IsrPropagation):
        return (d.ts, d.cluster, "", -1, _POLICY_ORDER[d.policy], 1, d.broker)
    if isinstance(d, Alert):
        cluster, topic, partition, policy = alert_order_fields(d)
        return (d.ts, cluster, topic, partition, _POLICY_ORDER[policy], 3, d.id)
    return (d.ts, getattr(d, "cluster", ""), getattr(d, "topic", ""),
            getattr(d, "partition", -1), _POLICY_ORDER.get(getattr(d, "policy", ""), 9), 2, 0)
