"""The four ISR rule sets (docs/rules.md, "Policies") as small named predicates.

Each predicate reads one follower snapshot; none mutates anything. Where
Kafka's name differs from ours it is given in the docstring.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from isr.model.follower import Follower

from isr.contract.policies import KAFKA, KIP16, KIP501, LEGACY, MODERN, POLICIES


@dataclass(frozen=True, slots=True)
class Rules:
    """The numbers and switches one policy runs with."""

    policy: str
    replica_lag_time_max_ms: int
    interval_ms: int
    replica_lag_max_messages: int
    # kafka and kip501 share everything KAFKA-4485 .. KIP-903 added: eligibility,
    # caught-up non-ISR HW holders, the strict min-ISR HW freeze and controller
    # removal of fenced brokers.
    modern: bool

    @classmethod
    def for_policy(
        cls,
        policy: str,
        replica_lag_time_max_ms: int = 30000,
        isr_expiration_interval_ms: Optional[int] = None,
        replica_lag_max_messages: int = 4000,
    ) -> "Rules":
        modern = policy in MODERN
        if policy not in POLICIES:
            raise ValueError(f"unknown policy {policy!r}")
        # KAFKA-4485 halved the isr-expiration period; before it ran every `lag`.
        default_interval = replica_lag_time_max_ms // 2 if modern else replica_lag_time_max_ms
        return cls(
            policy=policy,
            replica_lag_time_max_ms=replica_lag_time_max_ms,
            interval_ms=max(1, isr_expiration_interval_ms or default_interval),
            replica_lag_max_messages=replica_lag_max_messages,
            modern=modern,
        )


def ceil_to(t: int, interval: int) -> int:
    """The first multiple of `interval` at or after `t` (check instants)."""
    return -(-t // interval) * interval


def caught_up_ts_after_fetch(
    rules: Rules, f: Follower, fetch_offset: int, fetch_leader_leo: int, fetch_ts: int, ts: int
) -> int:
    """lastCaughtUpTimeMs after a fetch, compared with the *old* snapshot.

    kafka: Kafka's `updateFetchStateOrThrow` two-branch rule (KAFKA-4485).
    kip501: either branch credits the completion time `ts` instead.
    kip16: the arrival time, only when the fetch reached the leader LEO.
    legacy: not used (0.8 judged on the last fetch time), kept unchanged.
    """
    old = f.last_caught_up_ts
    policy = rules.policy
    if policy == KAFKA:
        if fetch_offset >= fetch_leader_leo:
            return fetch_ts if fetch_ts > old else old
        if fetch_offset >= f.last_fetch_leader_leo:
            return f.last_fetch_ts if f.last_fetch_ts > old else old
        return old
    if policy == KIP501:
        if fetch_offset >= fetch_leader_leo or fetch_offset >= f.last_fetch_leader_leo:
            return ts if ts > old else old
        return old
    if policy == KIP16:
        return fetch_ts if fetch_offset >= fetch_leader_leo else old
    return old


def has_pending_caught_up_read(f: Follower) -> bool:
    """KIP-501: an unserved fetch from at least the previous fetch's leader LEO."""
    return f.pending_offset >= 0 and f.pending_offset >= f.last_fetch_leader_leo


def out_of_sync_from(rules: Rules, f: Follower, leader_leo: int) -> Optional[int]:
    """The first instant from which this follower is out of sync if nothing
    else happens, or None if it stays in sync. `is_out_of_sync` is
    `T >= out_of_sync_from(...)`; the scheduler uses the same number to jump
    straight to the next check that can shrink."""
    lag = rules.replica_lag_time_max_ms
    policy = rules.policy
    if policy == KAFKA or policy == KIP501:
        # Kafka's isCaughtUp: LEO equality, else lag <= maxLag (KAFKA-7152).
        if f.leo == leader_leo:
            return None
        if policy == KIP501 and has_pending_caught_up_read(f):
            return None
        return f.last_caught_up_ts + lag + 1
    if policy == KIP16:
        return f.last_caught_up_ts + lag + 1
    # legacy (0.8): slow by messages right away, else stuck by time.
    if f.leo >= 0 and leader_leo - f.leo > rules.replica_lag_max_messages:
        return 0
    return f.last_fetch_ts + lag + 1


def is_out_of_sync(rules: Rules, f: Follower, leader_leo: int, now: int) -> bool:
    since = out_of_sync_from(rules, f, leader_leo)
    return since is not None and now >= since


def is_caught_up(rules: Rules, f: Follower, leader_leo: int, now: int) -> bool:
    """Kafka's `ReplicaState.isCaughtUp`: holds the HW back even outside the ISR."""
    return f.leo == leader_leo or now - f.last_caught_up_ts <= rules.replica_lag_time_max_ms


def at_leader_leo(f: Follower, leader_leo: int) -> bool:
    return f.leo == leader_leo and f.leo >= 0


def lag_ms(f: Follower, leader_leo: int, now: int) -> Optional[int]:
    """How far behind in time: 0 at the leader's LEO, else the time since the
    follower was last caught up; None if it never was."""
    if at_leader_leo(f, leader_leo):
        return 0
    if f.last_caught_up_ts <= 0:
        return None
    return max(0, now - f.last_caught_up_ts)


def describe_out_of_sync(rules: Rules, replica: int, f: Follower, leader_leo: int, now: int) -> str:
    """The numbers that made a follower out of sync, for the decision's reason."""
    lag = rules.replica_lag_time_max_ms
    if rules.policy == LEGACY:
        if f.leo >= 0 and leader_leo - f.leo > rules.replica_lag_max_messages:
            return (f"replica {replica}: {leader_leo - f.leo} messages behind > "
                    f"{rules.replica_lag_max_messages} (leo {f.leo}, leader_leo {leader_leo})")
        return (f"replica {replica}: no fetch for {now - f.last_fetch_ts} ms > {lag} ms")
    text = (f"replica {replica}: lag {now - f.last_caught_up_ts} ms > {lag} ms"
            if f.last_caught_up_ts > 0 else  # Kafka's lastCaughtUpTimeMs 0: not a time
            f"replica {replica}: never caught up in this leader epoch")
    if rules.policy != KIP16:
        text += f"; leo {f.leo} != leader_leo {leader_leo}"
    return text
