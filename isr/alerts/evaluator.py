"""Alert lifecycle in event time (docs/alerts.md).

The engine calls the evaluator around every change of a partition's model:
before an event (`advance`: time passes up to it), after each ISR change (at the
change's ts, with the change's ISR and HW) and after the event. Between those
calls nothing changes but time, so the evaluator steps exactly to each
instant where a condition, a `for` duration or a repeat interval can change
the outcome. A replay and a stream therefore raise the same alerts at the same
startsAt, whatever the batching. What an alert does within one instant is
sent once the instant is over, as its state at the end against its state at
the start (`_step`, `close`: docs/alerts.md, "One instant, one outcome").
"""

from __future__ import annotations

import hashlib
from datetime import datetime, timezone

from typing import Literal, Optional

from isr.contract.catalog import CATALOG, RULES
from isr.alerts.conditions import (PARTITION, RuleParams, describe, isr_conditions,
                                   lag_crossing, lag_crossings, lag_floor, next_instant, scan,
                                   still_lagging)
from isr.alerts.watch import EMPTY, NEVER, AtChange, PartitionView, Watch, own
from isr.config import AlertSettings
from isr.contract.decisions import Alert, IsrChange

# Conditions a fetch (without an ISR change) cannot end.
FETCH_STABLE = frozenset(r.name for r in CATALOG if not r.fetch_can_end)
# Conditions an append (without an ISR change) cannot end.
APPEND_STABLE = frozenset(r.name for r in CATALOG if not r.append_can_end)


def set_due(w: Watch, due: Optional[int], due_lag: int, P: RuleParams) -> None:
    """The one writer of a watch's next instant (`due`, and whose lag
    crossing it is: `due_lag`), called too wherever the alerts move: it
    sets what derives from them (Watch: `wake`, `quiet_to`, `lag_floor`),
    so none of it can be left stale."""
    w.due, w.due_lag = due, due_lag
    wake = NEVER if due is None else due
    if w.alerts:
        if w.alerts_due_floor < wake:
            wake = w.alerts_due_floor
        w.quiet_to = -1
    else:
        # (served_ms and unserved grow only where a scan follows, which
        # comes here: a -1 left after they empty only costs a scan.)
        w.quiet_to = -1 if w.served_ms or w.unserved else wake
    w.wake = wake
    w.lag_floor = lag_floor(due, P)


def _due_after(w: Watch, view: PartitionView, bound: int, P: RuleParams) -> bool:
    """Where no alert is active: whether next_instant's first instant lies
    after `bound` (or there is none); then it becomes `due`."""
    nxt = next_instant(w, view, P)
    if nxt is None or (nxt[0] is not None and nxt[0] <= bound):
        return False
    set_due(w, nxt[0], nxt[1], P)
    return True


