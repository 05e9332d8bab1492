"""Session-shaped fetches (`fetch_session`), exact and lazy (docs/rules.md,
"Fetch sessions").

A session fetch is, by definition, one per-partition `fetch` for every
partition the session caches: the listed ones at the offsets they list, the
others at the offset the session holds, all at the session's time. The
partitions it lists are applied at once. The others are only *logged*: each
partition model keeps, per session it belongs to, the position of the first
session fetch it has not applied (`PartitionModel.sessions`), and catches up
(`catch_up`) only when something needs its state: one of its own events, a
check or an alert instant (`LocalEngine._advance`), a broker event, a view.

Catching up is exact without applying every pending fetch. Between two
moments at which something else touches the partition, its leader LEO, HW,
ISR, leader and broker states stand still, and the pending fetches of one
follower all carry the same offset. Applied one after the other, the first
of them moves the follower (its LEO, `lastFetchLeaderLogEndOffset`, an ISR
expansion), and each later one only moves its `lastFetchTimeMs` and, where the
policy credits it, its `lastCaughtUpTimeMs` (rules.caught_up_ts_after_fetch):
the state after fetch j is the state after the first one and then fetch j.
So the first pending fetch is applied (unless it too only moves times, as
the state stands then: `_folds`), then only the last one before each
instant at which a check or an alert could act (`_next_instant`), or before
another follower's exact fetch. Later fetches only postpone those instants
(they raise the follower's times), so a candidate instant found with the
follower behind is never too late: the follower is moved up to it and the
instant computed again. An ISR change, an ignored fetch or a listener that
wants every fetch (an alert pending or firing) makes the next fetch exact
again. A fetch that changes the broker epoch, took long to serve, or comes
after a gap longer than the leader-stall bound (isr/model/stall.py) brings
every partition of its session up to date first, so it is applied exactly;
the fetches skipped still count as the leader's activity. A fetch is applied
as its values (`LocalEngine.apply_fetch`, the listeners' `on_fetch`), not as
a built and validated `fetch` event, unless a listener wants the event.
"""

from __future__ import annotations

from sys import intern
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence

from isr.contract.fast import STRUCTS
from isr.model.brokers import Brokers
from isr.model.partition import PartitionModel
from isr.model.session import FINAL_EPOCH, Session, Sessions, next_epoch
from isr.model.stall import stall_bound_ms

if TYPE_CHECKING:  # (local.py imports this module)
    from isr.engine.local import LocalEngine

_FETCH = STRUCTS["fetch"]
REJECTED_IN_SESSION = "session_partition_rejected"
INF = 2**63


def expanded_fetch(cluster: str, session: Session | _Sessionless, topic: str, partition: int,
                   leader_epoch: int, fetch_offset: int, leader_leo: Optional[int],
                   model_leo: int, entry: tuple):
    """The per-partition fetch a session fetch means for one partition. The
    leader's LEO, when the request does not say, is the leader's own at that
    moment: at least the offset the follower fetched from (a leader answers
    a fetch beyond its LEO with OFFSET_OUT_OF_RANGE)."""
    ts, fetch_ts, broker_epoch, _order = entry
    if leader_leo is None:
        leader_leo = model_leo if model_leo > fetch_offset else fetch_offset
    return _FETCH(v=1, cluster=cluster, ts=ts, topic=topic, partition=partition,
                  leader=session.leader, leader_epoch=leader_epoch, replica=session.replica,
                  fetch_offset=fetch_offset, leader_leo=leader_leo,
                  received_ts=None if fetch_ts == ts else fetch_ts,
                  broker_epoch=None if broker_epoch == -2 else broker_epoch)


