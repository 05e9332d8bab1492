"""The alert rules' conditions (contract/catalog.py), as one pure scan of a partition.

`scan(watch, view, T, params)` returns which conditions hold at event time T
(with the numbers for their descriptions, formatted only when an alert is
sent), the earliest later instant at which one could start or stop
holding with no new input (a lag crossing its threshold, a silence getting
long enough), so the evaluator can stop exactly there, and the follower
whose lag crossing that instant is (or -1). It runs for most
events, so it is written as one pass over plain attributes. Nothing here
reads a clock.
"""

from __future__ import annotations

from typing import Optional

from isr.contract.catalog import RULES
from isr.alerts.watch import NEVER, PartitionView, Watch
from isr.model.follower import Follower
from isr.model.health import isr_health
from isr.model.rules import at_leader_leo, lag_ms

PARTITION = -1  # the replica part of a partition-level alert's key


class RuleParams:
    """The rules as configured for one topic, flattened for the scan."""

    def __init__(self, cfg, topic: str, lag_max_ms: int) -> None:
        rules = {name: cfg.rule(name, topic) for name in RULES}
        self.enabled = {n for n, r in rules.items() if r.enabled}
        self.severity = {n: r.severity for n, r in rules.items()}
        self.for_ms = {n: r.for_ms for n, r in rules.items()}
        on = self.enabled.__contains__
        self.min_isr_rules = on("UnderMinIsr"), on("AtMinIsr"), on("LeaderOnlyIsr")
        self.under_replicated = on("UnderReplicated")
        self.flapping = on("IsrFlapping")
        self.flap_changes = rules["IsrFlapping"].changes
        self.flap_window_ms = rules["IsrFlapping"].window_ms
        self.lagging = on("FollowerLagging")
        self.warn_ratio = rules["FollowerLagging"].warn_ratio
        self.lag_limit_ms = int(self.warn_ratio * lag_max_ms)
        self.lag_max_ms = lag_max_ms
        self.stalled = on("HighWatermarkStalled")
        self.stall_ms = rules["HighWatermarkStalled"].stall_ms
        self.slow = on("SlowLeaderFetch")
        self.slow_ms = rules["SlowLeaderFetch"].follower_fetch_process_time_max_ms
        self.divergence = on("IsrDivergence")
        self.silent = on("PartitionSilent")
        self.silent_ms = rules["PartitionSilent"].silent_ms


def scan(w: Watch, v: PartitionView, T: int, P: RuleParams
         ) -> tuple[dict[tuple[str, int], tuple], Optional[int], int]:
    """({(alertname, replica or PARTITION): numbers}, next instant > T to look
    again, the follower whose lag crosses its limit then or -1)."""
    out = isr_conditions(v, P)
    due = None
    lag_due, lag_of = None, -1
    isr, leader = v.isr, v.leader
    if P.flapping and w.flaps.times:
        recent, leaves = w.flaps.count(T, P.flap_window_ms)
        if leaves is not None:
            due = leaves  # a change leaves the window then
        if recent >= P.flap_changes:
            out[("IsrFlapping", PARTITION)] = (recent, P.flap_window_ms, P.flap_changes)
    leader_leo = v.leader_leo
    if P.lagging:
        lagging, t, lag_of = lag_crossings(v, T, P)
        for r, numbers in lagging:
            out[("FollowerLagging", r)] = numbers
        if t is not None and (due is None or t < due):
            due = lag_due = t
    if P.stalled:
        t = stall_crossing(w, v, P)
        if t is not None:
            if t <= T:
                out[("HighWatermarkStalled", PARTITION)] = (v.hw, T - w.stall.since, leader_leo)
            elif due is None or t < due:
                due = t
    if P.slow and (w.unserved or w.served_ms):
        limit = P.slow_ms
        slow = [(r, ms, "served in") for r, ms in w.served_ms.items() if ms > limit]
        for r, ts in w.unserved.items():
            if T - ts > limit:
                slow.append((r, T - ts, "waiting"))
            elif due is None or ts + limit + 1 < due:
                due = ts + limit + 1
        if slow:
            out[("SlowLeaderFetch", PARTITION)] = (leader, limit, sorted(slow))
    if P.divergence and w.reported is not None and sorted(w.reported) != sorted(isr):
        out[("IsrDivergence", PARTITION)] = (w.reported, isr)
    if P.silent and w.last_event_ts >= 0:
        if T - w.last_event_ts > P.silent_ms:
            out[("PartitionSilent", PARTITION)] = (T - w.last_event_ts, P.silent_ms)
        else:
            t = w.last_event_ts + P.silent_ms + 1
            if due is None or t < due:
                due = t
    return out, due, (lag_of if lag_due is not None and due == lag_due else -1)


