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
from isr.contract.events import BROKER, LEADER, SCOPE
from isr.engine.listeners import Listener, hooks
from isr.engine.sequencer import Sequencer
from isr.engine.sessions import SessionDriver
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
        # Fetch sessions (sessions.py): what a listener needs of the fetches
        # catching up may skip.
        self._next_due = hooks(self.listeners, "next_due")
        self._skips = [l.skips_quiet_fetches for l in self.listeners]
        serve = [l.quiet_serve_ms() for l in self.listeners]
        self.quiet_serve_ms = min((b for b in serve if b is not None), default=None)
        self.session_driver = SessionDriver(self)
        # The models whose state changed since the last take_dirty (the
        # Spark job's state log, isr/stream/statelog.py), by id. A check that
        # only moved `next_check` does not count: a model restored with an
        # earlier next_check decides the same (the first check that can
        # shrink is computed from its followers, which did not move).
        self.dirty: dict[int, PartitionModel] = {}

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
        scope = SCOPE[event.type]
        if scope == BROKER:
            self._on_broker(event)
            return APPLIED
        if scope == LEADER:
            result = self.session_driver.apply(event)
            return APPLIED if result is None else Outcome(result[0], result[1])
        outcome = APPLIED
        key = (event.cluster, event.topic, event.partition)
        brokers = self.brokers.get(event.cluster) or self._brokers_of(event.cluster)
        first = True
        for policy, parts in self.partitions.items():
            model = parts.get(key)
            if model is None:
                model = parts[key] = PartitionModel.first_seen(
                    self.rules[policy], event, self.monitor.min_isr_for(event.topic))
            result = self._apply_to_model(model, event, brokers)
            if first and result is not None:
                outcome = Outcome(result[0], result[1])
                if result[0] == "ignored":
                    self.ignored[result[1]] += 1
            first = False
        return outcome

    def _apply_to_model(self, model: PartitionModel, event, brokers: Brokers,
                        catch_up: bool = True):
        """One partition event to one policy's model, its listeners told (its
        sessions' fetches first, unless this is one of them)."""
        if catch_up and model.sessions:
            self.session_driver.catch_up(model)
        self.dirty[id(model)] = model
        ts, scratch, out = event.ts, self._scratch, self.decisions
        # _advance(model, ts, False) inline: this runs for every event and policy.
        if ts > model.next_check:  # else no check instant lies before ts
            model.advance(ts, False, brokers, scratch)
            if scratch:
                self._dispatch(model)
        for hook in self._on_advance:
            hook(model, ts, False, out)
        result = model.apply(event, brokers, scratch)
        if scratch:
            self._dispatch(model)
        for hook in self._on_event:
            hook(model, event, result, out)
        return result

    def _advance(self, model: PartitionModel, until: int, inclusive: bool,
                 brokers: Brokers) -> None:
        """A partition's checks up to `until`, then its listeners' time."""
        if model.sessions:
            self.session_driver.catch_up(model)
        self._advance_model(model, until, inclusive, brokers)

    def _advance_model(self, model: PartitionModel, until: int, inclusive: bool,
                       brokers: Brokers) -> None:
        before = model.stall_check_at
        model.advance(until, inclusive, brokers, self._scratch)
        if self._scratch:  # an ISR change
            self.dirty[id(model)] = model
            self._dispatch(model)
        elif model.stall_check_at != before:  # a suspected stall expired
            self.dirty[id(model)] = model
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

    def next_instant(self, model: PartitionModel) -> Optional[int]:
        """The next instant at which a check or a listener may act on `model`
        by itself (no input), or None (fetch sessions' catching up)."""
        best = model._next_shrink_at() if model.leader >= 0 else None
        for hook in self._next_due:
            t = hook(model)
            if t is not None and (best is None or t < best):
                best = t
        return best

    def skips_quiet_fetches(self, model: PartitionModel) -> bool:
        return all(skips(model) for skips in self._skips)

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
                self.dirty[id(m)] = m
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

    def take_dirty(self) -> list[PartitionModel]:
        """The models changed since the last call (see `dirty`)."""
        dirty, self.dirty = self.dirty, {}
        return list(dirty.values())

    # ------------------------------------------------------------ views
    def catch_up_all(self) -> None:
        """Every partition up to date with its sessions' fetches (views, summaries)."""
        for parts in self.partitions.values():
            for m in parts.values():
                if m.sessions:
                    self.session_driver.catch_up(m)

    def models(self) -> Iterable[PartitionModel]:
        """Every partition's model, by policy then partition key."""
        self.catch_up_all()
        for policy in self.policies:
            parts = self.partitions[policy]
            for key in sorted(parts):
                yield parts[key]

    def states(self) -> list[PartitionState]:
        return [m.view() for m in self.models()]
