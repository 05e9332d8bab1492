"""Which partitions get a `partition_state` record in a micro-batch
(`output.state_interval_ms`).

A partition is *pending* from the first change to its model after its last
record (an event applied, an ISR change). A pending partition's record goes
out at once when it is first seen or its ISR, leader, leader epoch or
min-ISR status differ from its last record's; otherwise when the bucket's
watermark reaches the partition's own instant in the interval (its phase, a
crc32 of its key: `phase_of`, the rule the metrics' refreshes follow too) at
or after `interval_ms` since its last record. A record sent on time counts
from that instant, not from the batch's watermark (which is past it), so a
partition that stays pending gets one record per interval, each in the batch
that reaches its next instant; one sent at once counts from the batch's
watermark (the next one between one and two intervals later). So the
compacted state topic never trails a partition's membership, at 100 k busy
partitions it gets one record per partition per interval instead of one per
batch, and a cluster whose partitions were all first seen together (a
job's start) sends them spread over the batches of an interval, not all in
one batch every interval (issue 23, branch `statespread`). A bounded input
ends with every partition's state (the operator's end of input), and `flush`
sends every pending one (the last batch of `--available-now`).

The metrics are fed apart from this (operator.py, `metrics_keys`), never
from the throttled records: every touched partition whose `health`
(membership and what the health flags are computed from) differs from
what the metrics were last sent, at once; the busy ones, whose offsets
(`shown`) differ from those last sent or whose followers are not all quiet
(`quiet`: a lag or time since caught up that grows), once per
`busy_interval_ms` (metrics.busy_refresh_interval_ms; 0: every batch) each
(`busy_due`); and the other (quiet) touched partitions once per
`metrics_interval_ms` (metrics.refresh_interval_ms) of watermark each;
both spread over their interval by partition (phase_of). With
`metrics_interval_ms` 0, every touched partition, every batch.

A partition is touched in a batch when an event, an ISR change, a broker
event or a fetch at or after the watermark the batch started from (`begin`)
reaches it; a fetch session's fetch touches every partition it caches
(`on_session_fetch`). The throttle needs no fetch applied one by one: it
lets the engine catch a session's partitions up lazily (skips_quiet_fetches),
so a fetch applied later, when something needs the partition, is one of an
earlier batch and touches nothing now. Before (it heard every fetch) the
engine caught every partition of a live session up at every batch: ~1 ms
per event at 100 k partitions (docs/benchmarks.md, issue 23, branch
`runprof`).

Neither `due` nor `metrics_keys` walks every pending or touched partition
each batch: `due` looks at the partitions whose membership may have moved
(PartitionModel.membership_may_move, an ISR change, a broker event: issue
23, branch `duewalk`) or whose interval ended (an index by the watermark
it ends at); `metrics_keys` at those changed, at risk (a session that
lapsed or lost a link) or whose refresh is due (an index by phase); each
proves the others unchanged (docs/streaming.md; issue 23, branch `outwalk`).
"""

from __future__ import annotations

import bisect
import heapq
import zlib
from typing import Iterable

from isr.engine.listeners import Listener
from isr.model.health import isr_health

NEVER = -(2**63)  # the index's watermark for a partition never sent under one of its policies


def phase_of(key: tuple, interval_ms: int) -> int:
    """A partition's phase in an interval: a crc32 of its key (cluster,
    topic, partition), the same in every worker, after a restart and
    whatever the micro-batches. The partition's instants are the watermarks
    t with (t + phase) % interval_ms == 0: one per interval, the partitions
    of a bucket spread evenly over it."""
    return zlib.crc32(repr(key).encode()) % interval_ms


def next_instant(at: int, phase: int, interval_ms: int) -> int:
    """The first of a partition's instants (phase_of) at or after `at`."""
    return at + (-(at + phase)) % interval_ms


def membership(model) -> list:
    """What makes a record go out at once when it differs from the last one's."""
    under_min, at_min = isr_health(model.isr, model.leader, len(model.replicas),
                                   model.min_isr)[:2]
    return [list(model.isr), model.leader, model.leader_epoch, under_min, at_min]


