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
from isr.contract.decisions import PartitionStates
from isr.contract.events import BROKER, LEADER, PARTITION, SCOPE
from isr.engine.deadlines import EAGER, DeadlineIndex
from isr.engine.listeners import Listener, hooks
from isr.engine.sequencer import Sequencer
from isr.engine.sessions import SessionDriver
from isr.model.brokers import Brokers
from isr.model.partition import PartitionModel
from isr.model.rules import Rules, ceil_to
from isr.model.stall import confirm_by


class Outcome:
    """What became of one input event (the first policy's verdict)."""

    __slots__ = ("status", "reason")

    def __init__(self, status: str, reason: str = "") -> None:
        self.status = status  # applied | ignored | rejected | late
        self.reason = reason


APPLIED = Outcome("applied")

# The order of events of the same ts under different routing keys
# (docs/contract.md, "Order of events"): Kafka keeps only each key's events
# in order, so the engine applies a ts's events by this rank, then in their
# arrival order (each key's own order):
# - broker events first (key `broker/<id>`), by broker id: the controller's
#   decision of a millisecond reaches the leader's view before what its
#   partitions did in it;
# - then the partitions' own events (append, leader, fetch, fetch_start,
#   isr: key `<topic>/<partition>`): a leader's appends of a millisecond are
#   in its log when the overdue ISR check after its stall runs and when a
#   fetch session of that millisecond reads it; a `leader` event comes
#   before the fetches of its new epoch;
# - then fetch sessions (key `leader/<id>`), by leader id.
# Events of different partitions touch different models and commute, so
# they keep their arrival order (the output is sorted: output_order).
_PARTITION_RANK = -1
_TIE_RANK = {name: _PARTITION_RANK for name, scope in SCOPE.items() if scope == PARTITION}
_PARTITION_TYPES = frozenset(_TIE_RANK)
_BROKER_RANK = -(1 << 40)  # + broker id: below every other rank


def tie_rank(event) -> int:
    """The rank of an event among the events of its ts (above)."""
    rank = _TIE_RANK.get(event.type)
    if rank is not None:
        return rank
    return _BROKER_RANK + event.broker if SCOPE[event.type] == BROKER else event.leader


def in_tie_order(entries: list) -> list:
    """Released (ts, seq, event, origin) entries, in (ts, seq) order, with
    each ts's events stably sorted by `tie_rank`; the same list when they
    already are (the common case). The events of one ts are together, so
    only a run of one ts whose ranks are out of order is sorted (a session
    input has such runs in most releases: sorting the whole release by
    (ts, rank) instead cost a key call per event)."""
    if {entry[2].type for entry in entries} <= _PARTITION_TYPES:
        return entries  # one rank: nothing to reorder (a per-partition input)
    ranks, rank_of = _TIE_RANK, tie_rank
    out = entries
    start, last_ts, last_rank, unordered = 0, None, 0, False
    for i, (ts, _seq, event, _origin) in enumerate(entries):
        rank = ranks.get(event.type)
        if rank is None:
            rank = rank_of(event)
        if ts != last_ts:
            if unordered:
                out = _sorted_run(entries, out, start, i)
                unordered = False
            start, last_ts = i, ts
        elif rank < last_rank:
            unordered = True
        last_rank = rank
    if unordered:
        out = _sorted_run(entries, out, start, len(entries))
    return out


