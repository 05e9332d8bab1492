"""The alert rules as an engine listener: one Watch per partition and policy,
evaluated around every step of its model (evaluator.py says when)."""

from __future__ import annotations

from typing import Optional

from isr.alerts.evaluator import AlertEvaluator
from isr.alerts.watch import NEVER, SLOTS, Watch
from isr.config import AlertSettings
from isr.engine.listeners import Listener
from isr.model.partition import PartitionModel


class AlertListener(Listener):
    name = "alerts"
    advance_gated = True  # Watch.wake (evaluator.set_due)

    def __init__(self, cfg: AlertSettings, replica_lag_time_max_ms: int) -> None:
        self.evaluator = AlertEvaluator(cfg, replica_lag_time_max_ms)
        self.serve_ms = self.evaluator.serve_ms  # (on_fetch's first test)
        self.watches: dict[tuple, Watch] = {}  # (policy, cluster, topic, partition) -> Watch
        # Changed since the last state_delta (keyed by the watch itself: hashed
        # by identity, cheaper per event than id(w)).
        self.dirty: dict[Watch, Watch] = {}

    def _watch(self, model: PartitionModel) -> Watch:
        """The model's watch, created or found by key (after a restore) and
        then kept on the model (`model.watch`). Only a watch created here
        counts as changed: linking a restored one changes nothing (the hooks
        that change a watch mark it themselves)."""
        policy, cluster, topic, partition = (model.rules.policy, model.cluster, model.topic,
                                             model.partition)
        key = (policy, cluster, topic, partition)
        w = self.watches.get(key)
        if w is None:
            w = self.watches[key] = Watch(cluster, topic, partition, policy)
            self.dirty[w] = w
        model.watch = w
        return w

    # These hooks run for every event and policy: most return at once.
    def on_advance(self, model: PartitionModel, until: int, inclusive: bool, out: list) -> None:
        w: Watch = model.watch or self._watch(model)
        # evaluator.due_by, its common case inline (no alert due by until)
        due = w.due if not w.alerts or w.alerts_due_floor > until else \
            self.evaluator.due_by(w, until)
        if due is None or due > until or (due == until and not inclusive):
            return  # the common case
        self.dirty[w] = w
        self.evaluator.advance(w, model, until, inclusive, out)

    def on_time(self, until: int, inclusive: bool, out: list) -> None:
        """Every partition has reached `until`: no event of an instant before
        it (or at it, if inclusive: the end of the input) can come, so the
        instants not over yet end (AlertEvaluator.close)."""
        evaluator = self.evaluator
        if evaluator.open:
            for w in [w for w in evaluator.open
                      if w.open_t < until or (inclusive and w.open_t == until)]:
                self.dirty[w] = w
                evaluator.close(w, out)

    def on_change(self, model: PartitionModel, change, out: list) -> None:
        w: Watch = model.watch or self._watch(model)
        self.dirty[w] = w
        self.evaluator.on_change(w, model, change, out)

    def on_event(self, model: PartitionModel, event, outcome, out: list) -> None:
        w: Watch = model.watch or self._watch(model)
        self.dirty[w] = w
        if outcome is not None:  # ignored or rejected
            self.evaluator.after_ignored(w, model, event.ts, out)
        elif (kind := event.type) == "append":  # (most end at _quiet_append_alone)
            self.evaluator.after_append(w, model, event.ts, out)
        elif kind == "fetch":  # (the engine hands most as values: on_fetch)
            ts, received_ts = event.ts, event.received_ts
            self.on_fetch(model, event.replica, ts, ts if received_ts is None else received_ts,
                          None, out)
        else:
            self.evaluator.after_event(w, model, event, out)

    def on_fetch(self, model: PartitionModel, replica: int, ts: int, fetch_ts: int = NEVER,
                 outcome=None, out: Optional[list] = None) -> Optional[bool]:
        """Most fetches end at the first test, with no call. It is the rule,
        kept here once, of a *plain* fetch: one served in time that changed
        no ISR and changes nothing the alerts read but times, so that what
        the evaluator's after_fetch would do is only to note them
        (_note_event, no scan):
        - no alert is active, no fetch of the watch is slow or unserved, and
          nothing is due by `ts` (Watch.quiet_to);
        - the leader's LEO and the number of replicas are as at the last
          event (a move can start or end a lag, a stall, an ISR condition);
        - the follower is not the one whose lag crossing `due` is
          (`due_lag`: that instant is then stale, and a scan finds the next);
        - the follower crosses its lag limit no earlier than `due`, if at all
          (Watch.lag_floor, else lag_crossing's own test: never caught up,
          or at the LEO).
        Anything else goes to after_fetch (its _quiet_fetch is the same rule
        with an alert active or a lag instant to take).

        `out` None: a dry run, changing nothing: skips_fetch calls it
        with (model, replica, ts) alone, so `fetch_ts` defaults to a time that reads as served in
        time (the session driver checks quiet_serve_ms itself). The fetch is
        then not applied yet and leaves its follower at the leader's LEO
        (sessions.py, `_folds`); it is plain if the rule holds of the model
        as it stands and the HW is as noted (the fold would move it unseen)."""
        w: Watch = model.watch or self._watch(model)
        if outcome is None:
            leader_leo = model.leader_leo
            if (ts < w.quiet_to and leader_leo == w.leader_leo and replica != w.due_lag
                    and fetch_ts >= ts - self.serve_ms  # served in time
                    and len(model.replicas) == w.replica_count):
                f = model.followers.get(replica)
                # (at_leader_leo, inline and first: most followers fetched
                # are at the LEO, and a quiet partition's lag_floor lies far
                # ahead of their last catch-up)
                if f is not None and ((f.leo == leader_leo and leader_leo >= 0)
                                      or f.last_caught_up_ts >= w.lag_floor
                                      or f.last_caught_up_ts <= 0):
                    hw, stall = model.hw, w.stall
                    if hw != stall.hw or (leader_leo > hw) != stall.behind:
                        if out is None:
                            return False
                        # stall.note(hw, leader_leo, ts), inline (a third of
                        # the fetches of a busy partition move its HW): the
                        # stretch starts again where the HW moved or fell
                        # behind the LEO.
                        behind = leader_leo > hw
                        if behind or hw != stall.hw:
                            stall.since = ts
                        stall.hw, stall.behind = hw, behind
                    elif out is None:
                        return True
                    self.dirty[w] = w
                    if ts > w.last_event_ts:
                        w.last_event_ts = ts
                    w.t = ts
                    return None
            if out is None:
                return False
            self.dirty[w] = w
            # The fetch of the follower whose lag crossing `due` is, the rest
            # of the rule above holding: where it brought its follower to
            # the LEO, after_fetch's only work is the next instant (most
            # such fetches follow a leader event, one per follower).
            if (replica == w.due_lag and ts < w.quiet_to and leader_leo == w.leader_leo
                    and fetch_ts >= ts - self.serve_ms
                    and len(model.replicas) == w.replica_count
                    and self.evaluator.due_lag_caught_up(w, model, replica, ts)):
                return None
            self.evaluator.after_fetch(w, model, replica, ts, fetch_ts, out)
        elif out is not None:  # ignored or rejected
            self.dirty[w] = w
            self.evaluator.after_ignored(w, model, ts, out)
        else:
            return False
        return None

    def on_folded_fetch(self, model: PartitionModel, replica: int, ts: int, fetch_ts: int,
                        out: list) -> None:
        """on_fetch of a fetch whose follower's run on_fetch's dry run
        (skips_fetch) found plain at its first fetch, with the HW as noted
        (Listener.on_folded_fetch): of on_fetch's rule only what depends on
        the fetch's times can have changed since (the follower, at the
        leader's LEO, stays there; the LEO, replicas, HW and the watch's
        instants stand). Where they hold, what on_fetch does of such a
        fetch: note its time. (One test instead of the rule again for most
        fetches a session catch-up applies: issue 23, branch `catchup`.)"""
        w = model.watch
        if (w is not None and ts < w.quiet_to and fetch_ts >= ts - self.serve_ms
                and model.leader_leo >= 0):
            self.dirty[w] = w
            if ts > w.last_event_ts:
                w.last_event_ts = ts
            w.t = ts
            return
        self.on_fetch(model, replica, ts, fetch_ts, None, out)

    def on_broker(self, model: PartitionModel, event, out: list) -> None:
        # A broker leaving can leave the partition leaderless with no ISR
        # change (the model's controller_removal).
        w: Watch = model.watch or self._watch(model)
        self.dirty[w] = w
        self.evaluator.after_broker(w, model, event.ts, out)

    # Fetch sessions: a partition with an alert pending or firing hears every
    # fetch; otherwise the fetches that only move a follower's times are
    # quiet (evaluator._quiet_fetch) except at its due instants.
    def next_due(self, model: PartitionModel) -> Optional[int]:
        w: Watch = model.watch or self._watch(model)
        if not w.alerts:
            return w.due  # due_by's common case, inline: the deadline index asks often
        return self.evaluator.due_by(w, 2**63)

    def skips_quiet_fetches(self, model: PartitionModel) -> bool:
        if self.evaluator.exhaustive:  # the reference hears every fetch
            return False
        return not (model.watch or self._watch(model)).alerts

    def skips_fetch(self, model: PartitionModel, replica: int, ts: int) -> bool:
        """A plain fetch: on_fetch's rule, as a dry run (True: plain, False:
        not). A method of its own, not `skips_fetch = on_fetch` in the class
        body: mypyc does not compile a method alias."""
        return bool(self.on_fetch(model, replica, ts))

    def quiet_serve_ms(self) -> Optional[int]:
        return self.evaluator.serve_ms

    def to_state(self) -> list:
        return [w.to_list() for _key, w in sorted(self.watches.items())]

    def from_state(self, state: list) -> None:
        """Adds or replaces the watches of `state` (a whole state or a delta)."""
        for row in state:
            w = Watch.from_list(row)
            key = (w.policy, w.cluster, w.topic, w.partition)
            kept = self.watches.get(key)
            if kept is None:
                kept = self.watches[key] = w
            else:  # updated in place: a model kept in memory holds it (`model.watch`)
                for name in SLOTS:
                    setattr(kept, name, getattr(w, name))
            if kept.held is not None:  # an instant not over yet
                self.evaluator.open[kept] = kept
            else:
                self.evaluator.open.pop(kept, None)

    def state_delta(self) -> list:
        """The watches changed since the last call; from_state applies them."""
        dirty, self.dirty = self.dirty, {}
        return [w.to_list() for w in dirty.values()]

    def clear_state_delta(self) -> None:
        self.dirty = {}