def quiet(m, sessions: set) -> bool:
    """Whether partition model `m`, as it stands (its logged session
    fetches not applied), is quiet for the metrics: led, its HW at the
    leader's LEO, no leader stall suspected, every assigned replica in the
    ISR, and every follower at the leader's LEO (lag 0), with no KIP-501
    fetch pending, and fetching: linked to a session among `sessions` (the
    serials of those that fetched in the batch). Then what its pending
    fetches can move is each follower's fetch and caught-up times, which a
    fetch at the LEO keeps at the fetch's own (its time since caught up
    stays within a fetch interval), and the model's time. A follower
    behind, out of the ISR or whose session did not fetch has a lag or time
    since caught up that grows: not quiet."""
    leo = m.leader_leo
    if (m.leader < 0 or leo < 0 or m.hw != leo or m.stall_check_at >= 0
            or len(m.isr) != len(m.replicas)):
        return False
    fed = [link[0] for sid, link in m.sessions.items() if sid in sessions]
    for r, f in m.followers.items():
        if (f.leo != leo or f.pending_offset >= 0 or f.last_fetch_leader_leo < leo
                or r not in fed):
            return False
    return True


def shown(m, sessions: set) -> tuple:
    """What the metrics show of model `m` that moves only with its state,
    not with time (docs/operations.md): its `health` (first), HW, leader
    LEO, each follower's LEO, and whether it is `quiet` (last)."""
    return (health(m), m.hw, m.leader_leo, tuple([(r, f.leo) for r, f in m.followers.items()]),
            quiet(m, sessions))


def health(m) -> tuple:
    """A partition's membership and what its health flags are computed
    from (leader, epoch, replicas, ISR, min ISR): the same health, the same
    under-replicated, under-min-ISR, at-min-ISR, leader-only and offline
    flags, hence the same cluster counts (sinks/prometheus.py _flags)."""
    return (m.leader, m.leader_epoch, tuple(m.replicas), tuple(m.isr), m.min_isr)


def _phase_ranges(interval: int, began: int, now: int):
    """The phases (phase_of in `interval`) whose instant the watermark
    passed from `began` to `now`: an instant t in (began, now] with
    (t + phase) % interval == 0, so the phases -t mod interval, one range
    (two, wrapped around), as (low, high) pairs; None: every phase."""
    span = now - began
    if span <= 0:
        return []
    if span >= interval:
        return None
    low = -now % interval
    high = low + span - 1
    ranges = [(low, min(high, interval - 1))]
    if high >= interval:
        ranges.append((0, high - interval))
    return ranges


def _same_health(before: list, now: list) -> bool:
    """Whether a partition's models' `shown` values `before` and `now` have
    the same `health` (the first of each)."""
    return len(before) == len(now) and all(b[0] == n[0] for b, n in zip(before, now))


