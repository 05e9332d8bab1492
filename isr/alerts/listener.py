"""The alert rules as an engine listener: one Watch per partition and policy,
evaluated around every step of its model (evaluator.py says when)."""

from __future__ import annotations

from typing import Optional

from isr.alerts.evaluator import AlertEvaluator
from isr.alerts.watch import Watch
from isr.config import AlertSettings
from isr.engine.listeners import Listener


class AlertListener(Listener):
    name = "alerts"
    advance_gated = True  # Watch.wake (evaluator._set_wake)

    def __init__(self, cfg: AlertSettings, replica_lag_time_max_ms: int) -> None:
        self.evaluator = AlertEvaluator(cfg, replica_lag_time_max_ms)
        self.serve_ms = self.evaluator.serve_ms  # (on_fetch's first test)
        self.watches: dict[tuple, Watch] = {}  # (policy, cluster, topic, partition) -> Watch
        # Changed since the last state_delta (keyed by the watch itself: hashed
        # by identity, cheaper per event than id(w)).
        self.dirty: dict[Watch, Watch] = {}

    def _watch(self, model) -> Watch:
        """The model's watch, created or found by key (after a restore) and
        then kept on the model (`model.watch`). Only a watch created here
        counts as changed: linking a restored one changes nothing (the hooks
        that change a watch mark it themselves)."""
        key = (model.rules.policy, *model.key)
        w = self.watches.get(key)
        if w is None:
            w = self.watches[key] = Watch(model.cluster, model.topic, model.partition,
                                          model.rules.policy)
            self.dirty[w] = w
        model.watch = w
        return w

    # These hooks run for every event and policy: most return at once.
    def on_advance(self, model, until: int, inclusive: bool, out: list) -> None:
        w = model.watch or self._watch(model)
        # evaluator.due_by, its common case inline (no alert due by until)
        due = w.due if not w.alerts or w.alerts_due_floor > until else \
            self.evaluator.due_by(w, until)
        if due is None or due > until or (due == until and not inclusive):
            return  # the common case
        self.dirty[w] = w
        self.evaluator.advance(w, model, until, inclusive, out)

    def on_change(self, model, change, out: list) -> None:
        w = model.watch or self._watch(model)
        self.dirty[w] = w
        self.evaluator.on_change(w, model, change, out)

    def on_event(self, model, event, outcome, out: list) -> None:
        w = model.watch or self._watch(model)
        self.dirty[w] = w
        if outcome is not None:  # ignored or rejected
            self.evaluator.after_ignored(w, model, event.ts, out)
        elif (kind := event.type) == "fetch":  # (the engine hands most as values: on_fetch)
            ts, received_ts = event.ts, event.received_ts
            self.on_fetch(model, event.replica, ts, ts if received_ts is None else received_ts,
                          None, out)
        elif kind != "append" or not self.evaluator.append_at_once(w, model, event.ts):
            self.evaluator.after_event(w, model, event, out)

    def on_fetch(self, model, replica: int, ts: int, fetch_ts: int, outcome, out: list) -> None:
        """Most fetches end at the first test, with no call: what the
        evaluator's after_fetch does (_note_event, _quiet_fetch) when no alert
        is active, the leader's LEO and the replicas did not move, nothing is
        slow or unserved, nothing is due by `ts` (Watch.wake), and the
        follower's lag crossing, if any, is no earlier than `due`
        (Watch.lag_floor) and not `due` itself (`due_lag`)."""
        w = model.watch or self._watch(model)
        self.dirty[w] = w
        if outcome is None:
            leader_leo = model.leader_leo
            if (ts < w.wake and not w.alerts and leader_leo == w.leader_leo
                    and not w.unserved and not w.served_ms
                    and ts - fetch_ts <= self.serve_ms and replica != w.due_lag
                    and len(model.replicas) == w.replica_count):
                f = model.followers.get(replica)
                if f is not None and f.last_caught_up_ts >= w.lag_floor:
                    if ts > w.last_event_ts:
                        w.last_event_ts = ts
                    hw, stall = model.hw, w.stall
                    if hw != stall.hw or (leader_leo > hw) != stall.behind:
                        stall.note(hw, leader_leo, ts)
                    w.t = ts
                    return
            self.evaluator.after_fetch(w, model, replica, ts, fetch_ts, out)
        else:  # ignored or rejected
            self.evaluator.after_ignored(w, model, ts, out)

    def on_broker(self, model, event, out: list) -> None:
        # A broker leaving can leave the partition leaderless with no ISR
        # change (the model's controller_removal).
        w = model.watch or self._watch(model)
        self.dirty[w] = w
        self.evaluator.after_broker(w, model, event.ts, out)

    # Fetch sessions: a partition with an alert pending or firing hears every
    # fetch; otherwise the fetches that only move a follower's times are
    # quiet (evaluator._quiet_fetch) except at its due instants.
    def next_due(self, model) -> Optional[int]:
        w = model.watch or self._watch(model)
        if not w.alerts:
            return w.due  # due_by's common case, inline: the deadline index asks often
        return self.evaluator.due_by(w, 2**63)

    def skips_quiet_fetches(self, model) -> bool:
        return not (model.watch or self._watch(model)).alerts

    def skips_fetch(self, model, replica: int, ts: int) -> bool:
        # What after_fetch does at such a fetch, served in time, when it only
        # notes the event's time (_quiet_fetch: no lag to start at the LEO):
        # no alert, nothing moved since the last event, no slow or unserved
        # fetch of the replica to forget, nothing due by ts, no instant of
        # its lag to drop.
        w = model.watch or self._watch(model)
        hw, stall, leader_leo = model.hw, w.stall, model.leader_leo
        return (not w.alerts and w.leader_leo == leader_leo and w.due_lag != replica
                and w.replica_count == len(model.replicas)
                and stall.hw == hw and stall.behind == (leader_leo > hw)
                and replica not in w.served_ms and replica not in w.unserved
                and (w.due is None or w.due > ts))

    def quiet_serve_ms(self) -> Optional[int]:
        return self.evaluator.serve_ms

    def to_state(self) -> list:
        return [w.to_list() for _key, w in sorted(self.watches.items())]

    def from_state(self, state: list) -> None:
        """Adds or replaces the watches of `state` (a whole state or a delta)."""
        for row in state:
            w = Watch.from_list(row)
            key = (w.policy, w.cluster, w.topic, w.partition)
            held = self.watches.get(key)
            if held is None:
                self.watches[key] = w
            else:  # updated in place: a model kept in memory holds it (`model.watch`)
                for name in Watch.__slots__:
                    setattr(held, name, getattr(w, name))

    def state_delta(self) -> list:
        """The watches changed since the last call; from_state applies them."""
        dirty, self.dirty = self.dirty, {}
        return [w.to_list() for w in dirty.values()]
