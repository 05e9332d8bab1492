"""One partition as its leader sees it (docs/rules.md, all rules).

`PartitionModel` is pure: no clock, no I/O, no Spark. Events are applied in
`(ts, arrival)` order; `advance(until)` runs the isr-expiration checks that
fall before `until`. Decisions are appended to the caller's `out` list.

Checks are not simulated tick by tick: between events a follower's state is
frozen, so the first check instant that can shrink is computed directly
(`rules.out_of_sync_from`) and every check before it is a no-op. That is
exact, and it keeps idle partitions free.
"""

from __future__ import annotations

from operator import attrgetter
from sys import intern
from typing import Any, ClassVar, Literal, Optional

from isr.contract.decisions import IsrChange, PartitionState, ReplicaDetail
from isr.model.brokers import Brokers
from isr.model.follower import FOLLOWER_FIELDS, Follower
from isr.model.health import isr_health
from isr.model.rules import (
    KAFKA,
    LEGACY,
    Rules,
    caught_up_ts_after_fetch,
    ceil_to,
    describe_out_of_sync,
    is_caught_up,
    is_out_of_sync,
    lag_ms,
    out_of_sync_from,
)
from isr.model.stall import (FOLLOWER_FETCHES, LEADER_ACTIVITY, confirm_by,
                             suspects_stall)

# Outcomes other than "applied" (None). Ignored events are counted; rejected
# ones go to the dead-letter sink with the message.
STALE_EPOCH = ("ignored", "stale_epoch")
STALE_BROKER_EPOCH = ("ignored", "stale_broker_epoch")
NO_LEADER = ("ignored", "no_leader")


def rejected(message: str) -> tuple[str, str]:
    return ("rejected", message)


STATE_VERSION = 2  # 2: the leader-stall fields (version 1 states read with none pending)

# One list object per distinct replica list or ISR, shared by every model
# that has it (issue 23: ~170 bytes per partition less). Safe because a
# model never changes these lists in place: it replaces them (a leader
# event, an ISR change), and decisions copy them. The one exception is a
# bootstrapped model (before its first leader event), whose lists grow
# with each follower it meets (`_bootstrap_follower`): those are its own.
# Cleared when full, so it stays bounded whatever the cluster's churn (lists
# handed out before stay valid, only no longer shared with later ones).
_SHARED_LISTS: dict[tuple, list[int]] = {}
SHARED_LISTS_MAX = 1 << 16


def shared_list(values) -> list[int]:
    """The shared list equal to `values` (not to be changed in place)."""
    key = tuple(values)
    found = _SHARED_LISTS.get(key)
    if found is None:
        if len(_SHARED_LISTS) >= SHARED_LISTS_MAX:
            _SHARED_LISTS.clear()
        found = _SHARED_LISTS[key] = list(key)
    return found