def iso(ms: int) -> str:
    """Alertmanager's time format (RFC 3339, UTC, milliseconds)."""
    return datetime.fromtimestamp(ms / 1000, timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def fingerprint(labels: dict[str, str]) -> str:
    """Identity = alertname + labels (docs/alerts.md): stable across restarts."""
    text = "\x1f".join(f"{k}={labels[k]}" for k in sorted(labels))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class AlertEvaluator:
    def __init__(self, cfg: AlertSettings, replica_lag_time_max_ms: int,
                 exhaustive: bool = False) -> None:
        """`exhaustive`: scan after every event, without the shortcuts below
        that skip a scan when no condition can change: the reference they
        are tested against (their alerts must be the same)."""
        self.cfg = cfg
        self.lag_max_ms = replica_lag_time_max_ms
        self.exhaustive = exhaustive
        self._params: dict[str, RuleParams] = {}
        # No topic's SlowLeaderFetch limit is below this: a fetch served
        # within it is not slow (after_fetch's first test).
        self.serve_ms = min(cfg.rule("SlowLeaderFetch", t).follower_fetch_process_time_max_ms
                            for t in ("", *cfg.topics))
        # The watches with an instant not over yet (Watch.held), for the end
        # of input or a watermark to close (AlertListener.on_time).
        self.open: dict[Watch, Watch] = {}

    def params(self, topic: str) -> RuleParams:
        params = self._params.get(topic)
        if params is None:
            params = self._params[topic] = RuleParams(self.cfg, topic, self.lag_max_ms)
        return params

    # ------------------------------------------------------------ entry points
    def on_change(self, w: Watch, model: PartitionView, d: IsrChange, out: list) -> None:
        self.advance(w, AtChange(model, d.isr_before, w.stall.hw), d.ts, False, out)
        w.flaps.add(d.ts, self.params(w.topic).flap_window_ms)
        w.stall.note(d.hw, model.leader_leo, d.ts)
        self._step(w, AtChange(model, d.isr_after, d.hw), d.ts, out)

    def after_event(self, w: Watch, model: PartitionView, event, out: list) -> None:
        kind = event.type
        if kind == "fetch":
            self.after_fetch(w, model, event.replica, event.ts, event.fetch_ts, out)
            return
        ts = event.ts
        if kind == "append":
            self.after_append(w, model, ts, out)
            return
        self._note_event(w, model, ts)
        if kind == "fetch_start":
            w.unserved = own(w.unserved)
            w.unserved.setdefault(event.replica, ts)
        elif kind == "leader":
            w.served_ms = w.unserved = EMPTY
            w.reported = None  # the new epoch's committed ISR is not known yet
            if not w.alerts and self._quiet_leader(w, model, ts):
                return
        elif kind == "isr":
            w.reported = list(event.isr)
        self._step(w, model, ts, out)

    def after_append(self, w: Watch, model: PartitionView, ts: int, out: list) -> None:
        """after_event for an append (AlertListener.on_event calls it
        directly): most, with no alert active, end at _quiet_append_alone,
        which notes the event itself."""
        if w.alerts:
            old_leo = w.leader_leo  # before this event (_note_event); -1: not known
            self._note_event(w, model, ts)
            if old_leo >= 0 and self._quiet_append(w, model, ts):
                return
        elif self._quiet_append_alone(w, model, ts):
            return
        self._step(w, model, ts, out)

    def after_fetch(self, w: Watch, model: PartitionView, replica: int, ts: int, fetch_ts: int,
                    out: list) -> None:
        """after_event for a fetch, given as its values (most end before it:
        AlertListener.on_fetch)."""
        moved = self._note_event(w, model, ts)
        if w.unserved:
            w.unserved.pop(replica, None)
            if not w.unserved:
                w.unserved = EMPTY  # (watch.py, EMPTY)
        served = ts - fetch_ts
        params = self._params.get(w.topic) or self.params(w.topic)
        if served > params.slow_ms:
            w.served_ms = own(w.served_ms)
            w.served_ms[replica] = served  # only slow times are kept
        else:
            if w.served_ms:
                w.served_ms.pop(replica, None)
                if not w.served_ms:
                    w.served_ms = EMPTY
            if not moved and self._quiet_fetch(w, model, replica, ts, params):
                w.t = ts  # (read only while an alert is active)
                return
        self._step(w, model, ts, out)

    def due_lag_caught_up(self, w: Watch, model: PartitionView, replica: int, ts: int) -> bool:
        """after_fetch of a fetch of the `due_lag` follower, served in time,
        at an instant before `quiet_to`, that moved neither the leader's LEO
        nor the replicas (AlertListener.on_fetch tested those), where it left
        its follower with no lag to grow (at the LEO, or never caught up):
        True if done (its time noted, the next instant found: _quiet_fetch's
        `due_lag` case, its other cases settled by these tests: no alert is
        active, nothing is slow or unserved, `due` lies after `ts`); False
        if after_fetch is to take it (noting it again changes nothing). Four
        calls less for most of the fetches that follow a leader event
        (issue 23, branch `alertlead`)."""
        f = model.followers.get(replica)
        if (self.exhaustive or f is None
                or not ((f.leo == model.leader_leo and f.leo >= 0) or f.last_caught_up_ts <= 0)):
            return False
        if ts > w.last_event_ts:  # _note_event, its LEO and replicas as noted
            w.last_event_ts = ts
        hw, stall = model.hw, w.stall
        if hw != stall.hw or (model.leader_leo > hw) != stall.behind:
            stall.note(hw, model.leader_leo, ts)
        P = self._params.get(w.topic) or self.params(w.topic)
        return self._none_due_yet(w, model, ts, P)

    @staticmethod
    def _note_event(w: Watch, model: PartitionView, ts: int) -> bool:
        """What every applied event notes; whether the leader's LEO or the
        number of replicas moved (then w holds the new ones)."""
        if ts > w.last_event_ts:  # (a session catch-up may apply one follower's last
            w.last_event_ts = ts  # fetch after another's later one: sessions.py)
        hw, stall, leader_leo = model.hw, w.stall, model.leader_leo
        if hw != stall.hw or (leader_leo > hw) != stall.behind:  # else a no-op
            stall.note(hw, leader_leo, ts)
        # The leader's LEO, and before the first leader event the replicas (a
        # fetch of a replica not seen yet adds it: docs/rules.md), can move at
        # any event, and can start or end a lag, a stall or a condition on the
        # ISR's health: only an append's new LEO is checked on the spot
        # (_quiet_append); any other move is scanned. -1: not known (after a
        # restore or an ignored event), so the event is scanned.
        n = len(model.replicas)
        if leader_leo != w.leader_leo or n != w.replica_count:
            w.leader_leo, w.replica_count = leader_leo, n
            return True
        return False

    def after_ignored(self, w: Watch, model: PartitionView, ts: int, out: list) -> None:
        """An event the model ignored or rejected at `ts` (rare): it ends a
        silence, and the first fetch of a replica before any leader event
        adds it even when the fetch is then refused. Scanned, and so is the
        next event."""
        w.last_event_ts = ts
        w.leader_leo = -1
        # The HW as it stands, as after_event notes it: an ISR change coming
        # next reads the HW before it from here (AtChange), never the -1 of a
        # watch that has not seen one (it read as "hw -1 stalled since 1970").
        hw, stall = model.hw, w.stall
        if hw != stall.hw or (model.leader_leo > hw) != stall.behind:
            stall.note(hw, model.leader_leo, ts)
        self._step(w, model, ts, out)

    def after_broker(self, w: Watch, model: PartitionView, ts: int, out: list) -> None:
        """A broker event of the partition's cluster was applied at `ts`. Any
        ISR change it caused came through on_change; what else it can change
        is the leader, gone (the model's controller_removal). So only a
        leaderless partition is scanned, not every partition of the cluster,
        and one whose next instant is this event's time: a scan after the
        broker event would take it there, before a later event of the same
        time could settle it (as a scan after every event does)."""
        if model.leader < 0 or self.exhaustive or w.wake <= ts:
            self._step(w, model, ts, out)

    def _quiet_leader(self, w: Watch, model: PartitionView, ts: int) -> bool:
        """Whether the scan after a leader event would find nothing holding,
        where no alert is active and no ISR change is recent: then it is
        skipped, and `due` is what it would find (next_instant). The event
        cleared the slow and unserved fetches and the reported ISR (no
        SlowLeaderFetch, no IsrDivergence) and was noted (no silence); what
        can still hold is a condition on the ISR's size (isr_conditions,
        asked as the scan asks it) or a time-driven one whose instant has
        come (a follower's lag or the stalled HW, where a leader event keeps
        them): next_instant gives the first of those instants, so none has
        come if it lies after `ts`."""
        if self.exhaustive or w.flaps.times:
            return False
        P = self._params.get(w.topic) or self.params(w.topic)
        return not isr_conditions(model, P) and self._none_due_yet(w, model, ts, P)

    @staticmethod
    def _none_due_yet(w: Watch, model: PartitionView, ts: int, P: RuleParams) -> bool:
        """Where no condition holds at `ts`: whether next_instant's first
        instant lies after `ts` (then none has come, and it becomes `due`)."""
        if not _due_after(w, model, ts, P):
            return False
        w.t = ts
        return True

    def _quiet_fetch(self, w: Watch, model: PartitionView, replica: int, ts: int,
                     P: RuleParams) -> bool:
        """Whether no condition changes at a fetch that moved neither the
        leader's LEO nor the replicas and changed no ISR (those come through
        on_change), so the scan is skipped: the plain fetch's rule
        (AlertListener.on_fetch, which sends here only what it does not
        settle) where an alert is active, `quiet_to` is not known, or the
        follower's lag instant is to be taken. Such a fetch lowers its
        follower's lag, moves the HW forward or ends a silence, so it can end
        only the alerts that are not FETCH_STABLE. It can start only its own
        follower's lag, where that follower had none (it had never caught
        up, or it was at the LEO and truncated below it): started at once,
        or its instant goes to `due`. A fetch that brings to the LEO the
        follower whose lag crossing `due` is (`due_lag`) makes `due` stale:
        the scan then finds the next instant now, where the partition would
        otherwise be woken at the stale one to find nothing (a scan at any
        event decides the same)."""
        f = model.followers.get(replica)
        t = lag_crossing(f, model.leader_leo, P.lag_limit_ms) if P.lagging and f else None
        if t is not None:
            if t > ts:
                if w.due is None or t < w.due:
                    set_due(w, t, replica, P)
            elif replica in model.isr and ("FollowerLagging", replica) not in w.alerts:
                return False
        elif w.due_lag == replica:
            # `due` was this follower's crossing, gone now: with no alert
            # active, the next instant is found without a scan (nothing
            # holds: every instant is at or after `due`, and `due` > ts).
            if w.alerts or self.exhaustive or (w.due is not None and w.due <= ts):
                return False
            return self._none_due_yet(w, model, ts, P)
        if not w.alerts:
            due = w.due  # due_by's common case, inline
        elif not self._fetch_keeps_alerts(w, model, replica, ts, P):
            return False
        else:
            due = self.due_by(w, ts)
        return due is None or due > ts

    @staticmethod
    def _fetch_keeps_alerts(w: Watch, model: PartitionView, replica: int, T: int,
                            P: RuleParams) -> bool:
        """Whether every active alert still holds after a fetch of `replica`:
        those a fetch cannot end, and FollowerLagging of another follower (a
        fetch only lowers its own follower's lag) or of this one if it still
        lags."""
        for name, r in w.alerts:
            if name in FETCH_STABLE:
                continue
            if name == "FollowerLagging" and (
                    r != replica or still_lagging(model, r, T, P)):
                continue
            return False
        return True

    def _quiet_append(self, w: Watch, model: PartitionView, ts: int) -> bool:
        """Whether no condition changes at an append (a new leader LEO, no ISR
        change), so the scan is skipped. It can end only the alerts that are
        not APPEND_STABLE and the FollowerLagging of a follower ahead of the
        leader that the LEO reached (as after a leader change), and start only
        FollowerLagging, of a follower that was at the old LEO and last caught
        up long ago. It can bring forward the instants where a lag or a
        stalled HW crosses its threshold: `due` takes them. (An earlier
        instant left in `due`, that this event put off, costs a scan there
        that finds nothing.)"""
        alerts = w.alerts  # (none: _quiet_append_alone)
        if not all(name in APPEND_STABLE for name, _r in alerts):
            return False
        now_due = self.due_by(w, ts)
        if now_due is not None and now_due <= ts:
            return False
        due = w.due
        params = self._params.get(w.topic) or self.params(w.topic)
        if params.lagging:
            lagging, t, _of = lag_crossings(model, ts, params)
            for r, _numbers in lagging:
                if ("FollowerLagging", r) not in alerts:
                    return False
            if len(lagging) < len(alerts):  # one may have ended: a follower the LEO reached
                still = {r for r, _numbers in lagging}
                if any(name == "FollowerLagging" and r not in still for name, r in alerts):
                    return False
            if t is not None and (due is None or t < due):
                due = t
        return self._append_settles(w, model, ts, params, due)

    def _quiet_append_alone(self, w: Watch, model: PartitionView, ts: int) -> bool:
        """The event noted (_note_event), and whether no condition changes at
        an append where no alert is active (most appends): _quiet_append
        without alerts, in one body with the note and the settling
        (_append_settles) as most appends take them (issue 23, branch
        `alertlead`: the five calls were most of an append's cost). `due`
        is no later than every lag crossing of an ISR follower that was
        behind the old LEO (the scan that last set it saw each one, and
        since then every fetch noted its own follower's, and every append
        those of the followers it left behind, as here), and an append does
        not move a follower's lastCaughtUpTime: so only the followers that
        were at the old LEO can bring `due` forward or start a lag now. An
        old LEO not known (-1: after a restore or an ignored event) is
        scanned."""
        # _note_event, inline: the append's time, the HW's stretch (an append
        # to a caught-up partition starts one: stall.note's case of the LEO
        # going past the HW, inline), the new LEO
        if ts > w.last_event_ts:
            w.last_event_ts = ts
        hw, stall, leader_leo = model.hw, w.stall, model.leader_leo
        behind = leader_leo > hw
        if hw != stall.hw or behind != stall.behind:
            if hw != stall.hw or behind:
                stall.since = ts
            stall.hw, stall.behind = hw, behind
        old_leo = w.leader_leo
        w.leader_leo, w.replica_count = leader_leo, len(model.replicas)
        due = w.due
        if old_leo < 0 or (due is not None and due <= ts):
            return False
        params = self._params.get(w.topic) or self.params(w.topic)
        if params.lagging and old_leo != leader_leo:
            followers, limit = model.followers, params.lag_limit_ms
            for r in model.isr:
                f = followers.get(r)
                if f is None or f.leo != old_leo:
                    continue  # the leader, or its instant is in `due` already
                # lag_crossing(f, leader_leo, limit), inline (f was at the old
                # LEO, so it is not at the new one)
                caught_up = f.last_caught_up_ts
                if caught_up > 0:
                    t = caught_up + limit + 1
                    if t <= ts:
                        return False
                    if due is None or t < due:
                        due = t
        # _append_settles, inline
        if params.stalled and behind and model.leader >= 0:
            t = stall.since + params.stall_ms + 1  # stall_crossing, inline
            if t <= ts:
                return False
            if due is None or t < due:
                due = t
        if due != w.due:
            set_due(w, due, -1, params)  # (as _append_settles: not one follower's lag)
        w.t = ts
        return True

    def _append_settles(self, w: Watch, model: PartitionView, ts: int, params: RuleParams,
                        due: Optional[int]) -> bool:
        """Both quiet appends' last step: whether the stalled HW has not
        crossed its limit (a stall that a fetch began, raising the LEO, may
        be over it), and `due` brought forward to the lags' instant `due`
        or the stall's."""
        if params.stalled and model.leader >= 0 and model.leader_leo > model.hw:
            t = w.stall.since + params.stall_ms + 1  # stall_crossing, inline
            if t <= ts:
                return False
            if due is None or t < due:
                due = t
        if due != w.due:
            # Brought forward: not known to be one follower's lag (a busy
            # partition's followers reach each new LEO soon, and a scan at
            # each of those fetches would cost more than the stale instant).
            set_due(w, due, -1, params)
        w.t = ts
        return True

    def advance(self, w: Watch, view: PartitionView, until: int, inclusive: bool,
                out: list) -> None:
        """Step through every instant before `until` (or at it) where something is due."""
        while True:
            due = self.due_by(w, until)
            if due is None or due > until or (due == until and not inclusive):
                return
            if not w.alerts and self.put_off(w, view, due):
                continue
            self._step(w, view, due, out)

    def put_off(self, w: Watch, view: PartitionView, due: int) -> bool:
        """Whether `due`, with no alert active, was stale (an instant put off
        since: a follower caught up, the HW moved, an event ended a silence),
        and is now the true one, found without a scan: with no alert active
        nothing holds, nothing but next_instant's instants can start a
        condition without input, and `due` is no later than any of them."""
        if self.exhaustive:
            return False
        P = self._params.get(w.topic) or self.params(w.topic)
        return _due_after(w, view, due, P)

    # ------------------------------------------------------------ lifecycle
    def due_by(self, w: Watch, until: int) -> Optional[int]:
        """The next instant where something is due if it is `until` or
        earlier; else None or some instant after `until`. Most watches have
        no alert, and most alerts' `for` and repeat instants lie far ahead."""
        if not w.alerts or w.alerts_due_floor > until:
            return w.due
        return self._next_due(w)

    def _next_due(self, w: Watch) -> Optional[int]:
        due = w.due
        if w.alerts:
            for_ms, repeat = self.params(w.topic).for_ms, self.cfg.repeat_interval_ms
            for (name, _r), (since, fired, sent) in w.alerts.items():
                if fired >= 0 and w.last_event_ts <= sent:
                    continue  # silent since the last send: repeats wait for an event
                t = since + for_ms[name] if fired < 0 else sent + repeat
                if t > w.t and (due is None or t < due):
                    due = t
        return due

    def _step(self, w: Watch, view: PartitionView, T: int, out: list) -> None:
        """The conditions at T, and what they move in the alerts' lifecycle.
        One instant, one outcome (docs/alerts.md): what an alert does at T
        is held (`_hold`) and sent when the instant is over (`close`), as
        its state at the end of T against its state at the start."""
        if w.held is not None and T > w.open_t:
            self.close(w, out)
        P = self._params.get(w.topic) or self.params(w.topic)  # params() once per topic
        if w.flaps.times:  # (most watches have seen no ISR change)
            w.flaps.prune(T, P.flap_window_ms)
        holding, due, due_lag = scan(w, view, T, P)
        repeat = self.cfg.repeat_interval_ms
        alerts = w.alerts
        if holding and alerts is EMPTY:
            alerts = w.alerts = {}  # the watch's own (watch.py, EMPTY)
        for key, numbers in holding.items():
            state = alerts.get(key)
            if state is None:
                h = None if w.held is None else w.held.get(key)
                if h is not None and h[1] is not None:
                    # It stopped holding earlier in this instant: it goes on
                    # as it was (pending since, or firing since, and sent).
                    state, h[1] = h[1], None
                    alerts[key] = state
                else:
                    state = alerts[key] = [T, -1, -1]
            since, fired, sent = state
            if fired < 0:
                if T >= since + P.for_ms[key[0]]:
                    h = self._hold(w, key, state, T)
                    state[1] = state[2] = T
                    h[3] = describe(key[0], numbers, P)
            elif T >= sent + repeat and w.last_event_ts > sent:
                h = self._hold(w, key, state, T)
                state[2] = T
                h[3] = describe(key[0], numbers, P)
        if len(alerts) > len(holding):
            for key in [k for k in alerts if k not in holding]:
                state = alerts.pop(key)
                h = self._hold(w, key, state, T)
                h[1], h[2] = state, T  # parked
            if not alerts:
                w.alerts = EMPTY
        if w.alerts:  # the earliest `for` or repeat instant, before _next_due's filters
            w.alerts_due_floor = min(since + P.for_ms[name] if fired < 0 else sent + repeat
                                     for (name, _r), (since, fired, sent) in w.alerts.items())
        w.t = T
        set_due(w, due, due_lag, P)
        if self.exhaustive:  # forget what lets the next event or instant skip its scan
            w.leader_leo = w.alerts_due_floor = w.wake = w.quiet_to = -1

    def _hold(self, w: Watch, key: tuple[str, int], state: list, T: int) -> list:
        """Where an alert moves at T (fires, is re-sent, stops holding): its
        entry in the open instant's `held`, made with a copy of its state at
        the start of the instant on its first move in it."""
        held = w.held
        if held is None:
            held = w.held = {}
            w.open_t = T
            self.open[w] = w
        h = held.get(key)
        if h is None:
            h = held[key] = [state[:], None, -1, None]
        return h

    def close(self, w: Watch, out: list) -> None:
        """The end of the instant `w.open_t`: each alert that moved in it
        sends what its state at the end is against its state at the start
        (docs/alerts.md, "One instant, one outcome"): firing at the end, not
        at the start: `firing`; firing at both, re-sent in the instant: the
        repeat; firing at the start, not at the end: `resolved`; anything
        else (firing at both ends, or at neither): nothing."""
        held, w.held, w.open_t = w.held, None, -1
        self.open.pop(w, None)
        P = self._params.get(w.topic) or self.params(w.topic)
        # (held: not None, as close is called only for a watch with an open instant)
        for key, (before, parked, stopped, description) in held.items():  # type: ignore[union-attr]
            was_firing = before[1] >= 0
            if parked is not None:
                if was_firing:
                    out.append(self._record(w, key, P, "resolved", parked[1], stopped,
                                            "the condition no longer holds"))
                continue
            _since, fired, sent = w.alerts[key]
            if fired < 0:
                continue
            if not was_firing:
                out.append(self._record(w, key, P, "firing", fired, fired, description))
            elif sent != before[2]:
                out.append(self._record(w, key, P, "firing", fired, sent, description))

    def _record(self, w: Watch, key: tuple[str, int], P: RuleParams,
                status: Literal["firing", "resolved"],
                started: int, T: int, description: str) -> Alert:
        name, replica = key
        labels = {"alertname": name, "severity": P.severity[name], "cluster": w.cluster,
                  "topic": w.topic, "partition": str(w.partition), "policy": w.policy}
        if replica != PARTITION:
            labels["replica"] = str(replica)
        fp = fingerprint(labels)
        return Alert(
            id=f"{fp}/{started}/{status}/{T}", ts=T, labels=labels,
            annotations={"summary": f"{RULES[name].summary}: {w.topic}-{w.partition}",
                         "description": description},
            status=status, startsAt=iso(started),
            endsAt=iso(T) if status == "resolved" else None, fingerprint=fp)
