"""The leader's own stall (docs/rules.md, "A leader that was itself stopped").

Kafka runs a leader's ISR check on a fixed-rate scheduler
(`scheduler.schedule("isr-expiration", ..., replicaLagTimeMaxMs / 2)` in
ReplicaManager.startup, `ScheduledThreadPoolExecutor.scheduleAtFixedRate` in
KafkaScheduler, every version since 0.8). When the whole broker process was
stopped (SIGSTOP, a long GC pause, a frozen VM), the runs it missed are
overdue when it runs again: the first one runs at once, with `now` = the
resume time, while its followers' state is still what it was before the stall
(their fetches parked in purgatory were read, and their state updated, before
it; a parked fetch completing from purgatory does not update it:
`updateFetchState = !readFromPurgatory`). So the leader shrinks every follower
whose last catch-up is now more than replica.lag.time.max.ms old.

The monitor sees the stall as a gap in the leader's own activity (its
fetch and append events, from its request log) longer than
replica.lag.time.max.ms: a live leader answers a live follower's fetch within
replica.fetch.wait.max.ms, which Kafka requires to be at most
replica.lag.time.max.ms (KafkaConfig). A leader whose followers all stopped
(and nothing was produced) is silent too, so the gap alone is not enough:

- before the gap, an ISR follower was fetching from it (its last fetch is
  within the bound of the gap's start): the leader had live followers;
- after the gap (its end R is the leader's first event again), a follower's
  fetch comes no later than the first check instant after R: its followers
  run, so the silence was the leader's. The overdue check then runs at that
  fetch's ts, before the fetch is applied (and after the leader's appends
  since R: the produce requests queued during the stall, which its handlers
  appended when it resumed). Without such a fetch in time the suspicion is
  dropped and the regular checks decide, as for any silent leader.

No leader activity seen at all: no evidence, no stall.
"""

from __future__ import annotations

from isr.model.follower import Follower
from isr.model.rules import Rules, ceil_to

# The events that show the leader's process running: its request log's reads.
LEADER_ACTIVITY = frozenset({"fetch", "fetch_start", "append"})
# The events that show its followers running (and confirm a stall).
FOLLOWER_FETCHES = frozenset({"fetch", "fetch_start"})


def stall_bound_ms(rules: Rules) -> int:
    """A gap in the leader's activity longer than this can be a stall.
    (Inline in PartitionModel._note_activity and apply_times_fetch.)"""
    return rules.replica_lag_time_max_ms


def suspects_stall(rules: Rules, last_active_ts: int, ts: int,
                   isr_followers: list[Follower]) -> bool:
    """Is the leader's activity at `ts` its first after a stall, as far as
    the partition's events before it tell?"""
    bound = stall_bound_ms(rules)
    if last_active_ts < 0 or ts - last_active_ts <= bound:
        return False
    return any(f.last_fetch_ts >= last_active_ts - bound for f in isr_followers)


def confirm_by(rules: Rules, resume_ts: int) -> int:
    """The last instant a follower's fetch confirms a stall that ended at
    resume_ts: the first check instant after it (a fetch at a check instant
    comes before that check)."""
    return ceil_to(resume_ts + 1, rules.interval_ms)