class PartitionModel:
    __slots__ = (
        "rules", "cluster", "topic", "partition",
        "leader", "leader_epoch", "leader_epoch_start_offset", "hw", "leader_leo",
        "replicas", "isr", "followers",
        "min_isr_default", "min_isr_override", "min_isr", "bootstrap",
        "next_check", "ts", "seq",
        "under_min_since", "under_min_ms",
        "leader_active_ts", "stall_from", "stall_check_at",
        "watch", "sessions",
        "due_at", "due_stamp", "due_dirty", "due_order",
    )

    def __init__(self, rules: Rules, cluster: str, topic: str, partition: int,
                 min_isr_default: int = 1, first_ts: int = 0) -> None:
        self.rules = rules
        # Interned: every partition of a topic (its model under each policy,
        # its engine key, its alert watch, its sessions' cache keys) shares
        # one string of the cluster's and of the topic's name, not a copy of
        # its first event's (~55 bytes each).
        self.cluster = intern(cluster)
        self.topic = intern(topic)
        self.partition = partition
        self.leader = -1  # -1: no leader (not known yet, or fenced)
        self.leader_epoch = -1
        self.leader_epoch_start_offset = 0
        self.hw = 0
        self.leader_leo = 0
        self.replicas: list[int] = []
        self.isr: list[int] = []
        self.followers: dict[int, Follower] = {}
        self.min_isr_default = min_isr_default
        self.min_isr_override = -1  # from a leader event's min_insync_replicas
        self.min_isr = min_isr_default  # effective; derived, kept current by _refresh_min_isr
        self.bootstrap = False
        # The earliest check instant not yet run (a multiple of the interval).
        self.next_check = ceil_to(first_ts, rules.interval_ms)
        self.ts = first_ts
        self.seq = 0  # decisions taken, for deterministic decision ids
        self.under_min_since = -1
        self.under_min_ms = 0
        # The leader's own stall (isr/model/stall.py): its last activity seen
        # (-1: none yet), and a suspected stall awaiting a follower's fetch:
        # its end (-1: none) and its start.
        self.leader_active_ts = -1
        self.stall_from = -1
        self.stall_check_at = -1
        # The alert rules' state of this partition (isr/alerts/watch.py), kept
        # here so their listener finds it without a lookup on every event. The
        # model never reads it and its state (to_list) leaves it out. (Any:
        # the model may not import alerts/; a compiled model checks the type
        # of what is stored, and None's type would refuse a Watch.)
        self.watch: Any = None
        # The fetch sessions caching this partition, by session serial:
        # [replica, position of the first session fetch not applied here]
        # (isr/engine/sessions.py).
        self.sessions: dict[int, list[int]] = {}
        # The engine's deadline index (isr/engine/deadlines.py): the instant
        # this model is indexed at (None: not indexed), its entry's stamp,
        # whether it changed since it was indexed, and its creation order.
        # Bookkeeping, not state: to_list leaves them out.
        self.due_at: Optional[int] = None
        self.due_stamp = 0
        self.due_dirty = False
        self.due_order = -1

    # ------------------------------------------------------------ creation
    @classmethod
    def first_seen(cls, rules: Rules, event, min_isr_default: int) -> "PartitionModel":
        """A partition's model from its first event. Before any `leader` event it
        is bootstrapped from what the event says (docs/rules.md, "Before a leader event")."""
        m = cls(rules, event.cluster, event.topic, event.partition, min_isr_default, event.ts)
        if event.type != "leader":
            m.bootstrap = True
            m.leader = event.leader
            m.leader_epoch = event.leader_epoch
            m.replicas = [event.leader]
            m.isr = [event.leader]
            m._refresh_min_isr()
        return m

    # ------------------------------------------------------------ derived
    @property
    def key(self) -> tuple[str, str, int]:
        return (self.cluster, self.topic, self.partition)

    def _refresh_min_isr(self) -> None:
        """The effective min ISR, Kafka 3.7+: min(min.insync.replicas, replication factor)."""
        configured = self.min_isr_override if self.min_isr_override > 0 else self.min_isr_default
        self.min_isr = min(configured, len(self.replicas)) if self.replicas else configured

    def membership_may_move(self, kind: str) -> bool:
        """Whether a partition event of `kind` the model just took (applied or
        not) can have moved its membership: leader, leader epoch, replicas,
        ISR, min ISR (what a partition_state goes out at once for:
        isr/stream/throttle.py). The one rule of which events can, besides an
        ISR change (the engine reports each: Listener.on_change) and a broker
        event (on_broker): a leader event sets them all; before its first
        one, a bootstrapped model takes every follower a fetch or fetch_start
        meets as assigned and in the ISR (`_bootstrap_follower`). An append,
        an `isr` event, a follower's event after a leader event move none of
        them but through an ISR change."""
        return kind == "leader" or (self.bootstrap and kind in FOLLOWER_FETCHES)

    def is_under_min_isr(self) -> bool:
        return isr_health(self.isr, self.leader, len(self.replicas), self.min_isr)[0]

    # ------------------------------------------------------------ time
    def advance(self, until: int, inclusive: bool, brokers: Brokers, out: list) -> None:
        """Run every check at instants T < until (T <= until if inclusive)."""
        interval = self.rules.interval_ms
        resume = self.stall_check_at
        if resume >= 0:
            deadline = confirm_by(self.rules, resume)
            if until > deadline or (inclusive and until == deadline):
                self.stall_check_at = self.stall_from = -1  # no fetch came in time
        if until < self.next_check or (until == self.next_check and not inclusive):
            return  # no check instant in between (the common case)
        if self.leader >= 0:
            while True:
                due = self._next_shrink_at()
                if due is None or due > until or (due == until and not inclusive):
                    break
                self._shrink(due, brokers, out)
                self.next_check = due + interval
        first_unrun = ceil_to(until + 1 if inclusive else until, interval)
        if first_unrun > self.next_check:
            self.next_check = first_unrun

    def _next_shrink_at(self) -> Optional[int]:
        """The first check instant >= next_check at which a shrink happens if
        no further event arrives, or None."""
        rules, leader_leo, best = self.rules, self.leader_leo, None
        # kafka and kip501: a follower at the leader's LEO stays in sync
        # (out_of_sync_from's first test, here without the call: most
        # followers of a busy cluster are there whenever this is asked).
        at_leo_in_sync = rules.modern
        leader, followers = self.leader, self.followers
        for r in self.isr:
            if r == leader:
                continue
            f = followers[r]
            if at_leo_in_sync and f.leo == leader_leo:
                continue
            since = out_of_sync_from(rules, f, leader_leo)
            if since is not None and (best is None or since < best):
                best = since
        if best is None:
            return None
        return max(self.next_check, ceil_to(best, rules.interval_ms))

    # ------------------------------------------------------------ events
    def apply(self, event, brokers: Brokers, out: list) -> Optional[tuple[str, str]]:
        """Apply one partition event at its ts (checks before it run first)."""
        kind = event.type
        if kind == "fetch":  # most events: taken as plain values (apply_fetch)
            ts, received_ts, broker_epoch = event.ts, event.received_ts, event.broker_epoch
            return self.apply_fetch(
                event.replica, event.leader, event.leader_epoch, ts,
                ts if received_ts is None else received_ts, event.fetch_offset,
                event.leader_leo, -1 if broker_epoch is None else broker_epoch, brokers, out)
        ts = event.ts
        self._step_to(ts, brokers, out)
        if kind in LEADER_ACTIVITY and self._note_leader_activity(event):
            if self.stall_check_at >= 0 and kind in FOLLOWER_FETCHES:
                self._resume_check(ts, brokers, out)
        elif kind == "leader":
            self.stall_check_at = self.stall_from = -1
        if kind == "append":
            return self._on_append(event, brokers)
        if kind == "leader":
            return self._on_leader(event, brokers)
        if kind == "fetch_start":
            return self._on_fetch_start(event)
        if kind == "isr":
            return None  # compared, never applied (IsrDivergence alert)
        return rejected(f"{kind} is not a partition event")

    def _step_to(self, ts: int, brokers: Brokers, out: list) -> None:
        """Before an event at `ts`: a suspected stall no fetch confirmed in
        time is dropped, the checks before `ts` run, the model's time moves."""
        if self.stall_check_at >= 0 and ts > confirm_by(self.rules, self.stall_check_at):
            self.stall_check_at = self.stall_from = -1  # no fetch came in time
        if ts > self.next_check:  # else no check instant lies before ts
            self.advance(ts, False, brokers, out)
        if ts > self.ts:
            self.ts = ts

    def apply_fetch(self, replica: int, leader: int, leader_epoch: int, ts: int, fetch_ts: int,
                    fetch_offset: int, fetch_leader_leo: int, broker_epoch: int,
                    brokers: Brokers, out: list) -> Optional[tuple[str, str]]:
        """`apply` of a `fetch`, given as its values (`broker_epoch` -1: not
        sent): a session fetch is applied without building the event
        (isr/engine/sessions.py)."""
        if ts > self.next_check or self.stall_check_at >= 0:
            self._step_to(ts, brokers, out)
        elif ts > self.ts:  # _step_to when no check and no stall is due: most fetches
            self.ts = ts
        if self.leader < 0:
            return NO_LEADER
        if leader_epoch != self.leader_epoch or leader != self.leader:
            return STALE_EPOCH
        last = self.leader_active_ts
        if ts > last:
            # _note_activity, whose rule only acts after a gap longer than
            # the stall bound (stall_bound_ms, inline): most fetches come
            # within it.
            if last >= 0 and ts - last > self.rules.replica_lag_time_max_ms:
                self._note_activity(ts)
            else:
                self.leader_active_ts = ts
        if self.stall_check_at >= 0:
            self._resume_check(ts, brokers, out)
        # What the fetch does (Kafka's updateFollowerFetchState).
        f = self.followers.get(replica)
        if f is None:
            if not self.bootstrap:
                return rejected(f"replica {replica} is not in the assignment {self.replicas}")
            f = self._bootstrap_follower(replica, ts)
        if broker_epoch < brokers.newest_epoch and brokers.is_stale_fetch(replica, broker_epoch):
            return STALE_BROKER_EPOCH
        rules = self.rules
        if rules.policy == KAFKA and fetch_offset >= fetch_leader_leo:
            # caught_up_ts_after_fetch's first case, inline: most fetches
            if fetch_ts > f.last_caught_up_ts:
                f.last_caught_up_ts = fetch_ts
        else:
            f.last_caught_up_ts = caught_up_ts_after_fetch(
                rules, f, fetch_offset, fetch_leader_leo, fetch_ts, ts)
        previous_leo = f.leo
        f.leo = fetch_offset  # may go down after truncation: no max
        if fetch_leader_leo > f.last_fetch_leader_leo:
            f.last_fetch_leader_leo = fetch_leader_leo
        f.last_fetch_ts = fetch_ts
        f.broker_epoch = broker_epoch
        f.pending_offset = -1
        f.pending_ts = 0
        if fetch_leader_leo > self.leader_leo:
            self.leader_leo = fetch_leader_leo
        if replica not in self.isr and self._can_join_isr(replica, f, brokers):
            reason = (f"replica {replica}: leo {f.leo} >= hw {self.hw} and >= "
                      f"leader_epoch_start_offset {self.leader_epoch_start_offset}")
            self._change_isr(fetch_ts, "expand", [replica], self.isr + [replica],
                             "leader", reason, brokers, out, at=ts)
        elif f.leo != previous_leo:
            self._recompute_hw(fetch_ts, brokers)
        return None

    def apply_times_fetch(self, replica: int, leader: int, leader_epoch: int, ts: int,
                          fetch_ts: int, fetch_offset: int, fetch_leader_leo: int,
                          broker_epoch: int, brokers: Brokers) -> bool:
        """`apply_fetch` of a fetch that plainly moves only its follower's
        times, done without its general steps: True if it was one (applied,
        with apply_fetch's outcome None), False if not (nothing changed:
        apply_fetch takes it). Plainly one: no check instant lies before it
        (ts <= next_check) and no leader stall is pending or can be
        suspected (a gap from the leader's last activity within the stall
        bound); it is of the current leader and epoch, at the leader's LEO,
        which the follower is at and has seen in a fetch, in the ISR, with
        the follower's broker epoch, not stale. apply_fetch then moves only
        the model's time, the leader's activity and the follower's fetch and
        caught-up times (and clears a pending fetch_start): no LEO, HW or ISR
        change. The session catch-up's jumps are mostly such fetches
        (isr/engine/sessions.py); tests/test_sessions.py compares the two."""
        if (ts > self.next_check or self.stall_check_at >= 0 or leader != self.leader
                or leader < 0 or leader_epoch != self.leader_epoch):
            return False
        leader_leo = self.leader_leo
        f = self.followers.get(replica)
        if (f is None or fetch_offset != leader_leo or fetch_leader_leo != leader_leo
                or f.leo != leader_leo or f.last_fetch_leader_leo < leader_leo
                or f.broker_epoch != broker_epoch or replica not in self.isr):
            return False
        rules, last = self.rules, self.leader_active_ts
        # (stall_bound_ms(rules), inline: this runs for most fetches caught up)
        if last >= 0 and ts - last > rules.replica_lag_time_max_ms:
            return False  # it may start a stall suspicion (_note_activity)
        if broker_epoch < brokers.newest_epoch and brokers.is_stale_fetch(replica, broker_epoch):
            return False
        self.take_times_fetch(f, ts, fetch_ts)
        return True

    def take_times_fetch(self, f: Follower, ts: int, fetch_ts: int) -> None:
        """apply_fetch's steps, as they fall for a fetch of follower `f` at
        the leader's LEO that plainly moves only times (apply_times_fetch
        tested that it is one; the session catch-up's `_fold_all` knows it
        of most fetches it applies)."""
        if ts > self.ts:
            self.ts = ts
        if ts > self.leader_active_ts:
            self.leader_active_ts = ts
        rules = self.rules
        if rules.policy == KAFKA:
            if fetch_ts > f.last_caught_up_ts:
                f.last_caught_up_ts = fetch_ts
        else:
            leader_leo = self.leader_leo
            f.last_caught_up_ts = caught_up_ts_after_fetch(
                rules, f, leader_leo, leader_leo, fetch_ts, ts)
        f.last_fetch_ts = fetch_ts
        f.pending_offset = -1
        f.pending_ts = 0

    # ------------------------------------------------------------ the leader's stall
    def _note_leader_activity(self, event) -> bool:
        """The current leader ran at event.ts: after a gap it may be resuming
        from a stall, confirmed by a follower's fetch (isr/model/stall.py)."""
        if self.leader < 0 or self._is_stale(event):
            return False
        if event.ts > self.leader_active_ts:
            self._note_activity(event.ts)
        return True

    def _note_activity(self, ts: int) -> None:
        """The current leader ran at ts, after its last activity seen."""
        # the cheap part of suspects_stall first: this runs on every event
        last, rules = self.leader_active_ts, self.rules
        if (last >= 0 and self.stall_check_at < 0
                and ts - last > rules.replica_lag_time_max_ms  # stall_bound_ms, inline
                and suspects_stall(rules, last, ts,
                                   [self.followers[r] for r in self.isr if r != self.leader])):
            self.stall_from = last
            self.stall_check_at = ts
        self.leader_active_ts = ts

    def note_skipped_activity(self, leader: int, leader_epoch: int, until_ts: int) -> None:
        """Fetches of `leader` in `leader_epoch` that a lazy session catch-up skipped
        (isr/engine/sessions.py) showed the leader running until `until_ts`.
        None of them could start a stall suspicion: a session fetch after a
        gap longer than the stall bound is always applied exactly."""
        if (self.leader >= 0 and leader == self.leader and leader_epoch == self.leader_epoch
                and until_ts > self.leader_active_ts):
            self.leader_active_ts = until_ts

    def _resume_check(self, at: int, brokers: Brokers, out: list) -> None:
        """Kafka's overdue isr-expiration run after the leader's stall, before
        its followers' first fetch after it (at `at`)."""
        since, resumed = self.stall_from, self.stall_check_at
        self.stall_check_at = self.stall_from = -1
        if self.next_check == at:
            # A check instant of the grid: it is one of the overdue runs, all
            # made back to back at the resume; it does not run again after
            # the fetches of the same instant.
            self.next_check = at + self.rules.interval_ms
        if self.leader < 0:
            return
        rules, leader_leo = self.rules, self.leader_leo
        if any(r != self.leader and is_out_of_sync(rules, self.followers[r], leader_leo, at)
               for r in self.isr):
            why = f"leader {self.leader} resumed after {resumed - since} ms without activity: "
            self._shrink(at, brokers, out, why)

    def _is_stale(self, event) -> bool:
        return event.leader_epoch != self.leader_epoch or event.leader != self.leader

    def _follower_of(self, event) -> tuple[Optional[Follower], Optional[tuple[str, str]]]:
        if self.leader < 0:
            return None, NO_LEADER
        if self._is_stale(event):
            return None, STALE_EPOCH
        f = self.followers.get(event.replica)
        if f is not None:
            return f, None
        if not self.bootstrap:
            return None, rejected(
                f"replica {event.replica} is not in the assignment {self.replicas}")
        return self._bootstrap_follower(event.replica, event.ts), None

    def _bootstrap_follower(self, replica: int, ts: int) -> Follower:
        """Before a leader event every follower seen is taken as assigned and in
        the ISR, with the grace a new leader gives its ISR members."""
        f = Follower(last_caught_up_ts=ts, last_fetch_ts=ts)
        self.followers[replica] = f
        self.replicas.append(replica)
        self.isr.append(replica)
        self._refresh_min_isr()
        return f

    def _on_fetch_start(self, ev):
        f, problem = self._follower_of(ev)
        if problem is not None:
            return problem
        # (_follower_of gives a follower when it gives no problem.)
        f.pending_offset = ev.fetch_offset  # type: ignore[union-attr]
        f.pending_ts = ev.ts  # type: ignore[union-attr]
        return None

    def _on_append(self, ev, brokers: Brokers):
        if self.leader < 0:
            return NO_LEADER
        if self._is_stale(ev):
            return STALE_EPOCH
        if ev.leader_leo > self.leader_leo:
            self.leader_leo = ev.leader_leo
        self._recompute_hw(ev.ts, brokers)
        return None

    def _on_leader(self, ev, brokers: Brokers):
        if ev.leader_epoch < self.leader_epoch:
            return STALE_EPOCH
        # A bootstrapped partition takes its first leader event as a new epoch:
        # it never knew the epoch start offset or the HW.
        new_epoch = ev.leader_epoch > self.leader_epoch or self.bootstrap
        if not new_epoch and ev.leader != self.leader:
            return rejected(f"leader changed from {self.leader} to {ev.leader} "
                            f"without a higher leader_epoch than {self.leader_epoch}")
        isr = list(ev.isr)
        if ev.leader not in isr:
            isr.insert(0, ev.leader)  # the leader is always a member
        if new_epoch:
            # The epoch it was bootstrapped in: no reset happened in Kafka, the
            # leader's LEO and the followers' fetches seen in it stand (else a
            # follower re-admitted as "never caught up" is shrunk at once).
            seen = self.bootstrap and (ev.leader, ev.leader_epoch) == (self.leader,
                                                                      self.leader_epoch)
            start = ev.leader_epoch_start_offset
            self.leader_epoch_start_offset = start
            self.leader_leo = max(self.leader_leo, start) if seen else start
            self.hw = ev.hw if ev.hw is not None else min(self.hw, self.leader_leo)
            followers = self._reset_followers(ev, isr, new_leader=ev.leader != self.leader)
            if seen:
                followers.update((r, f) for r, f in self.followers.items() if r in followers)
            self.followers = followers
        else:
            old = self.followers
            self.followers = {r: old.get(r) or Follower() for r in ev.replicas if r != ev.leader}
        if ev.leader != self.leader:
            self.leader_active_ts = -1  # a new leader: no activity of it seen yet
        self.leader = ev.leader
        self.leader_epoch = ev.leader_epoch
        self.replicas = shared_list(ev.replicas)  # no longer bootstrapped (below)
        self.isr = shared_list(isr)
        if ev.min_insync_replicas is not None:
            self.min_isr_override = ev.min_insync_replicas
        self._refresh_min_isr()
        self.bootstrap = False
        self._recompute_hw(ev.ts, brokers)
        self._track_min_isr(ev.ts)
        return None

    def _reset_followers(self, ev, isr: list[int], new_leader: bool) -> dict[int, Follower]:
        """Kafka's `resetReplicaState` on a new leader epoch (KAFKA-13790)."""
        old, ts, start = self.followers, ev.ts, ev.leader_epoch_start_offset
        followers = {}
        for r in ev.replicas:
            if r == ev.leader:
                continue
            t0 = ts if r in isr else 0
            if new_leader:
                f = Follower(last_caught_up_ts=t0)
                if self.rules.policy == LEGACY:
                    # 0.8 judged "stuck" on the last LEO update, which a new
                    # replica object set to its creation time.
                    f.last_fetch_ts = t0
            else:
                kept = old.get(r)  # a follower new to the assignment starts empty
                f = Follower(
                    leo=-1 if kept is None else kept.leo,
                    last_fetch_leader_leo=start,
                    last_fetch_ts=t0,
                    last_caught_up_ts=t0,
                    broker_epoch=-1 if kept is None else kept.broker_epoch,
                )
            followers[r] = f
        return followers

    def controller_removal(self, broker: int, state: str, broker_epoch: int, ts: int,
                           brokers: Brokers, out: list) -> None:
        """The controller fenced / shut down / unregistered `broker` at `ts`."""
        self.advance(ts, False, brokers, out)
        if ts > self.ts:
            self.ts = ts
        if self.leader < 0:
            return
        if broker == self.leader:
            self.leader = -1  # leaderless until the next leader event
            return
        if not self.rules.modern or broker not in self.isr:
            return
        reason = (f"controller removed broker {broker} from the ISR: broker {state} "
                  f"(broker_epoch {broker_epoch})")
        self._change_isr(ts, "shrink", [broker], [r for r in self.isr if r != broker],
                         "controller", reason, brokers, out)

    # ------------------------------------------------------------ rules
    def _can_join_isr(self, replica: int, f: Follower, brokers: Brokers) -> bool:
        """Kafka's canAddReplicaToIsr + isFollowerInSync (KAFKA-7128, KIP-841)."""
        if self.rules.modern and not brokers.is_eligible(replica, f.broker_epoch):
            return False
        return f.leo >= self.hw and f.leo >= self.leader_epoch_start_offset

    def _recompute_hw(self, now: int, brokers: Brokers) -> None:
        """Kafka's maybeIncrementLeaderHW: min LEO over the holders, forward only."""
        isr = self.isr
        modern = self.rules.modern
        if modern and len(isr) < self.min_isr:
            return  # strict min ISR (KAFKA-15583): frozen while under min ISR
        leader_leo = self.leader_leo
        candidate = leader_leo
        for r, f in self.followers.items():
            leo = f.leo
            if leo >= candidate:
                continue  # cannot lower it, whether it holds or not
            if r in isr or (
                modern
                and is_caught_up(self.rules, f, leader_leo, now)
                and brokers.is_eligible(r, f.broker_epoch)
            ):
                candidate = leo  # -1 (unknown) keeps the HW where it is
        if candidate > self.hw:
            self.hw = candidate

    def _shrink(self, at: int, brokers: Brokers, out: list, why: str = "") -> None:
        rules, leader_leo = self.rules, self.leader_leo
        removed = [r for r in self.isr
                   if r != self.leader and is_out_of_sync(rules, self.followers[r], leader_leo, at)]
        reason = why + "; ".join(
            describe_out_of_sync(rules, r, self.followers[r], leader_leo, at) for r in removed)
        if at > self.ts:
            self.ts = at
        self._change_isr(at, "shrink", removed, [r for r in self.isr if r not in removed],
                         "leader", reason, brokers, out)

    def _change_isr(self, now: int, action: Literal["shrink", "expand"], replicas: list[int],
                    isr_after: list[int], cause: Literal["leader", "controller"], reason: str,
                    brokers: Brokers, out: list,
                    at: Optional[int] = None) -> None:
        """Commit an ISR change at once, recompute the HW, and record it."""
        at = now if at is None else at
        before = self.isr
        self.isr = isr_after if self.bootstrap else shared_list(isr_after)
        self._recompute_hw(now, brokers)
        self._track_min_isr(at)
        self.seq += 1
        leader_leo = self.leader_leo
        details = [
            ReplicaDetail(replica=r, leo=(f := self.followers[r]).leo,
                          lag_ms=lag_ms(f, leader_leo, at),
                          last_caught_up_ts=f.last_caught_up_ts, last_fetch_ts=f.last_fetch_ts)
            for r in replicas
        ]
        out.append(IsrChange(
            id=f"{self.cluster}/{self.topic}/{self.partition}/{self.rules.policy}/{self.seq}",
            cluster=self.cluster, topic=self.topic, partition=self.partition,
            leader=self.leader, leader_epoch=self.leader_epoch, ts=at, action=action,
            replicas=list(replicas), isr_before=list(before), isr_after=list(isr_after),
            hw=self.hw, leader_leo=leader_leo, policy=self.rules.policy, cause=cause,
            reason=reason, details=details, bootstrap=self.bootstrap,
        ))

    def _track_min_isr(self, ts: int) -> None:
        under = self.is_under_min_isr()
        if under and self.under_min_since < 0:
            self.under_min_since = ts
        elif not under and self.under_min_since >= 0:
            self.under_min_ms += ts - self.under_min_since
            self.under_min_since = -1

    def time_under_min_isr(self, until: int) -> int:
        open_ms = until - self.under_min_since if self.under_min_since >= 0 else 0
        return self.under_min_ms + max(0, open_ms)

    # ------------------------------------------------------------ views
    def state_fields(self) -> dict:
        """The partition's state as plain values, by PartitionState's field
        names: the partition_state record (`view`) and the metrics' feed."""
        isr, leader_leo, now = self.isr, self.leader_leo, self.ts
        followers = [
            {"replica": r, "leo": f.leo, "lag_ms": lag_ms(f, leader_leo, now),
             "last_caught_up_ts": f.last_caught_up_ts, "last_fetch_ts": f.last_fetch_ts,
             "in_isr": r in isr}
            for r, f in sorted(self.followers.items())
        ]
        under_min, at_min, _alone, under_replicated = isr_health(isr, self.leader,
                                                                 len(self.replicas), self.min_isr)
        return {
            "type": "partition_state", "cluster": self.cluster, "topic": self.topic,
            "partition": self.partition, "ts": now, "leader": self.leader,
            "leader_epoch": self.leader_epoch, "replicas": list(self.replicas),
            "isr": list(isr), "hw": self.hw, "leader_leo": leader_leo,
            "under_replicated": under_replicated, "under_min_isr": under_min,
            "at_min_isr": at_min, "min_insync_replicas": self.min_isr,
            "policy": self.rules.policy, "followers": followers, "bootstrap": self.bootstrap,
        }

    def view(self) -> PartitionState:
        return PartitionState.model_validate(self.state_fields())

    # ------------------------------------------------------------ state store
    _SCALARS: ClassVar[tuple[str, ...]] = (
        "leader", "leader_epoch", "leader_epoch_start_offset", "hw", "leader_leo",
        "min_isr_default", "min_isr_override", "min_isr", "bootstrap", "next_check", "ts",
        "seq", "under_min_since", "under_min_ms",
        "leader_active_ts", "stall_from", "stall_check_at")

    def to_list(self) -> list:
        """Compact, JSON-able form; `from_list` restores it exactly. The
        sessions' positions, when there are any, come last. The scalars,
        followers and links are tuples (JSON arrays as lists are, one C call
        each: this runs for every model at each whole snapshot of the Spark
        job's state, ~45 % of a save; docs/benchmarks.md, branch `savecost`)."""
        fields = FOLLOWER_FIELDS
        values = [
            STATE_VERSION, self.cluster, self.topic, self.partition, _SCALAR_FIELDS(self),
            self.replicas, self.isr, [(r,) + fields(f) for r, f in self.followers.items()],
        ]
        if self.sessions:
            values.append([[sid, *link] for sid, link in self.sessions.items()])
        return values

    @classmethod
    def from_list(cls, rules: Rules, values: list) -> "PartitionModel":
        version, cluster, topic, partition, scalars, replicas, isr, followers = values[:8]
        if version not in (1, STATE_VERSION):  # 1 lacks the last scalars: their defaults
            raise ValueError(f"partition state version {version} is not {STATE_VERSION}")
        m = cls(rules, cluster, topic, partition)
        for name, value in zip(cls._SCALARS, scalars):
            setattr(m, name, value)
        own = list if m.bootstrap else shared_list  # (see _SHARED_LISTS)
        m.replicas = own(replicas)
        m.isr = own(isr)
        m.followers = {row[0]: Follower.from_list(row[1:]) for row in followers}
        if len(values) > 8:
            m.sessions = {sid: [replica, pos] for sid, replica, pos in values[8]}
        m._refresh_min_isr()
        return m

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, PartitionModel) and self.rules == other.rules
                and self.to_list() == other.to_list())


_SCALAR_FIELDS = attrgetter(*PartitionModel._SCALARS)  # to_list's scalars, as a tuple
