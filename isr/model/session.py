"""A leader/follower fetch session as the leader holds it (KIP-227; docs/rules.md,
"Fetch sessions"). Pure bookkeeping: which partitions the session caches at
which fetch offset, and the times of its fetches. What a fetch does to each
partition is the partition model's business (isr/engine/sessions.py drives it).

Kafka's leader (core/src/main/scala/kafka/server/FetchSession.scala, trunk
1eb7644349cb, `FetchManager.newContext`):
- a full request (session epoch 0) opens a new session caching exactly the
  partitions it lists; epoch -1 (FINAL_EPOCH) fetches them without a session;
- an incremental request names its session id and the epoch the leader
  expects; it may add partitions, update their fetch offsets and forget some
  (`FetchSession.update`);
- an unknown session id (FETCH_SESSION_ID_NOT_FOUND) or another epoch
  (INVALID_FETCH_SESSION_EPOCH) is refused, and the follower then starts a new
  full session (clients' FetchSessionHandler.handleError).
- every fetch evaluates every cached partition (`IncrementalFetchContext.
  foreachPartition`), listed or not.

Seen from a request log those refusals mean the monitor missed a request (it
started mid-session, or lost one): the request is taken as the start of a new
session caching what it lists, and the anomaly is counted (`Sessions.anomalies`).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import Counter
from itertools import accumulate
from operator import add, itemgetter, sub
from sys import intern
from typing import Optional

INITIAL_EPOCH, FINAL_EPOCH = 0, -1
_ts, _order = itemgetter(0), itemgetter(3)  # a log entry's time and order
MAX_EPOCH = 2**31 - 1
UNKNOWN_SESSION = "unknown_session"
SKIPPED_EPOCH = "session_epoch_skipped"


def next_epoch(epoch: int) -> int:
    """Kafka's FetchMetadata.nextEpoch."""
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch == MAX_EPOCH else epoch + 1


def log_columns(log: list) -> list:
    """A session log's entries as four columns (time, time minus fetch time,
    broker epoch, order), each as its first value and then differences: a
    session fetches every few hundred ms and the engine orders session
    events one after another, so the differences are short and alike, where
    the entries themselves (four 13-digit and 6-digit numbers each) were
    most of a bucket's compressed snapshot (docs/benchmarks.md, issue 23,
    branch `sessave`). [] for an empty log."""
    if not log:
        return []
    ts, fetch_ts, epochs, orders = zip(*log)
    return [_differences(c) for c in (ts, tuple(map(sub, ts, fetch_ts)), epochs, orders)]


def log_entries(columns: list) -> list[tuple[int, int, int, int]]:
    """The entries `log_columns` wrote."""
    if not columns:
        return []
    sums, lags, epochs, orders = (accumulate(c) for c in columns)
    ts = list(sums)
    return list(zip(ts, map(sub, ts, lags), epochs, orders))


def _entries(cached: dict) -> list:
    """Cached entries as rows `(topic, partition, leader_epoch, fetch_offset)`:
    each key and value tuple joined in C (a session's to_list writes all its
    partitions at every whole snapshot of the Spark job's state)."""
    return list(map(add, cached, cached.values()))


def _differences(column: tuple) -> list[int]:
    return list(map(sub, column, (0, *column[:-1])))


class Session:
    """One session: its cached partitions and the log of its fetches.

    `cached[(topic, partition)] = (leader_epoch, fetch_offset)` (a tuple: it is
    replaced at each listed fetch, never changed, and 16 bytes smaller than a
    list; issue 23). The log holds
    one entry per fetch, `(ts, fetch_ts, broker_epoch, order)`, where `order`
    is the engine's application order of session events; entry i has the
    position `base + i` (positions survive the log's truncation).

    For a state log that saves what changed (the Spark job's, SessionDriver.
    take_changes): `saved_end` is `end` as of the last save (-1: not saved
    since it opened, or since it forgot a partition: saved whole next time),
    and `changed` the cached entries set since then, in the order first set."""

    __slots__ = ("sid", "cluster", "leader", "replica", "session_id", "epoch", "cached",
                 "log", "base", "end", "saved_end", "changed")

    def __init__(self, sid: int, cluster: str, leader: int, replica: int, session_id: int,
                 epoch: int) -> None:
        self.sid = sid
        self.cluster, self.leader, self.replica = cluster, leader, replica
        self.session_id = session_id
        self.epoch = epoch  # the epoch the next incremental request must carry
        self.cached: dict[tuple[str, int], tuple[int, int]] = {}
        self.log: list[tuple[int, int, int, int]] = []
        self.base = 0
        self.end = 0  # the position after the last fetch: base + len(log)
        self.saved_end = -1
        self.changed: dict[tuple[str, int], tuple[int, int]] = {}

    def add(self, entry: tuple[int, int, int, int]) -> None:
        self.log.append(entry)
        self.end += 1

    def entry(self, pos: int) -> tuple[int, int, int, int]:
        return self.log[pos - self.base]

    def last_at_or_before(self, pos: int, end: int, ts: int, order: int) -> int:
        """The last position in [pos, end) with time <= ts and order < order,
        or pos - 1 if none (entries are in order, so a binary search)."""
        log, base = self.log, self.base
        lo, hi = pos - base, end - base
        if hi > lo:
            last = log[hi - 1]
            if last[0] <= ts and last[3] < order:
                return end - 1  # the common case: every pending fetch (a jump to the end)
        cut = bisect_right(log, ts, lo, hi, key=_ts)
        if cut > lo and log[cut - 1][3] >= order:
            cut = bisect_left(log, order, lo, cut, key=_order)
        return base + cut - 1

    def truncate(self) -> None:
        """Forget the fetches every cached partition has caught up with."""
        self.base += len(self.log)
        self.log = []

    def to_list(self) -> list:
        return [self.sid, self.cluster, self.leader, self.replica, self.session_id, self.epoch,
                _entries(self.cached), log_columns(self.log), self.base]

    def to_patch(self) -> list:
        """What changed since the last save, for a reader that holds the
        session as it was then (`apply_patch`): the fetches logged since
        (from `saved_end`, or the log's start if it was cut since) and the
        cached entries set since. Only for a session with `saved_end` >= 0."""
        start = self.saved_end if self.saved_end > self.base else self.base
        return [self.sid, self.session_id, self.epoch, self.base,
                log_columns(self.log[start - self.base:]),
                _entries(self.changed)]

    def apply_patch(self, values: list) -> None:
        """A `to_patch` of this session as it stood at the patch's last save
        (the session id is Sessions' to rebind). Positions before the
        patch's base are dropped (the log was cut); the fetches it lists
        follow those kept, at `max(end, base)`, where its writer started."""
        _sid, _session_id, self.epoch, base, entries, cached = values
        log = self.log[base - self.base:]  # empty if cut past the end
        log.extend(log_entries(entries))
        self.log, self.base, self.end = log, base, base + len(log)
        mine = self.cached
        for t, p, e, o in cached:
            mine[(intern(t), p)] = (e, o)  # a known key keeps its place (and its shared name)
        self.saved()

    def saved(self) -> None:
        """The session as it stands is saved: the next patch starts here."""
        self.saved_end = self.end
        if self.changed:
            self.changed = {}

    @classmethod
    def from_list(cls, values: list, columns: bool = True) -> "Session":
        """`columns`: the log as `log_columns` wrote it (else, as engine
        state version 3 did, one list per entry)."""
        sid, cluster, leader, replica, session_id, epoch, cached, log, base = values
        s = cls(sid, cluster, leader, replica, session_id, epoch)
        s.cached = {(intern(t), p): (e, o) for t, p, e, o in cached}  # names shared (partition.py)
        s.log = log_entries(log) if columns else [tuple(e) for e in log]
        s.base = base
        s.end = base + len(s.log)
        s.saved_end = s.end
        return s


