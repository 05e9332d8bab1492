"""The ten conditions of alerts.md, as one pure scan of a partition.

`scan(watch, view, T, params)` returns which conditions hold at event time T
(with the numbers for their descriptions, formatted only when an alert is
sent) and the earliest later instant at which one could start or stop
holding with no new input (a lag crossing its threshold, a silence getting
long enough), so the evaluator can stop exactly there. It runs for most
events, so it is written as one pass over plain attributes. Nothing here
reads a clock.
"""

from __future__ import annotations

from typing import Optional

from isr.alerts.watch import PartitionView, Watch
from isr.config import RULE_DEFAULTS, AlertSettings

PARTITION = -1  # the replica part of a partition-level alert's key


class RuleParams:
    """The rules as configured for one topic, flattened for the scan."""

    def __init__(self, cfg: AlertSettings, topic: str, lag_max_ms: int) -> None:
        rules = {name: cfg.rule(name, topic) for name in RULE_DEFAULTS}
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
         ) -> tuple[dict[tuple[str, int], tuple], Optional[int]]:
    """({(alertname, replica or PARTITION): numbers}, next instant > T to look again)."""
    out: dict[tuple[str, int], tuple] = {}
    due = None
    isr, leader = v.isr, v.leader
    n_isr, n_rep, min_isr = len(isr), len(v.replicas), v.min_isr
    under, at, alone = P.min_isr_rules
    if under and n_isr < min_isr:
        out[("UnderMinIsr", PARTITION)] = (isr, min_isr)
    if at and n_isr == min_isr < n_rep:
        out[("AtMinIsr", PARTITION)] = (isr, min_isr, n_rep)
    if alone and n_rep > 1 and n_isr == 1 and isr[0] == leader:
        out[("LeaderOnlyIsr", PARTITION)] = (leader, v.replicas)
    if P.under_replicated and n_isr < n_rep:
        out[("UnderReplicated", PARTITION)] = (isr, v.replicas)
    if P.flapping and w.changes:
        window = P.flap_window_ms
        recent = 0
        for t in w.changes:
            if T - window < t <= T:
                recent += 1
            if t + window > T and (due is None or t + window < due):
                due = t + window  # the change leaves the window then
        if recent >= P.flap_changes:
            out[("IsrFlapping", PARTITION)] = (recent, window, P.flap_changes)
    leader_leo = v.leader_leo
    if P.lagging:
        limit, followers = P.lag_limit_ms, v.followers
        for r in isr:
            f = followers.get(r)
            if f is None or (f.leo == leader_leo and f.leo >= 0) or f.last_caught_up_ts <= 0:
                continue
            lag = T - f.last_caught_up_ts
            if lag > limit:
                out[("FollowerLagging", r)] = (r, lag, limit, f.leo, leader_leo)
            else:
                t = f.last_caught_up_ts + limit + 1
                if due is None or t < due:
                    due = t
    if P.stalled and leader >= 0 and leader_leo > v.hw:
        if T - w.hw_since > P.stall_ms:
            out[("HighWatermarkStalled", PARTITION)] = (v.hw, T - w.hw_since, leader_leo)
        else:
            t = w.hw_since + P.stall_ms + 1
            if due is None or t < due:
                due = t
    if P.slow and (w.pending or w.served_ms):
        limit = P.slow_ms
        slow = [(r, ms, "served in") for r, ms in w.served_ms.items() if ms > limit]
        for r, ts in w.pending.items():
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
    return out, due


def describe(name: str, n: tuple, P: RuleParams) -> str:
    """The numbers of a holding condition as one sentence for the alert."""
    if name == "UnderMinIsr":
        return (f"ISR {n[0]} has {len(n[0])} member(s), below min.insync.replicas {n[1]}: "
                f"acks=all produces fail")
    if name == "AtMinIsr":
        return (f"ISR {n[0]} is at min.insync.replicas {n[1]} of {n[2]} replicas: one more "
                f"failure stops acks=all writes")
    if name == "LeaderOnlyIsr":
        return f"only the leader {n[0]} is in the ISR of replicas {n[1]}"
    if name == "UnderReplicated":
        return f"replicas {[r for r in n[1] if r not in n[0]]} are not in the ISR {n[0]}"
    if name == "IsrFlapping":
        return f"{n[0]} ISR changes in the last {n[1]} ms (threshold {n[2]})"
    if name == "FollowerLagging":
        return (f"ISR follower {n[0]} lags {n[1]} ms (> {n[2]} ms = {P.warn_ratio} x "
                f"{P.lag_max_ms}); leo {n[3]}, leader_leo {n[4]}")
    if name == "HighWatermarkStalled":
        return f"hw {n[0]} has not moved for {n[1]} ms while leader_leo is {n[2]}"
    if name == "SlowLeaderFetch":
        return (f"leader {n[0]} is slow to serve fetches (> {n[1]} ms): "
                + ", ".join(f"{r} {what} {ms} ms" for r, ms, what in n[2]))
    if name == "IsrDivergence":
        return f"the cluster reports ISR {n[0]}, the computed ISR is {n[1]}"
    if name == "PartitionSilent":
        return f"no event for {n[0]} ms (> {n[1]} ms)"
    raise KeyError(name)