class StateThrottle(Listener):
    name = "partition_state"

    def __init__(self, interval_ms: int = 0, metrics_interval_ms: int = 0,
                 busy_interval_ms: int = 0) -> None:
        self.interval_ms = interval_ms
        # metrics.refresh_interval_ms: a quiet partition's state goes to the
        # metrics once per this much watermark (metrics_keys; 0: every batch).
        self.metrics_interval_ms = metrics_interval_ms
        # metrics.busy_refresh_interval_ms: a partition whose offsets or lag
        # moved but whose `health` did not goes to the metrics once per this
        # much watermark (metrics_keys; 0: every batch); never more rarely
        # than a quiet one (so within metrics.series_ttl_s too).
        self.busy_interval_ms = min(busy_interval_ms, metrics_interval_ms)
        self._busy_phase: dict[tuple, int] = {}  # each busy partition's phase (busy_due)
        # The busy partitions left out so far (metrics_keys), touched or not
        # since: each looked at again when its health may have moved or its
        # busy instant comes, so none trails by more than the busy interval.
        # Worker-local, as `shown`; after a restore every one is looked at.
        self.busy_waiting: set = set()
        self._waiting_unsure = False
        self.pending: set[tuple] = set()  # (cluster, topic, partition)
        self.touched: set[tuple] = set()  # changed in this batch (for the metrics)
        # (policy, cluster, topic, partition) -> [the watermark its interval
        # counts from (that of its last record's batch; for a record sent on
        # time, the partition's instant it went out at: `_due`), membership]
        self.sent: dict[tuple, list] = {}
        self.sent_changed: set[tuple] = set()  # keys of `sent` since the last state_delta
        # The pending set as the state row holds it (its snapshot and deltas
        # so far): what state_delta writes the changes from.
        self._pending_saved: set[tuple] = set()
        # The batch's first watermark (begin): a fetch before it is an earlier
        # batch's, applied late by a lazy catch-up (and after take_touched,
        # every fetch is the batch's, counted already).
        self.since = -(2**63)
        # The sessions that logged a fetch since the last take_touched, by serial.
        self.fetched: dict = {}
        # Of the last take_touched (for the metrics, metrics_keys): the
        # serials of the sessions that fetched, the batch's first watermark.
        self.fetched_sids: set = set()
        self.began = -(2**63)
        # The quiet partitions' refresh phases (refresh_due), indexed: each
        # one's, and the phases sorted with their partitions alongside.
        self._phase: dict[tuple, int] = {}
        self._phases: list[int] = []
        self._phased: list[tuple] = []
        self._phased_new: list[tuple] = []  # to index (at the next _refreshes_due)
        # Per partition, its models' `shown` values as last sent to the
        # metrics (metrics_keys). Not state: after a restore every partition
        # a batch touches is sent once.
        self.shown: dict[tuple, list] = {}
        # The partitions whose `shown` values last sent were all quiet
        # (metrics_keys): one of them a batch reached only by its sessions'
        # fetches is left out unless a session of its lapsed, it lost a
        # session's link (on_unlink) or its refresh is due. Worker-local, as
        # `shown`; cleared with it and by a restore.
        self.quiet_keys: set = set()
        # Of the last take_touched: the partitions an event, an ISR change, a
        # broker event or a fetch of the batch reached (not only a session's
        # fetch), for the metrics (`_metrics_candidates`).
        self.changed: set = set()
        # The partitions whose membership may have moved (an ISR change, a
        # broker event, an event PartitionModel.membership_may_move names):
        # since the last take_touched, and of it. With the index, the only
        # pending ones `due` looks at besides those due: an append or a
        # fetch reaching a partition leaves its membership as it was.
        self._moving: set = set()
        self.moved: set = set()
        # The pending partitions by the watermark their interval ends at
        # (`due`): so a batch looks only at the partitions changed or due,
        # not at every pending one. NEVER: not sent under every policy yet.
        self._due_at: dict[tuple, int] = {}
        self._by_due: dict[int, list] = {}  # watermark -> partitions indexed at it
        self._due_heap: list[int] = []  # the watermarks of _by_due
        self._unindexed: list[tuple] = []  # pending since the last `due`, not indexed yet
        # A partition sent stays indexed at its next interval's end (so one
        # pending again needs no indexing); one whose end the watermark
        # passed while it was not pending waits here, due once pending.
        self._overdue: set[tuple] = set()
        # False after the pending set came from a saved state: the next
        # `due` looks at every pending partition and indexes them.
        self._indexed = True

    def begin(self, watermark: int) -> None:
        """A batch starts; the watermark stands at `watermark` (every event
        it releases, every check it runs, is at or after it)."""
        self.since = self.began = watermark

    def on_change(self, model, change, out: list) -> None:
        self.touched.add(model.key)
        self._moving.add(model.key)

    def on_event(self, model, event, outcome, out: list) -> None:
        self.touched.add(model.key)
        if model.membership_may_move(event.type):
            self._moving.add(model.key)

    def on_fetch(self, model, replica: int, ts: int, fetch_ts: int, outcome, out: list) -> None:
        # A fetch as its values: with this the engine applies the bucket's
        # fetches as `isr replay` does (apply_fetch), without building an
        # event for a listener that would only note the partition.
        if ts >= self.since:
            self.touched.add(model.key)
        if model.membership_may_move("fetch"):
            self._moving.add(model.key)

    def on_session_fetch(self, session, ts: int) -> None:
        self.fetched[session.sid] = session

    def skips_quiet_fetches(self, model) -> bool:
        return True  # a session's fetches touch its partitions (on_session_fetch)

    def skips_fetch(self, model, replica: int, ts: int) -> bool:
        return True

    def on_broker(self, model, event, out: list) -> None:
        self.touched.add(model.key)
        self._moving.add(model.key)

    def on_unlink(self, model) -> None:
        self.quiet_keys.discard(model.key)  # a follower it fed may not fetch now

    def take_touched(self) -> set:
        """The partitions changed since the last call; they are pending now.
        A set: no sort of every partition a session fetched."""
        touched, self.touched = self.touched, set()
        self.changed = set(touched)
        self.moved, self._moving = self._moving, set()
        # Until the next batch begins, a fetch applied is one this batch's
        # views catch up (engine.current): counted here already.
        self.since = 2**63
        self.fetched_sids = set(self.fetched)
        if self.fetched:  # every partition a session fetched, whether caught up or not
            for session in self.fetched.values():
                cluster = session.cluster
                touched.update([(cluster, topic, partition)
                                for topic, partition in session.cached])
            self.fetched = {}
        if self.interval_ms > 0:
            self._unindexed.extend(touched - self.pending)
        self.pending |= touched
        return touched

    def metrics_keys(self, touched, models_of, now: int, sessions=None) -> list:
        """Of the partitions the last take_touched gave (`touched`), in
        partition order, those whose state goes to the metrics in this
        batch, whose watermark is `now` (`models_of(key)`: the partition's
        models as they stand, not caught up). Those whose `shown` values
        (membership, offsets, whether `quiet`) differ from the ones last
        sent; those not `quiet` (a follower's lag or time since caught up
        grows: shown every batch); the others when `refresh_due`. A model
        not caught up is one whose pending session fetches move only its
        followers' times (SessionDriver.is_steady; any other is visited,
        hence caught up, at every check: deadlines.py), so what `shown`
        reads is exact as it stands, and the cluster counts and those
        gauges stay exact without the partitions left out.

        `sessions`: the engine's fetch sessions by serial
        (SessionDriver.sessions.by_sid); with them only the candidates are
        looked at (`_metrics_candidates`), else every touched partition."""
        waiting = self.busy_waiting
        if self.metrics_interval_ms <= 0 or not self.fetched_sids:
            self.shown.clear()  # (every touched one is sent: nothing to compare with)
            self.quiet_keys.clear()
            keys = touched | waiting if waiting else touched
            waiting.clear()
            return sorted(keys)
        if sessions is not None:
            touched = self._metrics_candidates(touched, sessions, now)
        if waiting:
            touched = (touched - waiting) | self._waiting_due(now)
        sids, began, last, quiet_keys = self.fetched_sids, self.began, self.shown, self.quiet_keys
        busy = self.busy_interval_ms > 0
        out = []
        for key in sorted(touched):
            models = list(models_of(key))
            now_shown = [shown(m, sids) for m in models]
            all_quiet = all(q for *_, q in now_shown)
            before = last.get(key)
            if before == now_shown and all_quiet:
                send = self.refresh_due(key, began, now)
                if not send and key in waiting:  # back to what was last sent: quiet again
                    waiting.discard(key)
                    quiet_keys.add(key)
            elif busy and before is not None and _same_health(before, now_shown):
                # Only offsets, lags or times moved: at the partition's own
                # instant of the busy interval. Until it goes it is looked at
                # every batch (not quiet as last sent: _metrics_candidates).
                send = self.busy_due(key, began, now)
                if not send:
                    quiet_keys.discard(key)
                    waiting.add(key)
            else:
                send = True
            if send:
                waiting.discard(key)
                last[key] = now_shown
                if all_quiet:
                    quiet_keys.add(key)
                    if key not in self._phase:
                        self._phased_new.append(key)
                else:
                    quiet_keys.discard(key)
                out.append(key)
        return out

    def _metrics_candidates(self, touched: set, sessions: dict, now: int) -> set:
        """The touched partitions metrics_keys must look at: all but those
        last sent quiet (`quiet_keys`) that the batch reached only by their
        sessions' fetches (not `changed`), whose every session fetched in
        the batch, and whose refresh is not due. Such a partition's model
        moved, since its state was last sent, only by pending fetches caught
        up, which move only its followers' times, and its links are the same
        (a lost one: on_unlink): its `shown` values are the ones last sent,
        still quiet. So the work follows what changed, the sessions that
        lapsed and the refreshes due, not the partitions fetched."""
        out = touched - self.quiet_keys
        out |= self.changed
        sids = self.fetched_sids
        for sid, session in sessions.items():
            if sid not in sids and session.cached:  # its followers' times grow
                cluster = session.cluster
                out.update([(cluster, topic, partition) for topic, partition in session.cached])
        out.update(self._refreshes_due(now))
        return out & touched

    def _waiting_due(self, now: int) -> set:
        """The busy partitions left out (`busy_waiting`) metrics_keys looks at
        now: those whose health may have moved (membership_may_move, an ISR
        change, a broker event: `moved`, as `due` reads it) and those whose
        busy instant the watermark passed (busy_due); all of them after a
        restore (models changed elsewhere). The others have the health they
        were last sent with, and their offsets and lags wait."""
        waiting = self.busy_waiting
        if self._waiting_unsure:
            self._waiting_unsure = False
            return set(waiting)
        out = waiting & (self.moved | self._moving)
        ranges = _phase_ranges(self.busy_interval_ms, self.began, now)
        if ranges is None:
            return set(waiting)
        if ranges:
            busy_phase_of = self._busy_phase_of
            for key in waiting:
                at = busy_phase_of(key)
                for lo, hi in ranges:
                    if lo <= at <= hi:
                        out.add(key)
        return out

    def _refreshes_due(self, now: int) -> list:
        """The quiet partitions whose phase the watermark passed from `began`
        to `now` (refresh_due), from the phase index: a refresh due at
        (t + phase) % interval == 0 for a t in (began, now], so the phases
        -t mod interval, one range (two, wrapped around)."""
        if self._phased_new:
            self._index_phases()
        phases, phased = self._phases, self._phased
        ranges = _phase_ranges(self.metrics_interval_ms, self.began, now)
        if ranges is None:
            return phased
        out = []
        for lo, hi in ranges:
            out.extend(phased[bisect.bisect_left(phases, lo):bisect.bisect_right(phases, hi)])
        return out

    def _index_phases(self) -> None:
        """Add the partitions sent quiet for the first time to the phase index."""
        phase_of, added = self._phase, []
        for key in self._phased_new:
            if key not in phase_of:
                phase_of[key] = phase = self._phase_of(key)
                added.append((phase, key))
        self._phased_new = []
        phases, phased = self._phases, self._phased
        if len(added) * 32 < len(phases):
            # A few (most batches): each put in its place, not the whole
            # index sorted again (in the order the sort gives: phase, key).
            for phase, key in added:
                lo, hi = bisect.bisect_left(phases, phase), bisect.bisect_right(phases, phase)
                at = lo + bisect.bisect_left(phased[lo:hi], key)
                phases.insert(at, phase)
                phased.insert(at, key)
            return
        pairs = sorted([*zip(phases, phased), *added])
        self._phases = [phase for phase, _key in pairs]
        self._phased = [key for _phase, key in pairs]

    def _phase_of(self, key: tuple) -> int:
        """A partition's refresh phase (phase_of in metrics_interval_ms)."""
        phase = self._phase.get(key)
        if phase is None:
            phase = phase_of(key, self.metrics_interval_ms)
        return phase

    def refresh_due(self, key: tuple, began: int, now: int) -> bool:
        """Whether a quiet partition's state is due at the metrics: once per
        `metrics_interval_ms` of watermark, when the watermark passes (from `began`
        to `now`) the partition's own instant in the interval (phase_of),
        so the quiet partitions of a bucket are spread over the batches of
        an interval."""
        if now <= began:
            return False
        return next_instant(began + 1, self._phase_of(key), self.metrics_interval_ms) <= now

    def busy_due(self, key: tuple, began: int, now: int) -> bool:
        """Whether a busy partition's state (its health as last sent, its
        offsets, lags or times moved) is due at the metrics: once per
        `busy_interval_ms` of watermark, at its own instant in that interval
        (phase_of), as `refresh_due` for the quiet ones."""
        if now <= began:
            return False
        return next_instant(began + 1, self._busy_phase_of(key), self.busy_interval_ms) <= now

    def _busy_phase_of(self, key: tuple) -> int:
        """A busy partition's phase (phase_of in busy_interval_ms), kept."""
        phase = self._busy_phase.get(key)
        if phase is None:
            phase = self._busy_phase[key] = phase_of(key, self.busy_interval_ms)
        return phase

    def due(self, models_of, now: int, flush: bool = False, current=None) -> list:
        """The models whose partition_state goes out now (`models_of(key)`:
        a partition's model under each policy, as it stands), in partition
        order; `flush`: every pending one. `current(m)`: the model brought up
        to date (its session's pending fetches: engine.current), done only
        for the models that go out; their membership is the same either way
        (a fetch left pending moves only its follower's times:
        SessionDriver.is_steady).

        Only the pending partitions whose interval has ended (the index) and
        those whose membership may have moved since the last `due` are looked
        at: a pending partition not sent has the membership it was last sent
        with (else it would have gone out), and only an ISR change, a broker
        event or an event that PartitionModel.membership_may_move names can
        move it (`moved`, or `_moving` since), not every event or fetch that
        reaches it."""
        indexed = not flush and self.interval_ms > 0 and self._indexed
        if not indexed:
            keys = sorted(self.pending)
        else:
            self._index_new(models_of)
            due = self._time_due(now)
            due.update((self.moved | self._moving) & self.pending)
            back = self._overdue & self.pending
            if back:
                self._overdue -= back
                due |= back
            keys = sorted(due)
        out: list = []
        pending, due_at, interval = self.pending, self._due_at, self.interval_ms
        for key in keys:
            models = list(models_of(key))
            latest = {(m.rules.policy, *key): membership(m) for m in models}
            end = None  # its next interval's end, where _due knows it
            if flush or interval <= 0:
                start = now
            else:
                when = self._due(key, latest, now)
                if when is None:
                    continue
                start, end = when
            pending.discard(key)
            if indexed:  # indexed at once at its next interval's end (as _index_new)
                self._place(key, self._interval_end(key, start) if end is None else end)
            else:
                due_at.pop(key, None)
            for k, members in latest.items():
                self.sent[k] = [start, members]
                self.sent_changed.add(k)
            out.extend(models if current is None else map(current, models))
        if flush:
            self._clear_index()
        elif not self._indexed:  # every pending one was looked at: index those left
            self._clear_index()
            self._unindexed = list(pending)
            self._index_new(models_of)
            self._indexed = True
        return out

    def _index_new(self, models_of) -> None:
        """Index the partitions pending since the last `due` at the watermark
        their interval ends at (`_due`): their instant at or after the
        earliest of their policies' last sends plus `interval_ms`, NEVER if
        one of their models was never sent."""
        sent, pending = self.sent, self.pending
        due_at, overdue = self._due_at, self._overdue
        for key in self._unindexed:
            if key not in pending or key in due_at or key in overdue:
                continue
            start = None
            for m in models_of(key):
                last = sent.get((m.rules.policy, *key))
                if last is None:
                    start = NEVER
                    break
                if start is None or last[0] < start:
                    start = last[0]
            if start is None or start == NEVER:
                self._place(key, NEVER)
            else:
                self._place(key, self._interval_end(key, start))
        self._unindexed = []

    def _interval_end(self, key: tuple, start: int) -> int:
        """The watermark at which partition `key`, last sent at `start`, is
        due again: its instant (phase_of) at or after one interval on."""
        interval = self.interval_ms
        return next_instant(start + interval, phase_of(key, interval), interval)

    def _place(self, key: tuple, at: int) -> None:
        self._due_at[key] = at
        keys = self._by_due.get(at)
        if keys is None:
            self._by_due[at] = [key]
            heapq.heappush(self._due_heap, at)
        else:
            keys.append(key)

    def _time_due(self, now: int) -> set:
        """The pending partitions whose interval has ended by `now`, out of
        the index (an entry of a partition sent since, or indexed anew, no
        longer counts); those not pending go to `_overdue`."""
        heap, by_due, due_at, pending = self._due_heap, self._by_due, self._due_at, self.pending
        out = set()
        while heap and heap[0] <= now:
            at = heapq.heappop(heap)
            for key in by_due.pop(at):
                if due_at.get(key) == at:
                    if key in pending:
                        out.add(key)
                    else:
                        del due_at[key]
                        self._overdue.add(key)
        return out

    def _restored(self) -> None:
        """The pending set and `sent` came from a saved state: the next `due`
        looks at every pending partition and indexes them again, and the
        metrics look at every touched one (models changed elsewhere)."""
        self._clear_index()
        self._indexed = False
        self.quiet_keys.clear()
        self._waiting_unsure = True

    def _clear_index(self) -> None:
        self._overdue.clear()
        self._due_at.clear()
        self._by_due.clear()
        self._due_heap.clear()
        self._unindexed = []

    def _due(self, key: tuple, latest: dict, now: int):
        """Whether partition `key`'s record goes out at `now` (`latest`: its
        membership under each policy), as the watermark its next interval
        counts from (`sent`) and that interval's end where known here (else
        None: `_interval_end`), or None. At once (from `now`) when a policy's
        model was never sent or its membership differs from its last
        record's. On time when the watermark reached the partition's instant
        (phase_of) at or after `interval_ms` since a policy's last record:
        counted from its latest instant, at or before `now`, so one that
        stays pending goes out once per interval, each time in the batch
        that reaches its next instant, whatever the batches (from `now`, a
        batch ending past the instant would put the next one two intervals
        on)."""
        sent, interval = self.sent, self.interval_ms
        start = None
        for k, members in latest.items():
            last = sent.get(k)
            if last is None or last[1] != members:
                return now, None
            if start is None or last[0] < start:
                start = last[0]
        if start is None:
            return None
        phase = phase_of(key, interval)
        if now < next_instant(start + interval, phase, interval):
            return None
        # Counted from an instant of its own, its next interval ends one
        # interval on (_interval_end's, without phase_of's crc32 again).
        start = now - (now + phase) % interval
        return start, start + interval

    def all_sent(self, models: Iterable, now: int) -> None:
        """Every model's state went out (the end of a bounded input)."""
        self.pending.clear()
        self._clear_index()
        for m in models:
            key = (m.rules.policy, *m.key)
            self.sent[key] = [now, membership(m)]
            self.sent_changed.add(key)

    def to_state(self) -> list:
        self._pending_saved = set(self.pending)
        return [sorted(self.pending), [[*k, *v] for k, v in sorted(self.sent.items())]]

    def from_state(self, state: list) -> None:
        pending, sent = state
        self.pending = {tuple(k) for k in pending}
        self._pending_saved = set(self.pending)
        self.sent = {tuple(row[:4]): [row[4], row[5]] for row in sent}
        self._restored()

    def state_delta(self) -> dict:
        """The changes since the last call (or the last to_state): the
        partitions that became pending and those no longer pending, and the
        `sent` entries changed. Not every pending one (nearly every
        partition, each fetched every batch): sorting and writing those cost
        ~25 ms a bucket call at 50 k partitions a bucket, whatever the
        batch held (issue 23, branch `callfix`)."""
        changed, self.sent_changed = self.sent_changed, set()
        sent, pending, saved = self.sent, self.pending, self._pending_saved
        self._pending_saved = set(pending)
        return {"pending_added": sorted(pending - saved),
                "pending_removed": sorted(saved - pending),
                "sent": [[*k, *sent[k]] for k in sorted(changed)]}

    def clear_state_delta(self) -> None:
        self.sent_changed = set()
        self._pending_saved = set(self.pending)

    def apply_state_delta(self, delta) -> None:
        """A state_delta; or one of engine state version 3 or 4, a list:
        [every pending partition, the `sent` entries changed]."""
        if isinstance(delta, dict):
            self.pending.difference_update([tuple(k) for k in delta["pending_removed"]])
            self.pending.update([tuple(k) for k in delta["pending_added"]])
            sent = delta["sent"]
        else:
            pending, sent = delta
            self.pending = {tuple(k) for k in pending}
        for row in sent:
            self.sent[tuple(row[:4])] = [row[4], row[5]]
        self._pending_saved = set(self.pending)
        self._restored()