class SessionDriver:
    """The engine's side of fetch sessions: the Sessions bookkeeping and the
    catching up of partition models."""

    # LocalEngine.close drops the engine (mypyc: a compiled class deletes
    # only the attributes it names here).
    __deletable__ = ["engine"]

    # A session's log is cut (every partition it caches caught up, its
    # fetches dropped) once it holds more than cut_factor x cached + cut_slack
    # fetches. Where it is cut changes no decision (a catch-up is exact at
    # any moment: tests/test_sessions.py cuts after every fetch); a cut
    # catches up every quiet partition of the session (a fold and a jump
    # per follower), so a longer log makes that rarer, for memory (the
    # log's entries) and, in the Spark job, state-log bytes (a changed
    # session is written whole). `isr replay` takes a longer one
    # (pipeline/local.py, REPLAY_LOG_CUT_FACTOR; docs/benchmarks.md, issue 23,
    # branch `pendmark`).
    cut_factor = 2
    cut_slack = 64

    def __init__(self, engine: LocalEngine) -> None:
        self.engine = engine
        self.sessions = Sessions()
        self.exact_fetches = 0  # unlisted partitions' fetches applied (a statistic, not state)
        self.stall_bound_ms = stall_bound_ms(engine.rules[engine.policies[0]])
        # Whether this engine counts a request's session anomaly. An engine
        # that holds only some partitions (a Spark bucket) still sees every
        # session request, so every bucket meets the anomaly and handles it
        # alike; only one of them counts it (stream/operator.py).
        self.counts_anomaly: Callable[[Any], bool] = _always
        # Per session serial, its last fetch, also once its log is truncated
        # (for the deadline index; not state: unknown after a restore).
        self.last: dict[int, tuple] = {}
        # Sessions changed since the last take_changes (the Spark job's state
        # log), by serial; a closed one is found missing from the live ones.
        # What changed in each: Session.saved_end, Session.changed.
        self.dirty: set[int] = set()

    def take_changes(self) -> tuple[list, list]:
        """The sessions changed since the last call (or forget_changes), in
        serial order: those opened since, or that forgot a partition since,
        whole (`Session.to_list`); the others as what changed in them
        (`Session.to_patch`: the fetches logged, the cached entries set)."""
        by_sid = self.sessions.by_sid
        whole, patches = [], []
        for sid in sorted(self.dirty):
            s = by_sid.get(sid)
            if s is not None:
                if s.saved_end < 0:
                    whole.append(s.to_list())
                else:
                    patches.append(s.to_patch())
                s.saved()
        self.dirty = set()
        return whole, patches

    def forget_changes(self) -> None:
        """The sessions as they stand are saved (or need not be)."""
        by_sid = self.sessions.by_sid
        for sid in self.dirty:
            s = by_sid.get(sid)
            if s is not None:
                s.saved()
        self.dirty = set()

    # ------------------------------------------------------------ one event
    def apply(self, ev) -> Optional[tuple[str, str]]:
        """Apply a fetch_session event: its listed partitions now, the others lazily."""
        S = self.sessions
        S.order += 1
        ts, received_ts, broker_epoch = ev.ts, ev.received_ts, ev.broker_epoch
        entry = (ts, ts if received_ts is None else received_ts,  # (ev.fetch_ts, inline)
                 -2 if broker_epoch is None else broker_epoch, S.order)
        session, replaced, anomaly = S.resolve(ev)
        if anomaly is not None and self.counts_anomaly(ev):
            S.anomalies[anomaly] += 1
        if replaced is not None:
            self.close(replaced)
        if session is not None:
            self.dirty.add(session.sid)
        if ev.session_epoch == FINAL_EPOCH:
            session = None  # sessionless: it fetches what it lists, nothing is kept
        elif session is None:
            session = S.open(ev.cluster, ev.leader, ev.replica, ev.session_id)
            self.dirty.add(session.sid)
            session.epoch = next_epoch(ev.session_epoch)
            hard = True  # no previous fetch
        else:
            if session.session_id != ev.session_id:
                S.bind(session, ev.session_id)
            session.epoch = next_epoch(ev.session_epoch)
            for p in ev.forgotten:
                self._forget(session, (p.topic, p.partition))
            # (`last` holds the log's last entry, also once the log is cut.)
            hard = self._is_hard(self.last.get(session.sid), entry)
            if hard and session.log:
                self.catch_up_session(session)
        first_problem = None
        listed: list = []  # the first policy's model of each listed partition (None: new)
        for p in ev.partitions:
            problem = self._apply_listed(ev, session, p, entry, listed)
            if problem is not None and first_problem is None:
                first_problem = problem
        if session is not None:
            if hard:
                # Pending for every partition it does not list, and to be
                # applied exactly: they must be visited (deadlines.py).
                self._touch_session(session)
            session.add(entry)
            end = session.end
            self.last[session.sid] = entry
            for hook in self.engine._on_session_fetch:
                hook(session, entry[0])
            parts, dirty = self.engine.partitions, self.engine.dirty
            touch = self.engine.deadlines.touch
            sid, cluster, single = session.sid, ev.cluster, len(parts) == 1
            for p, first in zip(ev.partitions, listed):
                if first is None or not single:
                    key = (cluster, p.topic, p.partition)
                    linked: Sequence[Any] = [models[key] for models in parts.values()]
                else:
                    linked = (first,)
                for m in linked:
                    link = m.sessions.get(sid)
                    if link is None:
                        m.sessions[sid] = [session.replica, end]
                    else:
                        link[1] = end
                    if not m.due_dirty:
                        touch(m)  # a new link: its pending fetches may differ
                    dirty[id(m)] = m
            if len(session.log) > self.cut_factor * len(session.cached) + self.cut_slack:
                self.catch_up_session(session)
                session.truncate()
        return first_problem

    def _apply_listed(self, ev, session: Optional[Session], p, entry: tuple, listed: list):
        key = (ev.cluster, p.topic, p.partition)
        engine = self.engine
        partitions = engine.partitions
        first = partitions[engine.policies[0]].get(key)
        # The partition's pending fetches first, at the old offset (apply's catch_up).
        if (first is not None and engine.fetch_values  # expanded_fetch's, as values
                and (len(partitions) == 1
                     or all(key in parts for parts in partitions.values()))):
            ts, fetch_ts, broker_epoch, _order = entry
            leader_leo, offset = p.leader_leo, p.fetch_offset
            if leader_leo is None:
                leader_leo = first.leader_leo if first.leader_leo > offset else offset
            result = engine.apply_fetch_values(
                key, first, ev.replica, ev.leader, p.leader_epoch, ts, fetch_ts, offset, leader_leo,
                -1 if broker_epoch == -2 else broker_epoch)
            status = None if result is None else result[0]
        else:  # a partition seen first, or a listener that wants the event
            fetch = expanded_fetch(ev.cluster, session or _Sessionless(ev), p.topic,
                                   p.partition, p.leader_epoch, p.fetch_offset, p.leader_leo,
                                   -1 if first is None else first.leader_leo, entry)
            status = engine.apply(fetch).status
        if session is not None:
            cached = session.cached
            tp = (p.topic, p.partition)
            if tp not in cached:  # new to the session: keyed by the model's
                tp = _cache_key(first, tp)  # names, not the event's copies
            # Replaced, never changed: a tuple; noted for the state log's patch.
            cached[tp] = session.changed[tp] = (p.leader_epoch, p.fetch_offset)
        listed.append(first)
        if status == "rejected":
            engine.ignored[REJECTED_IN_SESSION] += 1
            return ("ignored", REJECTED_IN_SESSION)
        return None

    def _is_hard(self, previous: Optional[tuple], entry: tuple) -> bool:
        """A fetch that must be applied exactly for every partition: another
        broker epoch than the session's previous fetch, one that arrived
        before it, or one a listener would see as slow (the previous fetch
        unknown: taken as such). Skipping the fetches between two of a
        follower's is exact only while their times do not go back: a
        follower's lastCaughtUpTimeMs is the largest it was credited, and
        the last fetch's time is that largest only then."""
        if previous is None or entry[2] != previous[2] or entry[1] < previous[1]:
            return True
        if entry[0] - previous[0] > self.stall_bound_ms:
            return True  # the leader may have stalled (isr/model/stall.py)
        bound = self.engine.quiet_serve_ms
        return bound is not None and entry[0] - entry[1] > bound

    def _forget(self, session: Session, tp: tuple[str, int]) -> None:
        """The follower forgets a partition: it applies its pending fetches first."""
        if tp not in session.cached:
            return
        key = (session.cluster, *tp)
        for models in self.engine.partitions.values():
            m = models.get(key)
            if m is not None and session.sid in m.sessions:
                self.catch_up(m)
                del m.sessions[session.sid]
                self._unlinked(m)
        del session.cached[tp]
        self.dirty.add(session.sid)
        session.saved_end = -1  # a patch only sets entries: saved whole next time

    def close(self, session: Session) -> None:
        """A session ends (replaced by a new full one): every partition applies
        its fetches first."""
        self.catch_up_session(session)
        for tp in session.cached:
            key = (session.cluster, *tp)
            for models in self.engine.partitions.values():
                m = models.get(key)
                if m is not None and m.sessions.pop(session.sid, None) is not None:
                    self._unlinked(m)
        self.sessions.close(session)
        self.last.pop(session.sid, None)

    def _unlinked(self, m: PartitionModel) -> None:
        """`m` lost a session's link: re-indexed, changed, and the listeners told."""
        self.engine.deadlines.touch(m)
        self.engine.dirty[id(m)] = m
        for hook in self.engine._on_unlink:
            hook(m)

    def _touch_session(self, session: Session) -> None:
        touch = self.engine.deadlines.touch
        for tp in session.cached:
            key = (session.cluster, *tp)
            for models in self.engine.partitions.values():
                m = models.get(key)
                if m is not None:
                    touch(m)

    def catch_up_session(self, session: Session) -> None:
        for tp in session.cached:
            key = (session.cluster, *tp)
            for models in self.engine.partitions.values():
                m = models.get(key)
                if m is not None and m.sessions:
                    self.catch_up(m)

    # ------------------------------------------------------------ catching up
    def catch_up(self, m: PartitionModel) -> None:
        """Apply the session fetches `m` has not applied yet (exactly, see the
        module's docstring). `m.sessions[sid] = [replica, position]`."""
        by_sid = self.sessions.by_sid
        # [session, link, exact, held]: exact while the next fetch must be
        # applied as is; held, the (leader_epoch, fetch_offset) its session
        # holds for this partition (None: forgotten), looked up once: it does
        # not change while catching up (only a listed fetch or a forget
        # changes it).
        streams: Optional[list[list[Any]]] = None
        for sid, link in m.sessions.items():
            session = by_sid[sid]
            if link[1] < session.end:
                if streams is None:
                    tp = (m.topic, m.partition)
                    streams = [[session, link, True, session.cached.get(tp)]]
                else:
                    streams.append([session, link, True, session.cached.get(tp)])
        if streams is None:
            return  # nothing pending (the common case: a listed or busy partition)
        engine = self.engine
        if engine.reached >= 0:
            engine._settle(m)  # the checks the deadline index let it skip
        brokers = engine.brokers.get(m.cluster) or engine._brokers_of(m.cluster)
        last_run = -1  # the last instant run: one found again is not run twice
        if self._fold_all(m, streams, brokers):
            return  # the common case, as the loop below takes it
        # The model's next instant (`instant`), found again only once
        # something was applied or run: a fold (a stream turned steady)
        # changes nothing it reads.
        instant: Optional[int] = None
        known = False
        while True:
            # The streams with a fetch pending (live), those whose next one is
            # not exact (steady), and the exact one whose next fetch comes
            # first (nxt, at t_next, o_next); orders are unique.
            live, steady = [], []
            nxt, t_next, o_next = None, INF, INF
            for st in streams:
                session, pos = st[0], st[1][1]
                if pos < session.end:
                    live.append(st)
                    if not st[2]:
                        steady.append(st)
                    else:
                        e = session.log[pos - session.base]
                        if e[3] < o_next:
                            nxt, t_next, o_next = st, e[0], e[3]
            if not live:
                return
            if not known:
                instant, known = engine.next_instant(m), True
            if instant is not None and last_run < instant < t_next:
                known = False
                if self._jump(m, steady, instant, o_next, brokers):
                    continue  # the followers moved: the instant may have too
                seq, last_run = m.seq, instant
                engine._advance_model(m, instant, True, brokers)
                if m.seq != seq:  # an ISR change: every follower's next fetch is exact
                    for st in live:
                        st[2] = True
                continue
            if nxt is not None and self._at_leo(m, steady) and self._folds(m, nxt, brokers):
                # Its next fetch only moves times (and so do the steady
                # ones': they need not be moved up to it first): it joins
                # the next jump. A fold changes nothing but `nxt`'s flag:
                # no position moves (`live` stands) and nothing
                # next_instant reads (`instant` stands), so the next exact
                # stream is found here, not by going round the whole loop
                # (the common case: both followers of an appended
                # partition fold, one after the other).
                while True:
                    nxt[2] = False
                    steady.append(nxt)
                    nxt, t_next, o_next = None, INF, INF
                    for st in live:
                        if st[2]:
                            session = st[0]
                            e = session.log[st[1][1] - session.base]
                            if e[3] < o_next:
                                nxt, t_next, o_next = st, e[0], e[3]
                    if (nxt is None or (instant is not None and last_run < instant < t_next)
                            or not self._folds(m, nxt, brokers)):
                        break
                    # (_at_leo(m, steady) still holds: the stream that
                    # joined `steady` folded, so its follower is at the LEO.)
                if instant is not None and last_run < instant < t_next:
                    continue  # the instant comes first (the loop's first test)
            if steady and self._jump(m, steady, t_next, o_next, brokers):
                known = False
            if nxt is None:
                return
            if self._folds(m, nxt, brokers):
                nxt[2] = False  # its next fetch only moves times: it joins the next jump
                continue
            known = False
            self._apply_entry(m, nxt, nxt[1][1], brokers)

    def _fold_all(self, m: PartitionModel, streams: list, brokers: Brokers) -> bool:
        """The loop of catch_up in its common case, taken without its
        general steps: every stream's first pending fetch folds (in their
        order) and none of the pending fetches comes after the model's next
        instant. The loop then folds each stream in turn (the instant never
        comes before the next one's fetch, so it never breaks off), and the
        jump that follows (to the instant, or to the end if there is none)
        applies each stream's last pending fetch, in their order; then
        nothing is pending and it returns. True if so (done), False if not
        (nothing applied: the loop takes it)."""
        order = _by_next_order(streams)
        latest = -1  # the last pending fetch's ts
        for st in order:
            ts = st[0].log[-1][0]  # (the log holds the positions up to session.end)
            if ts > latest:
                latest = ts
        engine = self.engine
        if engine.before_next_instant(m) < latest:
            instant = engine.next_instant(m)
            if instant is not None and latest > instant:
                return False
        for st in order:
            if not self._folds(m, st, brokers):
                return False
        # Each stream's last pending fetch, as _apply_entry applies it (the
        # stream's flag is not read again: catch_up returns). Of a stream
        # that folded, apply_folded_fetch tests only what _folds could not
        # know of the last fetch, where apply_times_fetch tested all of it
        # again (issue 23, branch `catchup`); where that fails, _apply_entry
        # takes the fetch.
        engine.dirty[id(m)] = m  # (as _apply_entry marks it: once for every stream)
        fetch_values = engine.fetch_values
        for st in order:
            session, link = st[0], st[1]
            pos = session.end - 1
            log, replica = session.log, session.replica
            ts, fetch_ts, epoch, _order = log[-1]  # (at pos: the log ends at session.end)
            # (the fetches skipped showed the leader running until the one before)
            skipped_ts = log[-2][0] if pos > link[1] else -1
            if fetch_values and engine.apply_folded_fetch(
                    m, m.followers[replica], replica, ts, fetch_ts, -1 if epoch == -2 else epoch,
                    skipped_ts):
                link[1] = pos + 1
                self.exact_fetches += 1
            else:
                self._apply_entry(m, st, pos, brokers)
        return True

    @staticmethod
    def _at_leo(m: PartitionModel, steady: list) -> bool:
        """Whether every steady stream's follower is at the leader's LEO: its
        fetches then change nothing a fold (`_folds`) reads but the leader's
        activity, which only makes a fold likelier (no lag starts or ends,
        and a listener's instant they reach is found by `_folds` as due)."""
        followers, leader_leo = m.followers, m.leader_leo
        for st in steady:
            f = followers.get(st[0].replica)
            if f is None or f.leo != leader_leo:
                return False
        return True

    def is_steady(self, m: PartitionModel) -> bool:
        """Whether every fetch `m`'s sessions may log for it, until something
        else touches it, can only move a follower's times: the follower is at
        the offset its session holds (no LEO, leader LEO or HW change), in the
        ISR or too far behind to join it (no expansion); the fetch is of the
        current leader and epoch and not stale (nothing ignored); no KIP-501
        fetch is pending, no leader stall awaits confirmation, and no
        listener wants every fetch. Then catching up can wait for the model's
        next instant (deadlines.py): those fetches only put it off. A fetch
        of another broker epoch or after a gap is applied at once for every
        partition of its session anyway (`_is_hard`)."""
        engine = self.engine
        if m.leader < 0 or m.stall_check_at >= 0 or not engine.skips_quiet_fetches(m):
            return False  # a fetch may be ignored, confirm a stall, or be heard
        by_sid, tp = self.sessions.by_sid, (m.topic, m.partition)
        brokers = engine.brokers.get(m.cluster)
        newest = -1 if brokers is None else brokers.newest_epoch
        bound, gap = engine.quiet_serve_ms, self.stall_bound_ms
        for sid, link in m.sessions.items():
            session = by_sid.get(sid)
            if session is None:
                return False
            held = session.cached.get(tp)
            if held is None:
                continue  # its fetches are not this partition's
            replica = link[0]
            f = m.followers.get(replica)
            if (f is None or session.leader != m.leader or held[0] != m.leader_epoch
                    or f.leo != held[1] or held[1] > m.leader_leo or f.pending_offset >= 0):
                return False
            if replica not in m.isr and f.leo >= m.hw and f.leo >= m.leader_epoch_start_offset:
                return False  # it may join the ISR (_can_join_isr)
            if link[1] < session.end:
                # The first pending fetch (a later one of another broker
                # epoch, slow or after a gap made every partition catch up
                # first: apply's `_is_hard`): one of its own?
                ts, fetch_ts, epoch, _order = session.entry(link[1])
                epoch = -1 if epoch == -2 else epoch
                if (epoch != f.broker_epoch or (bound is not None and ts - fetch_ts > bound)
                        or (m.leader_active_ts >= 0 and ts - m.leader_active_ts > gap)):
                    return False
            else:
                epoch = f.broker_epoch
            if epoch < newest and brokers is not None and brokers.is_stale_fetch(replica, epoch):
                return False  # (brokers None: newest is -1, no epoch is below it)
        return True

    def _folds(self, m: PartitionModel, st: list, brokers: Brokers) -> bool:
        """Whether the next pending fetch of stream `st`, applied now, would
        only move its follower's times, as the fetches after an exact one do:
        the follower is in the ISR at the leader's LEO, which its session
        holds (no LEO, leader LEO, HW or ISR change, no lag), and saw that LEO
        in a fetch; the fetch is of the current leader, epoch and broker
        epoch, not stale, served in time, without a gap that could start a
        stall suspicion (none pending, no KIP-501 fetch pending); and every
        listener may miss it. Then it need not be applied on its own: the
        stream turns steady, and the next jump applies the last of its
        fetches before the next instant, as after an exact fetch."""
        session, link, _exact, held = st
        leader_leo = m.leader_leo
        if (held is None or m.leader < 0 or m.stall_check_at >= 0 or held[1] != leader_leo
                or session.leader != m.leader or held[0] != m.leader_epoch):
            return False
        replica = session.replica
        f = m.followers.get(replica)
        if (f is None or f.leo != leader_leo or f.last_fetch_leader_leo < leader_leo
                or f.pending_offset >= 0 or f.pending_ts != 0 or replica not in m.isr):
            return False
        ts, fetch_ts, epoch, _order = session.log[link[1] - session.base]
        if epoch == -2:
            epoch = -1
        if epoch != f.broker_epoch or (epoch < brokers.newest_epoch
                                       and brokers.is_stale_fetch(replica, epoch)):
            return False
        last = m.leader_active_ts
        if last >= 0 and ts - last > self.stall_bound_ms:
            return False  # it may start a stall suspicion (isr/model/stall.py)
        engine = self.engine
        bound = engine.quiet_serve_ms
        if bound is not None and ts - fetch_ts > bound:
            return False
        for skips in engine._skips_fetch:
            if not skips(m, replica, ts):
                return False
        return True

    def _jump(self, m: PartitionModel, steady: list, ts: int, order: int, brokers: Brokers) -> bool:
        """Move each steady follower to its last pending fetch at or before
        `ts` and before `order`; True if one moved."""
        moved = False
        for st in _by_next_order(steady):
            session, link = st[0], st[1]
            j = session.last_at_or_before(link[1], session.end, ts, order)
            if j >= link[1]:
                self._apply_entry(m, st, j, brokers)
                moved = True
        return moved

    def _apply_entry(self, m: PartitionModel, st: list, pos: int, brokers: Brokers) -> None:
        """Apply the session fetch at `pos` to `m` (those before it, back to
        the follower's position, are skipped: see the module's docstring)."""
        session, link, _exact, held = st
        engine = self.engine
        skipped_from = link[1]
        link[1] = pos + 1
        engine.dirty[id(m)] = m
        if held is None:
            return
        self.exact_fetches += 1
        leader_epoch, fetch_offset = held
        log, base = session.log, session.base
        if pos > skipped_from:  # the fetches skipped showed the leader running
            m.note_skipped_activity(session.leader, leader_epoch, log[pos - 1 - base][0])
        if engine.fetch_values:  # the fetch as its values: expanded_fetch's, without the event
            ts, fetch_ts, broker_epoch, _order = log[pos - base]
            leader_leo = m.leader_leo
            if leader_leo < fetch_offset:
                leader_leo = fetch_offset
            if broker_epoch == -2:
                broker_epoch = -1
            # Most fetches caught up only move times (the jumps): applied as such.
            if engine.apply_times_fetch(m, session.replica, session.leader, leader_epoch, ts,
                                        fetch_ts, fetch_offset, leader_leo, broker_epoch, brokers):
                result = None
            else:
                result = engine.apply_fetch(
                    m, session.replica, session.leader, leader_epoch, ts, fetch_ts, fetch_offset,
                    leader_leo, broker_epoch, brokers)
        else:
            fetch = expanded_fetch(m.cluster, session, m.topic, m.partition, leader_epoch,
                                   fetch_offset, None, m.leader_leo, session.entry(pos))
            result = engine._apply_to_model(m, fetch, brokers, False)
        if result is not None and m.rules.policy == engine.policies[0]:
            engine.ignored[result[1] if result[0] == "ignored" else REJECTED_IN_SESSION] += 1
        if result is not None:
            st[2] = True
            return
        for skips in engine._skips:  # engine.skips_quiet_fetches, inline
            if not skips(m):
                st[2] = True
                return
        st[2] = False

    # ------------------------------------------------------------ state
    def to_list(self) -> list:
        return self.sessions.to_list()

    def from_list(self, values: list, columns: bool = True) -> None:
        self.sessions = Sessions.from_list(values, columns)
        self.last = {s.sid: s.log[-1] for s in self.sessions.by_sid.values() if s.log}


def _by_next_order(streams):
    """Streams in the order of their next pending fetch. Two (a partition's
    followers at RF 3) is the common case, compared without a sort."""
    if len(streams) == 2:
        a, b = streams
        sa, sb = a[0], b[0]
        if sb.log[b[1][1] - sb.base][3] < sa.log[a[1][1] - sa.base][3]:
            return (b, a)
        return streams
    return sorted(streams, key=_next_order) if len(streams) > 2 else streams


def _next_order(st: list) -> int:
    """The order of a stream's next pending fetch."""
    session, pos = st[0], st[1][1]
    return session.log[pos - session.base][3]


def _cache_key(model, tp: tuple[str, int]) -> tuple[str, int]:
    """A session's cache key for partition `tp` sharing its model's topic
    name and partition number (interned: PartitionModel), or the name
    interned when the model is not known here."""
    if model is not None:
        return (model.topic, model.partition)
    return (intern(tp[0]), tp[1])


def _always(_ev) -> bool:
    return True


class _Sessionless:
    """What expanded_fetch reads of a session, for a FINAL_EPOCH request."""

    def __init__(self, ev) -> None:
        self.leader, self.replica = ev.leader, ev.replica