class Sessions:
    """Every session the monitor follows, and the anomalies it met."""

    __slots__ = ("by_id", "by_sid", "unbound", "next_sid", "anomalies", "order")

    def __init__(self) -> None:
        # (cluster, leader, replica, session_id) -> Session
        self.by_id: dict[tuple, Session] = {}
        self.by_sid: dict[int, Session] = {}
        # (cluster, leader, replica) -> the sid of a full session opened with
        # session id 0 (the request log shows the request, whose id the
        # response assigns): the next incremental request of epoch 1 with an
        # unknown id is taken to be it.
        self.unbound: dict[tuple, int] = {}
        self.next_sid = 1
        self.anomalies: Counter = Counter()
        self.order = 0  # session events applied so far

    def open(self, cluster: str, leader: int, replica: int, session_id: int) -> Session:
        s = Session(self.next_sid, cluster, leader, replica, session_id, next_epoch(INITIAL_EPOCH))
        self.next_sid += 1
        self.by_id[(cluster, leader, replica, session_id)] = s
        self.by_sid[s.sid] = s
        if session_id == 0:
            self.unbound[(cluster, leader, replica)] = s.sid
        return s

    def resolve(self, ev) -> tuple[Optional[Session], Optional[Session], Optional[str]]:
        """For a session event: (the session it continues, or None for a new
        one; the session it replaces and must be closed, or None; the anomaly,
        or None). Changes nothing."""
        key = (ev.cluster, ev.leader, ev.replica, ev.session_id)
        current = self.by_id.get(key)
        if ev.full:
            return None, current, None
        if current is None:
            pair = (ev.cluster, ev.leader, ev.replica)
            sid = self.unbound.get(pair)
            pending = self.by_id.get((*pair, 0))
            if sid is not None and pending is not None and pending.sid == sid \
                    and ev.session_epoch == pending.epoch:
                return pending, None, None  # the full session's id, now known
            return None, None, UNKNOWN_SESSION
        if ev.session_epoch != current.epoch:
            return None, current, SKIPPED_EPOCH
        return current, None, None

    def bind(self, s: Session, session_id: int) -> None:
        """A session opened with id 0 learns its id."""
        if s.session_id == session_id:
            return
        del self.by_id[(s.cluster, s.leader, s.replica, s.session_id)]
        self.unbound.pop((s.cluster, s.leader, s.replica), None)
        s.session_id = session_id
        self.by_id[(s.cluster, s.leader, s.replica, session_id)] = s

    def close(self, s: Session) -> None:
        self.by_id.pop((s.cluster, s.leader, s.replica, s.session_id), None)
        self.by_sid.pop(s.sid, None)
        pair = (s.cluster, s.leader, s.replica)
        if self.unbound.get(pair) == s.sid:
            del self.unbound[pair]

    def to_list(self) -> list:
        return [[s.to_list() for s in self.by_id.values()],
                [[c, l, r, sid] for (c, l, r), sid in self.unbound.items()],
                self.next_sid, dict(self.anomalies), self.order]

    @classmethod
    def from_list(cls, values: list, columns: bool = True) -> "Sessions":
        rows, unbound, next_sid, anomalies, order = values
        out = cls()
        for row in rows:
            s = Session.from_list(row, columns)
            out.by_id[(s.cluster, s.leader, s.replica, s.session_id)] = s
            out.by_sid[s.sid] = s
        out.unbound = {(c, l, r): sid for c, l, r, sid in unbound}
        out.next_sid, out.anomalies, out.order = next_sid, Counter(anomalies), order
        return out
