"""The local engine: the leader model over a bounded or unbounded event feed.

It does two things: it keeps events in event-time order (the Sequencer) and it
fans each event out to the partition's model under every policy (broker
events to every partition of their cluster). Everything else listens to what
the models report (listeners.py): the alert rules, ZooKeeper-era
propagation, the what-if timelines, the stream's partition-state output.
`isr replay` and the Spark job's buckets both run it.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Callable, Iterable, Optional

from isr.config import MonitorSettings
from isr.contract.decode import Rejection, decode_many
from isr.contract.decisions import PartitionState
from isr.contract.events import BROKER, SCOPE
from isr.engine.listeners import Listener, hooks
from isr.engine.sequencer import Sequencer
from isr.model.brokers import Brokers
from isr.model.partition import PartitionModel
from isr.model.rules import Rules


class Outcome:
    """What became of one input event (the first policy's verdict)."""

    __slots__ = ("status", "reason")

    def __init__(self, status: str, reason: str = "") -> None:
        self.status = status  # applied | ignored | rejected | late
        self.reason = reason


APPLIED = Outcome("applied")


def rules_for(monitor: MonitorSettings, policy: str) -> Rules:
    return Rules.for_policy(
        policy,
        replica_lag_time_max_ms=monitor.replica_lag_time_max_ms,
        isr_expiration_interval_ms=monitor.isr_expiration_interval_ms,
        replica_lag_max_messages=monitor.replica_lag_max_messages,
    )


class LocalEngine:
    def __init__(self, monitor: MonitorSettings, policies: Optional[list[str]] = None,
                 listeners: Iterable[Listener] = (),
                 on_reject: Optional[Callable[[Any, str], None]] = None,
                 external_watermark: bool = False) -> None:
        """`listeners`: what hears of every step, the caller's choice
        (pipeline/listeners.py: the configured ones). `on_reject(origin,
        reason)`: a released event the model rejected (origin is what the
        caller passed to `submit`).
        `external_watermark`: the watermark comes from outside (a Spark batch)
        through advance_watermark(wm) instead of from the events seen here."""
        self.monitor = monitor
        self.policies = list(policies or monitor.policy)
        self.rules = {p: rules_for(monitor, p) for p in self.policies}
        self.partitions: dict[str, dict[tuple, PartitionModel]] = {p: {} for p in self.policies}
        self.brokers: dict[str, Brokers] = {}
        self.sequencer = Sequencer(monitor.allowed_lateness_ms, monitor.max_future_ms,
                                   external=external_watermark)
        self.on_reject = on_reject
        self.decisions: list = []  # output records taken since the last take_decisions
        self.ignored: Counter = Counter()
        self.max_ts = -1
        self._scratch: list = []  # a model's ISR changes of one call, before dispatch
        self.listeners = list(listeners)
        self._on_advance = hooks(self.listeners, "on_advance")
        self._on_change = hooks(self.listeners, "on_change")
        self._on_event = hooks(self.listeners, "on_event")
        self._on_broker_hooks = hooks(self.listeners, "on_broker")
        self._on_time = hooks(self.listeners, "on_time")

    def listener(self, kind: type) -> Optional[Listener]:
        return next((l for l in self.listeners if isinstance(l, kind)), None)

    # ------------------------------------------------------------ ordering
    def submit(self, event, seq: int, origin: Any = None) -> Outcome:
        """Offer one validated event; it is applied once the watermark passes it.
        Returns `late` or `future` at once, else `applied`; a model rejection of
        the event once released goes to `on_reject`."""
        return self.submit_raw(event.ts, event, seq, origin)

    def submit_raw(self, ts: int, event, seq: int, origin: Any = None) -> Outcome:
        """`submit` for an event that may still be its raw JSON bytes, already
        validated (the Spark job's packing stage did): it is decoded only when
        released, and until then a saved state keeps the bytes as they are."""
        sequencer = self.sequencer
        verdict = sequencer.offer(ts, seq, event, origin)
        if verdict is not None:
            return Outcome(verdict, sequencer.refusal(verdict, ts))
        if ts > self.max_ts:
            self.max_ts = ts
        if len(sequencer.queued) >= sequencer.release_at:
            self._run(sequencer.release())
        return APPLIED

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

    def finish(self, until: Optional[int] = None) -> None:
        """End of a bounded input: apply everything, run checks up to the last
        ts (or `until`, the last ts of the whole input when this engine holds
        only part of it)."""
        self._run(self.sequencer.drain())
        until = self.max_ts if until is None else max(until, self.max_ts)
        self.max_ts = until
        self.advance_all(until, inclusive=True)

    def take_decisions(self) -> list:
        """Hand over the output records taken so far (streaming emits them per batch)."""
        taken, self.decisions = self.decisions, []
        return taken

    def _run(self, ready: list) -> None:
        apply, on_reject = self.apply, self.on_reject
        raws = [event for _ts, _seq, event, _origin in ready if event.__class__ is bytes]
        decoded = iter(decode_many(raws)) if raws else None  # queued raw (submit_raw)
        for _ts, _seq, event, origin in ready:
            if event.__class__ is bytes:
                event = next(decoded)
                if isinstance(event, Rejection):  # validated before: only if the contract changed
                    if on_reject is not None:
                        on_reject(origin, event.reason)
                    continue
            outcome = apply(event)
            if outcome.status == "rejected" and on_reject is not None:
                on_reject(origin, outcome.reason)

    # ------------------------------------------------------------ fan-out
    def apply_in_order(self, events: Iterable) -> None:
        """Apply events already in (ts, arrival) order, bypassing the sequencer."""
        for event in events:
            self.apply(event)

    def apply(self, event) -> Outcome:
        """Apply one event now, under every policy (the caller keeps the order)."""
        ts = event.ts
        if ts > self.max_ts:
            self.max_ts = ts
        if SCOPE[event.type] == BROKER:
            self._on_broker(event)
            return APPLIED
        outcome = APPLIED
        key = (event.cluster, event.topic, event.partition)
        brokers = self.brokers.get(event.cluster) or self._brokers_of(event.cluster)
        scratch, out, on_event = self._scratch, self.decisions, self._on_event
        on_advance = self._on_advance
        first = True
        for policy, parts in self.partitions.items():
            model = parts.get(key)
            if model is None:
                model = parts[key] = PartitionModel.first_seen(
                    self.rules[policy], event, self.monitor.min_isr_for(event.topic))
            # _advance(model, ts, False) inline: this runs for every event and policy.
            if ts > model.next_check:  # else no check instant lies before ts
                model.advance(ts, False, brokers, scratch)
                if scratch:
                    self._dispatch(model)
            for hook in on_advance:
                hook(model, ts, False, out)
            result = model.apply(event, brokers, scratch)
            if scratch:
                self._dispatch(model)
            for hook in on_event:
                hook(model, event, result, out)
            if first and result is not None:
                outcome = Outcome(result[0], result[1])
                if result[0] == "ignored":
                    self.ignored[result[1]] += 1
            first = False
        return outcome

    def _advance(self, model: PartitionModel, until: int, inclusive: bool,
                 brokers: Brokers) -> None:
        """A partition's checks up to `until`, then its listeners' time."""
        model.advance(until, inclusive, brokers, self._scratch)
        if self._scratch:
            self._dispatch(model)
        out = self.decisions
        for hook in self._on_advance:
            hook(model, until, inclusive, out)

    def _dispatch(self, model: PartitionModel) -> None:
        """The ISR changes a model call committed: to the output, then to the listeners."""
        out, on_change = self.decisions, self._on_change
        for change in self._scratch:
            out.append(change)
            for hook in on_change:
                hook(model, change, out)
        self._scratch.clear()

    def _brokers_of(self, cluster: str) -> Brokers:
        brokers = self.brokers.get(cluster)
        if brokers is None:
            brokers = self.brokers[cluster] = Brokers()
        return brokers

    def _on_broker(self, event) -> None:
        brokers = self._brokers_of(event.cluster)
        ts = event.ts
        cluster_parts = [m for parts in self.partitions.values() for m in parts.values()
                         if m.cluster == event.cluster]
        # Every partition reaches ts under the old broker state first.
        for m in cluster_parts:
            self._advance(m, ts, False, brokers)
        if brokers.apply(event.broker, event.state, event.broker_epoch):
            for m in cluster_parts:
                m.controller_removal(event.broker, event.state, event.broker_epoch, ts,
                                     brokers, self._scratch)
                if self._scratch:
                    self._dispatch(m)
                for hook in self._on_broker_hooks:
                    hook(m, event, self.decisions)

    def advance_all(self, until: int, inclusive: bool) -> None:
        """Checks (and listeners' time) for every partition, also those without
        new events; then the listeners hear that the engine reached `until`."""
        for parts in self.partitions.values():
            for m in parts.values():
                self._advance(m, until, inclusive, self.brokers[m.cluster])
        out = self.decisions
        for hook in self._on_time:
            hook(until, inclusive, out)

    # ------------------------------------------------------------ views
    def models(self) -> Iterable[PartitionModel]:
        """Every partition's model, by policy then partition key."""
        for policy in self.policies:
            parts = self.partitions[policy]
            for key in sorted(parts):
                yield parts[key]

    def states(self) -> list[PartitionState]:
        return [m.view() for m in self.models()]