def isr_conditions(v: PartitionView, P: RuleParams) -> dict[tuple[str, int], tuple]:
    """The conditions on the ISR's size that hold (scan's first part: they
    depend on nothing but the ISR, the leader, the replicas and the min ISR)."""
    out: dict[tuple[str, int], tuple] = {}
    isr, leader = v.isr, v.leader
    n_rep, min_isr = len(v.replicas), v.min_isr
    under, at, alone = P.min_isr_rules
    is_under, is_at, is_alone, is_urp = isr_health(isr, leader, n_rep, min_isr)
    if under and is_under:
        out[("UnderMinIsr", PARTITION)] = (isr, min_isr)
    if at and is_at and min_isr < n_rep:
        out[("AtMinIsr", PARTITION)] = (isr, min_isr, n_rep)
    if alone and is_alone:
        out[("LeaderOnlyIsr", PARTITION)] = (leader, v.replicas)
    if P.under_replicated and is_urp:
        out[("UnderReplicated", PARTITION)] = (isr, v.replicas)
    return out


def next_instant(w: Watch, v: PartitionView, P: RuleParams) -> Optional[tuple[Optional[int], int]]:
    """scan's (next instant, its follower or -1) without a scan, for a watch
    where no condition holds (no alert active, and only events that changed
    none since the last scan): then nothing can change before the first
    instant a time-driven condition starts, which is the first of the ISR
    followers' lag crossings, the stalled HW's and the silence's (the same
    instants, in the same order of ties, as scan's). None where the watch
    keeps more than these (recent ISR changes, a slow or unserved fetch):
    only a scan tells those."""
    if (P.flapping and w.flaps.times) or (P.slow and (w.unserved or w.served_ms)):
        return None
    due, of = None, -1
    if P.lagging:  # at T = -1 every crossing (a catch-up ts + limit + 1 > 0) is still ahead
        _, due, of = lag_crossings(v, -1, P)
    if P.stalled:
        t = stall_crossing(w, v, P)
        if t is not None and (due is None or t < due):
            due, of = t, -1
    if P.silent and w.last_event_ts >= 0:
        t = w.last_event_ts + P.silent_ms + 1
        if due is None or t < due:
            due, of = t, -1
    return due, of


def lag_crossings(v: PartitionView, T: int, P: RuleParams
                  ) -> tuple[list[tuple[int, tuple]], Optional[int], int]:
    """FollowerLagging over the ISR at T: ([(follower, numbers)] of those
    lagging, the next instant after T where another one's lag crosses the
    limit or None, and that follower or -1)."""
    lagging: list[tuple[int, tuple]] = []
    due, due_of = None, -1
    limit, followers, leader_leo = P.lag_limit_ms, v.followers, v.leader_leo
    for r in v.isr:
        f = followers.get(r)
        if f is None:
            continue  # the leader itself
        # lag_crossing(f, leader_leo, limit), inline (this loop runs for
        # every instant looked for: a call per follower was most of it)
        caught_up = f.last_caught_up_ts
        if caught_up <= 0 or (f.leo == leader_leo and leader_leo >= 0):
            continue
        t = caught_up + limit + 1
        if t <= T:
            lagging.append((r, (r, lag_ms(f, leader_leo, T), limit, f.leo, leader_leo)))
        elif due is None or t < due:
            due, due_of = t, r
    return lagging, due, due_of


def lag_crossing(f: Follower, leader_leo: int, limit: int) -> Optional[int]:
    """The first instant a follower's lag (lag_ms) exceeds `limit`; None if it
    has none to grow: never caught up, or at the leader's LEO."""
    caught_up = f.last_caught_up_ts
    if caught_up <= 0 or at_leader_leo(f, leader_leo):
        return None
    return caught_up + limit + 1


def lag_floor(due: Optional[int], P: RuleParams) -> int:
    """The lastCaughtUpTime from which a follower's lag_crossing, if it has
    one, is no earlier than `due` (lag_crossing's formula turned around), so
    a follower caught up then need not be asked (Watch.lag_floor)."""
    if not P.lagging:
        return -NEVER  # no lag instant is ever taken
    if due is None:
        return NEVER
    return due - P.lag_limit_ms - 1


def stall_crossing(w: Watch, v: PartitionView, P: RuleParams) -> Optional[int]:
    """The first instant HighWatermarkStalled holds (the HW has stood still
    for more than `stall_ms`), or None while the HW is not behind the LEO."""
    if v.leader < 0 or v.leader_leo <= v.hw:
        return None
    return w.stall.since + P.stall_ms + 1


def still_lagging(v: PartitionView, replica: int, T: int, P: RuleParams) -> bool:
    """Whether FollowerLagging, holding for an ISR member, still holds at T
    (the scan's lag test for one follower)."""
    f = v.followers.get(replica)
    lag = None if f is None else lag_ms(f, v.leader_leo, T)
    return lag is not None and lag > P.lag_limit_ms


def describe(name: str, numbers: tuple, P: RuleParams) -> str:
    """The numbers of a holding condition as one sentence for the alert."""
    return RULES[name].describe(numbers, P)
