"""The ten conditions of alerts.md, as pure functions of one partition.

`conditions(watch, view, T)` says which conditions hold at event time T, with
the numbers for the alert's description; `next_change(watch, view, T)` says
the earliest later instant at which one could start or stop holding with no
new input (a lag crossing its threshold, a silence getting long enough), so
the evaluator can stop exactly there. Nothing here reads a clock.
"""

from __future__ import annotations

from typing import Optional

from isr.alerts.watch import PartitionView, Watch
from isr.config import AlertRule
from isr.model.rules import lag_ms

Rules = dict[str, AlertRule]  # alertname -> the rule as configured for this topic

PARTITION = -1  # the replica part of a partition-level alert's key


def conditions(w: Watch, v: PartitionView, T: int, rules: Rules, lag_max_ms: int
               ) -> dict[tuple[str, int], str]:
    """{(alertname, replica or PARTITION): description} of what holds at T."""
    out: dict[tuple[str, int], str] = {}
    isr, replicas, n_isr, n_rep, min_isr = v.isr, v.replicas, len(v.isr), len(v.replicas), v.min_isr
    if rules["UnderMinIsr"].enabled and n_isr < min_isr:
        out[("UnderMinIsr", PARTITION)] = (
            f"ISR {isr} has {n_isr} member(s), below min.insync.replicas {min_isr}: "
            f"acks=all produces fail")
    if rules["AtMinIsr"].enabled and n_isr == min_isr < n_rep:
        out[("AtMinIsr", PARTITION)] = (
            f"ISR {isr} is at min.insync.replicas {min_isr} of {n_rep} replicas: "
            f"one more failure stops acks=all writes")
    if rules["LeaderOnlyIsr"].enabled and n_rep > 1 and isr == [v.leader]:
        out[("LeaderOnlyIsr", PARTITION)] = (
            f"only the leader {v.leader} is in the ISR of replicas {replicas}")
    if rules["UnderReplicated"].enabled and n_isr < n_rep:
        missing = [r for r in replicas if r not in isr]
        out[("UnderReplicated", PARTITION)] = f"replicas {missing} are not in the ISR {isr}"
    if rules["IsrFlapping"].enabled:
        rule = rules["IsrFlapping"]
        recent = [t for t in w.changes if T - rule.window_ms < t <= T]
        if len(recent) >= rule.changes:
            out[("IsrFlapping", PARTITION)] = (
                f"{len(recent)} ISR changes in the last {rule.window_ms} ms "
                f"(threshold {rule.changes})")
    if rules["FollowerLagging"].enabled:
        limit = rules["FollowerLagging"].warn_ratio * lag_max_ms
        for r in isr:
            f = v.followers.get(r)
            if f is None:
                continue
            lag = lag_ms(f, v.leader_leo, T)
            if lag is not None and lag > limit:
                out[("FollowerLagging", r)] = (
                    f"ISR follower {r} lags {lag} ms (> {limit:.0f} ms = "
                    f"{rules['FollowerLagging'].warn_ratio} x {lag_max_ms}); "
                    f"leo {f.leo}, leader_leo {v.leader_leo}")
    if rules["HighWatermarkStalled"].enabled:
        stall = rules["HighWatermarkStalled"].stall_ms
        if v.leader >= 0 and v.leader_leo > v.hw and T - w.hw_since > stall:
            out[("HighWatermarkStalled", PARTITION)] = (
                f"hw {v.hw} has not moved for {T - w.hw_since} ms while leader_leo is "
                f"{v.leader_leo}")
    if rules["SlowLeaderFetch"].enabled:
        limit = rules["SlowLeaderFetch"].follower_fetch_process_time_max_ms
        slow = sorted(f"{r} served in {ms} ms" for r, ms in w.served_ms.items() if ms > limit)
        slow += sorted(f"{r} waiting {T - ts} ms" for r, ts in w.pending.items()
                       if T - ts > limit)
        if slow:
            out[("SlowLeaderFetch", PARTITION)] = (
                f"leader {v.leader} is slow to serve fetches (> {limit} ms): "
                + ", ".join(slow))
    if rules["IsrDivergence"].enabled and w.reported is not None and sorted(w.reported) != sorted(isr):
        out[("IsrDivergence", PARTITION)] = (
            f"the cluster reports ISR {w.reported}, the computed ISR is {isr}")
    if rules["PartitionSilent"].enabled and w.last_event_ts >= 0:
        silent = rules["PartitionSilent"].silent_ms
        if T - w.last_event_ts > silent:
            out[("PartitionSilent", PARTITION)] = (
                f"no event for {T - w.last_event_ts} ms (> {silent} ms)")
    return out


def next_change(w: Watch, v: PartitionView, T: int, rules: Rules, lag_max_ms: int
                ) -> Optional[int]:
    """The first instant > T at which a condition may flip with no new input."""
    times: list[int] = []
    if rules["IsrFlapping"].enabled:
        window = rules["IsrFlapping"].window_ms
        times += [t + window for t in w.changes if t + window > T]  # a change leaves the window
    if rules["FollowerLagging"].enabled:
        limit = int(rules["FollowerLagging"].warn_ratio * lag_max_ms)
        for r in v.isr:
            f = v.followers.get(r)
            if f is not None and f.last_caught_up_ts > 0 and not (
                    f.leo == v.leader_leo and f.leo >= 0):
                times.append(f.last_caught_up_ts + limit + 1)
    if rules["HighWatermarkStalled"].enabled and v.leader_leo > v.hw:
        times.append(w.hw_since + rules["HighWatermarkStalled"].stall_ms + 1)
    if rules["SlowLeaderFetch"].enabled and w.pending:
        limit = rules["SlowLeaderFetch"].follower_fetch_process_time_max_ms
        times += [ts + limit + 1 for ts in w.pending.values()]
    if rules["PartitionSilent"].enabled and w.last_event_ts >= 0:
        times.append(w.last_event_ts + rules["PartitionSilent"].silent_ms + 1)
    later = [t for t in times if t > T]
    return min(later) if later else None