def _sorted_run(entries: list, out: list, start: int, end: int) -> list:
    """`out` (a copy of `entries` once one run is sorted) with the run
    entries[start:end], of one ts, stably sorted by tie_rank."""
    if out is entries:
        out = list(entries)
    out[start:end] = sorted(entries[start:end], key=lambda e: tie_rank(e[2]))
    return out


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
                 external_watermark: bool = False, deadline_index: bool = True) -> None:
        """`listeners`: what hears of every step, the caller's choice
        (pipeline/listeners.py: the configured ones). `on_reject(origin,
        reason)`: a released event the model rejected (origin is what the
        caller passed to `submit`).
        `external_watermark`: the watermark comes from outside (a Spark batch)
        through advance_watermark(wm) instead of from the events seen here.
        `deadline_index`: checks visit only the models whose next instant
        they pass (deadlines.py); False: every model (the reference the
        index is tested and measured against)."""
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
        self._ungated_advance = any(not l.advance_gated for l in self.listeners
                                    if type(l).on_advance is not Listener.on_advance)
        self._on_change = hooks(self.listeners, "on_change")
        self._on_event = hooks(self.listeners, "on_event")
        self._on_fetch = hooks(self.listeners, "on_fetch")
        # (every listener's: the default calls on_fetch)
        self._on_folded_fetch = [l.on_folded_fetch for l in self.listeners
                                 if type(l).on_fetch is not Listener.on_fetch
                                 or type(l).on_folded_fetch is not Listener.on_folded_fetch]
        # A fetch can be applied as its values (apply_fetch) when every
        # listener that hears events hears fetches that way too.
        self.fetch_values = all(type(l).on_fetch is not Listener.on_fetch
                                for l in self.listeners
                                if type(l).on_event is not Listener.on_event)
        self._on_broker_hooks = hooks(self.listeners, "on_broker")
        self._on_time = hooks(self.listeners, "on_time")
        self._on_session_fetch = hooks(self.listeners, "on_session_fetch")
        self._on_unlink = hooks(self.listeners, "on_unlink")
        self._clear_state_delta = hooks(self.listeners, "clear_state_delta")
        # Fetch sessions (sessions.py): what a listener needs of the fetches
        # catching up may skip.
        self._next_due = hooks(self.listeners, "next_due")
        self._dues_gated = all(l.advance_gated for l in self.listeners
                               if type(l).next_due is not Listener.next_due)
        self._skips = [l.skips_quiet_fetches for l in self.listeners]
        self._skips_fetch = [l.skips_fetch for l in self.listeners]
        serve = [l.quiet_serve_ms() for l in self.listeners]
        self.quiet_serve_ms = min((b for b in serve if b is not None), default=None)
        self.session_driver = SessionDriver(self)
        # The deadline index (deadlines.py) and what makes skipping a visit
        # exact: `reached`, the last instant every model was brought to
        # (-1: none), and per policy `floor`, the first check instant not run
        # then, which a model skipped then takes when touched at or before
        # `reached` (a visit would have moved its next_check there).
        self.deadline_index = deadline_index
        self.deadlines = DeadlineIndex()
        self.model_count = 0  # models registered with the index
        self.visits = 0  # models visited by checks (a statistic, not state)
        self.reached = -1
        self.floor = {p: -1 for p in self.policies}
        self._existed = 0  # models created before `reached`
        # The models whose state changed since the last take_dirty (the
        # Spark job's state log, isr/stream/statelog.py), by id. A check that
        # only moved `next_check` does not count: a model restored with an
        # earlier next_check decides the same (the first check that can
        # shrink is computed from its followers, which did not move).
        self.dirty: dict[int, PartitionModel] = {}
        # Listener states a restored row held that no listener of this engine
        # takes, by name (engine/snapshot.py): a stage that moved elsewhere.
        self.unclaimed: dict[str, Any] = {}

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

    def queue_raw(self, entries: list, max_ts: int) -> None:
        """`submit_raw` of many (ts, seq, event, origin) entries at once, when
        the watermark is external and no entry is before it (the caller
        checked: none is late), `max_ts` the largest ts among them. Nothing is
        released: the watermark did not move, and every queued event is at or
        after it."""
        sequencer = self.sequencer
        assert sequencer.external, "queue_raw: only under an external watermark"
        sequencer.queued.extend(entries)
        if max_ts > sequencer.max_ts:
            sequencer.max_ts = max_ts
        if max_ts > self.max_ts:
            self.max_ts = max_ts

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
        """Apply released (ts, seq, event, origin) entries: decoded if raw,
        each ts's events in tie order (`in_tie_order`)."""
        apply, on_reject = self.apply, self.on_reject
        raws = [event for _ts, _seq, event, _origin in ready if event.__class__ is bytes]
        if raws:  # queued raw (submit_raw)
            decoded = iter(decode_many(raws))
            entries = []
            for entry in ready:
                event = entry[2]
                if event.__class__ is bytes:
                    event = next(decoded)
                    if isinstance(event, Rejection):  # validated before: only if the contract changed
                        if on_reject is not None:
                            on_reject(entry[3], event.reason)
                        continue
                    entry = (entry[0], entry[1], event, entry[3])
                entries.append(entry)
            ready = entries
        for _ts, _seq, event, origin in in_tie_order(ready):
            outcome = apply(event)
            if outcome.status == "rejected" and on_reject is not None:
                on_reject(origin, outcome.reason)

    # ------------------------------------------------------------ fan-out
    def apply_in_order(self, events: Iterable) -> None:
        """Apply events in the given order, bypassing the sequencer and the
        tie order (`in_tie_order`): the caller's order is the order."""
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
        apply_to = self._apply_to_model
        first = True
        for policy, parts in self.partitions.items():
            model = parts.get(key)
            if model is None:
                model = PartitionModel.first_seen(
                    self.rules[policy], event, self.monitor.min_isr_for(event.topic))
                parts[model.key] = model  # its key of the model's own (interned) names
                self._register(model)
            result = apply_to(model, event, brokers)
            if first and result is not None:
                outcome = Outcome(result[0], result[1])
                if result[0] == "ignored":
                    self.ignored[result[1]] += 1
            first = False
        return outcome

    def _prepare(self, model: PartitionModel, ts: int, brokers: Brokers,
                 catch_up: bool) -> None:
        """What comes before an event at `ts` reaches a model: the checks the
        deadline index skipped, its sessions' fetches (unless this is one of
        them), its checks up to `ts`, its listeners' time. Marks it changed."""
        scratch = self._scratch
        if ts <= self.reached:
            self._settle(model)
        if not model.due_dirty:  # deadlines.touch, inline: this runs for every event and policy
            model.due_dirty = True
            self.deadlines.dirty.append(model)
        if catch_up and model.sessions:
            self.session_driver.catch_up(model)
        self.dirty[id(model)] = model
        # _advance(model, ts, False) inline
        if ts > model.next_check:  # else no check instant lies before ts
            model.advance(ts, False, brokers, scratch)
            if scratch:
                self._dispatch(model)
        w = model.watch  # a gated on_advance (listeners.py) acts only after w.wake
        if w is None or ts > w.wake or self._ungated_advance:
            out = self.decisions
            for hook in self._on_advance:
                hook(model, ts, False, out)

    def _apply_to_model(self, model: PartitionModel, event, brokers: Brokers,
                        catch_up: bool = True):
        """One partition event to one policy's model, its listeners told (its
        sessions' fetches first, unless this is one of them)."""
        if event.type == "fetch" and self.fetch_values:  # to on_fetch, as its values
            ts, received_ts, broker_epoch = event.ts, event.received_ts, event.broker_epoch
            return self.apply_fetch(
                model, event.replica, event.leader, event.leader_epoch, ts,
                ts if received_ts is None else received_ts, event.fetch_offset,
                event.leader_leo, -1 if broker_epoch is None else broker_epoch, brokers, catch_up)
        self._prepare(model, event.ts, brokers, catch_up)
        scratch = self._scratch
        result = model.apply(event, brokers, scratch)
        if scratch:
            self._dispatch(model)
        for hook in self._on_event:
            hook(model, event, result, self.decisions)
        return result

    def apply_fetch_values(self, key: tuple, first: PartitionModel, replica: int, leader: int,
                           leader_epoch: int, ts: int, fetch_ts: int, fetch_offset: int,
                           leader_leo: int, broker_epoch: int) -> Optional[tuple[str, str]]:
        """`apply` of a fetch given as its values (`fetch_values` must hold,
        and the partition's models exist; `first` is the first policy's): a
        partition a session request lists (sessions.py). Returns the first
        policy's result."""
        if ts > self.max_ts:
            self.max_ts = ts
        brokers = self.brokers.get(key[0]) or self._brokers_of(key[0])
        outcome = self.apply_fetch(first, replica, leader, leader_epoch, ts, fetch_ts,
                                   fetch_offset, leader_leo, broker_epoch, brokers, True)
        if outcome is not None and outcome[0] == "ignored":
            self.ignored[outcome[1]] += 1
        if len(self.policies) > 1:
            partitions = self.partitions
            for policy in self.policies[1:]:
                self.apply_fetch(partitions[policy][key], replica, leader, leader_epoch, ts,
                                 fetch_ts, fetch_offset, leader_leo, broker_epoch, brokers, True)
        return outcome

    def apply_fetch(self, model: PartitionModel, replica: int, leader: int, leader_epoch: int,
                    ts: int, fetch_ts: int, fetch_offset: int, leader_leo: int,
                    broker_epoch: int, brokers: Brokers, catch_up: bool = False):
        """`_apply_to_model(model, fetch, brokers, catch_up)` for a fetch
        given as its values (`fetch_values` must hold): a session's fetch of
        a partition (sessions.py), without building the event."""
        self._prepare(model, ts, brokers, catch_up)
        scratch, out = self._scratch, self.decisions
        result = model.apply_fetch(replica, leader, leader_epoch, ts, fetch_ts, fetch_offset,
                                   leader_leo, broker_epoch, brokers, scratch)
        if scratch:
            self._dispatch(model)
        for hook in self._on_fetch:
            hook(model, replica, ts, fetch_ts, result, out)
        return result

    def apply_times_fetch(self, model: PartitionModel, replica: int, leader: int,
                          leader_epoch: int, ts: int, fetch_ts: int, fetch_offset: int,
                          leader_leo: int, broker_epoch: int, brokers: Brokers) -> bool:
        """`apply_fetch(model, ..., catch_up=False)` of a fetch the model
        takes as plainly moving only times (PartitionModel.apply_times_fetch),
        without `_prepare`'s general steps: True if applied so (outcome
        None), False if not (nothing changed that apply_fetch would not do
        first: it takes the fetch). `_prepare`'s steps, as they fall here:
        the settle and the mark as changed, which the caller made (the
        session catch-up, SessionDriver.catch_up and _apply_entry: `reached`
        stands while it runs, and a settle only raises next_check to a
        floor it then keeps); no check runs (ts <= next_check); no
        listener's on_advance acts (gated, and ts <= its wake)."""
        if self._on_advance:
            w = model.watch
            if w is None or ts > w.wake or self._ungated_advance:
                return False
        if not model.apply_times_fetch(replica, leader, leader_epoch, ts, fetch_ts, fetch_offset,
                                       leader_leo, broker_epoch, brokers):
            return False
        if not model.due_dirty:  # deadlines.touch, inline
            model.due_dirty = True
            self.deadlines.dirty.append(model)
        out = self.decisions
        for hook in self._on_fetch:
            hook(model, replica, ts, fetch_ts, None, out)
        return True

    def apply_folded_fetch(self, model: PartitionModel, f, replica: int, ts: int,
                           fetch_ts: int, broker_epoch: int, skipped_ts: int) -> bool:
        """`apply_times_fetch` of the last pending fetch of a session stream
        that folded (SessionDriver._fold_all, after `_folds`), the fetches
        before it skipped (the last of them at `skipped_ts`, -1: none): True
        if applied so, False if not (nothing changed). What `_folds` tested
        of the stream's first pending fetch holds of this one but what
        depends on the fetch itself, tested here: the broker epoch (the
        same in a stream's pending fetches, else a hard fetch caught them
        up: sessions.py `_is_hard`), the gap from the leader's last
        activity (note_skipped_activity's, then apply_times_fetch's test),
        a check instant before it, a listener's on_advance acting. The
        listeners hear it through `on_folded_fetch`: each said at `_folds`
        (skips_fetch) that it may miss the stream's first fetch."""
        if (ts > model.next_check or broker_epoch != f.broker_epoch or skipped_ts > ts):
            return False
        last = model.leader_active_ts
        if skipped_ts > last:
            last = skipped_ts
        # (stall_bound_ms(rules), inline as in PartitionModel.apply_times_fetch)
        if last >= 0 and ts - last > model.rules.replica_lag_time_max_ms:
            return False
        if self._on_advance:  # as apply_times_fetch: a gated on_advance acts after w.wake
            w = model.watch
            if w is None or ts > w.wake or self._ungated_advance:
                return False
        # (note_skipped_activity's move of leader_active_ts to skipped_ts is
        # in take_times_fetch's to ts, which is not earlier)
        model.take_times_fetch(f, ts, fetch_ts)
        if not model.due_dirty:  # deadlines.touch, inline
            model.due_dirty = True
            self.deadlines.dirty.append(model)
        out = self.decisions
        for hook in self._on_folded_fetch:
            hook(model, replica, ts, fetch_ts, out)
        return True

    def _advance(self, model: PartitionModel, until: int, inclusive: bool,
                 brokers: Brokers) -> None:
        """A partition's checks up to `until`, then its listeners' time."""
        if model.sessions:
            self.session_driver.catch_up(model)
        self._advance_model(model, until, inclusive, brokers)

    def _advance_model(self, model: PartitionModel, until: int, inclusive: bool,
                       brokers: Brokers) -> None:
        self.deadlines.touch(model)
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

    def before_next_instant(self, model: PartitionModel) -> int:
        """An instant `next_instant(model)` is not before (None counts as
        after every instant), read without asking: the model's next check
        (a shrink comes at one) and, where the listeners that have a
        next_due are advance-gated, the watch's `wake` (not after their
        next_due: listeners.py). -1: none known. The session catch-up's
        common course asks next_instant only for fetches after it."""
        at = model.next_check
        if self._next_due:
            w = model.watch
            if not self._dues_gated or w is None:
                return -1
            if w.wake < at:
                at = w.wake
        return at

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
                self.deadlines.touch(m)
                self.dirty[id(m)] = m
                m.controller_removal(event.broker, event.state, event.broker_epoch, ts,
                                     brokers, self._scratch)
                if self._scratch:
                    self._dispatch(m)
                for hook in self._on_broker_hooks:
                    hook(m, event, self.decisions)

    def advance_all(self, until: int, inclusive: bool) -> None:
        """Checks (and listeners' time) for every partition, also those without
        new events; then the listeners hear that the engine reached `until`.
        Only the models whose next instant lies before `until` (or at it) are
        visited (deadlines.py): for the others a visit changes nothing."""
        if self.deadline_index:
            due = self._due_models(until, inclusive)
        else:
            due = [m for parts in self.partitions.values() for m in parts.values()]
        self.visits += len(due)
        for m in due:
            self._advance(m, until, inclusive, self.brokers[m.cluster])
        self._reach(until, inclusive)
        out = self.decisions
        for hook in self._on_time:
            hook(until, inclusive, out)

    def take_dirty(self) -> list[PartitionModel]:
        """The models changed since the last call (see `dirty`)."""
        dirty, self.dirty = self.dirty, {}
        return list(dirty.values())

    def forget_changes(self) -> None:
        """Drop the record of what changed (the models', the sessions', the
        listeners' that override clear_state_delta cheaply): for a caller
        that writes no state log (`isr replay`), where it would only grow to
        hold every model and watch (~100 bytes per partition)."""
        self.dirty.clear()
        self.session_driver.forget_changes()
        for clear in self._clear_state_delta:
            clear()

    # ------------------------------------------------------------ deadline index
    def _register(self, model: PartitionModel) -> None:
        model.due_order = self.model_count
        self.model_count += 1
        self.deadlines.touch(model)

    def rebuild_index(self) -> None:
        """Index every model afresh, after models were put in place from a
        snapshot (engine/snapshot.py restore): their next_check is as they
        were saved, and every one of them saw the checks up to the watermark
        the state was saved at (an external one: a Spark batch's). Called
        when the models are restored, before any event: done later, it would
        take models created since for restored ones, and the watermark of
        the next check for the one the state was saved at."""
        self.deadlines.clear()
        self.model_count = 0
        for parts in self.partitions.values():
            for m in parts.values():
                m.due_at, m.due_stamp, m.due_dirty = None, 0, False
                self._register(m)
        self._restored()

    def adopt(self, model: PartitionModel, old: Optional[PartitionModel]) -> None:
        """`model` takes the place of `old` (None: a new partition) from a
        state delta (engine/snapshot.py apply_delta): it takes `old`'s place
        in the visiting order and its index entries no longer count."""
        if old is None:
            self._register(model)
            return
        model.due_order = old.due_order
        old.due_stamp, old.due_order = 0, -1  # dead: its heap and dirty entries are skipped
        self.deadlines.touch(model)

    def _restored(self) -> None:
        """Every model put in place so far saw the checks up to the
        watermark the state was saved at."""
        self._existed = self.model_count
        if self.sequencer.external and self.sequencer.external_watermark >= 0:
            # The last advance_all ran to the external watermark (advance_watermark).
            self._reach(self.sequencer.external_watermark, False)

    def _due_models(self, until: int, inclusive: bool) -> list[PartitionModel]:
        """The models a check up to `until` must visit, in the order a visit
        of every model takes (policy, then partition creation)."""
        deadlines = self.deadlines
        dirty, deadlines.dirty = deadlines.dirty, []
        # Each model touched since the last check, indexed at the first instant
        # a check must visit it: its next instant, the end of a suspected
        # leader stall's window, or every check (EAGER) if its sessions'
        # pending fetches may do more than move its followers' times.
        steady, next_due, place = self.session_driver.is_steady, self._next_due, deadlines.place
        for m in dirty:
            m.due_dirty = False
            if m.due_order < 0:
                continue  # replaced by a state delta (adopt)
            if m.sessions and not steady(m):
                at: Optional[int] = EAGER
            else:
                at = m._next_shrink_at() if m.leader >= 0 else None
                for hook in next_due:
                    t = hook(m)
                    if t is not None and (at is None or t < at):
                        at = t
                if m.stall_check_at >= 0:
                    t = confirm_by(m.rules, m.stall_check_at)
                    if at is None or t < at:
                        at = t
            if at != m.due_at or (at is not None and not m.due_stamp):
                place(m, at)
        deadlines.compact(self.model_count)
        due = deadlines.pop_due(until, inclusive)
        if len(due) > 1 and len(self.policies) > 1:
            rank = {p: i for i, p in enumerate(self.policies)}
            due.sort(key=lambda m: (rank[m.rules.policy], m.due_order))
        elif len(due) > 1:
            due.sort(key=lambda m: m.due_order)
        return due

    def _reach(self, until: int, inclusive: bool) -> None:
        """Every model is now as if brought to `until`: the floor of each
        policy's next check moves there."""
        if until < self.reached:
            return
        self.reached = until
        self._existed = self.model_count
        for policy, rules in self.rules.items():
            first_unrun = ceil_to(until + 1 if inclusive else until, rules.interval_ms)
            if first_unrun > self.floor[policy]:
                self.floor[policy] = first_unrun

    def _settle(self, m: PartitionModel) -> None:
        """A model touched at or before `reached` takes the next check a visit
        then would have given it (a model created since keeps its own)."""
        if m.due_order < self._existed:
            floor = self.floor[m.rules.policy]
            if m.next_check < floor:
                m.next_check = floor

    # ------------------------------------------------------------ views
    def catch_up_all(self) -> None:
        """Every partition up to date with its sessions' fetches (views,
        summaries), and with the checks the deadline index let it skip."""
        reached = self.reached
        for parts in self.partitions.values():
            for m in parts.values():
                if reached >= 0:
                    self._settle(m)
                if m.sessions:
                    self.session_driver.catch_up(m)

    def current(self, model: PartitionModel) -> PartitionModel:
        """`model` up to date with its sessions' fetches (a view of one)."""
        if self.reached >= 0:
            self._settle(model)
        if model.sessions:
            self.session_driver.catch_up(model)
        return model

    def models(self) -> Iterable[PartitionModel]:
        """Every partition's model, by policy then partition key."""
        self.catch_up_all()
        for policy in self.policies:
            parts = self.partitions[policy]
            for key in sorted(parts):
                yield parts[key]

    def states(self) -> PartitionStates:
        """Every partition's partition_state record, as its fields: a
        sequence of PartitionState views made on first use, whose JSON `isr
        replay` writes without them (contract/decisions.py)."""
        return PartitionStates([m.state_fields() for m in self.models()])

    def close(self) -> None:
        """Done with the engine (the end of a replay): its one reference
        cycle, with its session driver, is broken, so its models are freed
        as soon as the caller drops it. Left to the cyclic GC, freeing them
        took a pass over every object of every model: 1.5 s of CPU for
        100 k partitions (docs/benchmarks.md, "The start and the end").
        A second close does nothing."""
        driver = self.session_driver
        if hasattr(driver, "engine"):
            del driver.engine
