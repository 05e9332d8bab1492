"""What the alert rules need beyond the leader model, per partition and policy,
and the lifecycle of each alert (pending -> firing -> resolved)."""

from __future__ import annotations

from sys import intern
from typing import Optional, Protocol

from mypy_extensions import mypyc_attr

from isr.model.follower import Follower
from isr.model.health import FlapWindow, HwStall


class PartitionView(Protocol):
    """The leader model's fields the rules read (PartitionModel has them)."""

    leader: int
    replicas: list[int]
    isr: list[int]
    min_isr: int
    hw: int
    leader_leo: int
    followers: dict[int, Follower]


NEVER = 1 << 62  # an instant after any event's (`wake`, `lag_floor`: none known)


def _refuse():
    raise TypeError("the shared EMPTY mapping: give the watch its own dict first (own)")


# The empty served_ms / unserved / alerts of every watch that has none (most
# of them): one read-only mapping instead of three dicts per partition
# (issue 23: ~190 bytes per partition). Read-only, so a write that forgot to
# give the watch its own dict first fails loudly instead of changing every
# watch; the writers (evaluator.py) do, through `own`.
@mypyc_attr(native_class=False)  # (a dict subclass: mypyc makes no native one)
class _Empty(dict):
    """A dict that refuses every change; its copies and pickles are EMPTY
    itself (a watch deep-copied or pickled keeps sharing it)."""

    __slots__ = ()

    # (each its own method: mypyc compiles no alias in a class body)
    def __setitem__(self, *_args, **_kwargs):
        _refuse()

    def __delitem__(self, *_args, **_kwargs):
        _refuse()

    def setdefault(self, *_args, **_kwargs):
        _refuse()

    def pop(self, *_args, **_kwargs):
        _refuse()

    def popitem(self, *_args, **_kwargs):
        _refuse()

    def clear(self, *_args, **_kwargs):
        _refuse()

    def update(self, *_args, **_kwargs):
        _refuse()

    def __ior__(self, *_args, **_kwargs):  # type: ignore[misc]
        _refuse()

    def __reduce__(self):
        return (_empty, ())

    def __copy__(self):
        return self

    def __deepcopy__(self, _memo):
        return self


def _empty() -> "_Empty":
    return EMPTY


EMPTY = _Empty()


def own(d) -> dict:
    """`d`, or a dict of the watch's own in place of the shared EMPTY (the
    caller stores it back)."""
    return {} if d is EMPTY else d


def _mapping(pairs) -> dict:
    """A restored mapping: EMPTY when there is nothing in it."""
    return dict(pairs) or EMPTY


class AtChange:
    """The model as it was right after an ISR change: the change's ISR and HW
    (other fields do not move at a check instant)."""

    __slots__ = ("leader", "replicas", "isr", "min_isr", "hw", "leader_leo", "followers")

    def __init__(self, model: PartitionView, isr: list[int], hw: int) -> None:
        self.leader, self.replicas, self.min_isr = model.leader, model.replicas, model.min_isr
        self.leader_leo, self.followers = model.leader_leo, model.followers
        self.isr, self.hw = isr, hw


# A watch's fields (the class's __slots__; a compiled class does not offer
# its own: AlertListener.from_state copies them by name).
SLOTS = ("cluster", "topic", "partition", "policy", "t", "due", "stall",
         "last_event_ts", "served_ms", "unserved", "reported", "flaps", "alerts",
         "alerts_due_floor", "leader_leo", "replica_count", "due_lag", "wake",
         "lag_floor", "quiet_to", "held", "open_t")


class Watch:
    __slots__ = SLOTS

    def __init__(self, cluster: str, topic: str, partition: int, policy: str) -> None:
        # The names are shared with the other partitions': a watch made for
        # a model takes the model's (interned: isr/model/partition.py), one
        # restored from a row interns them (from_list).
        self.cluster, self.topic, self.partition, self.policy = cluster, topic, partition, policy
        self.t = -1                  # last instant evaluated
        self.due: Optional[int] = None  # next instant where a condition may flip by itself
        # The follower whose FollowerLagging crossing `due` is (-1: none
        # known, as in a row written before this field: `due` is then kept
        # until it comes). A fetch that brings that follower to the leader's
        # LEO makes `due` stale, so the evaluator looks again at once
        # (_quiet_fetch) instead of waking the partition later for nothing.
        self.due_lag = -1
        self.stall = HwStall()       # HighWatermarkStalled
        self.last_event_ts = -1      # last partition event (PartitionSilent)
        self.served_ms: dict[int, int] = EMPTY  # follower -> how long its last fetch took to serve
        self.unserved: dict[int, int] = EMPTY   # follower -> ts of a fetch_start not yet served
        self.reported: Optional[list[int]] = None  # the cluster's own ISR (`isr` events)
        self.flaps = FlapWindow()            # recent ISR changes (IsrFlapping)
        # (alertname, replica) -> [active since, fired at or -1, last sent]; an
        # alert whose condition holds but has not fired yet (for_ms) is pending.
        self.alerts: dict[tuple[str, int], list[int]] = EMPTY
        # No alert's `for` or repeat instant lies before this (set by each step;
        # -1: not known, as after a restore), so most events skip computing them.
        self.alerts_due_floor = -1
        # The leader's LEO and number of replicas after the last event (-1:
        # not known, as after a restore: the next event is scanned).
        self.leader_leo = self.replica_count = -1
        # Derived from the fields above, not saved, and written only with
        # `due` (evaluator.set_due, which the evaluator calls wherever `due`
        # or the alerts move, so none of them can be left stale):
        # - no instant of the watch's lies before `wake` (-1: not known, so
        #   the engine calls on_advance before every event: listeners.py,
        #   advance_gated);
        # - `quiet_to` is `wake` while no alert is active and no fetch of
        #   the watch is slow or unserved, else -1: a fetch before it may
        #   skip the scan (AlertListener.on_fetch);
        # - a follower last caught up at `lag_floor` or later crosses its lag
        #   limit no earlier than `due`, if at all (conditions.lag_floor).
        self.wake = self.quiet_to = -1
        self.lag_floor = NEVER
        # One instant, one outcome (docs/alerts.md): the alerts that moved at
        # the instant `open_t`, not over yet (None: none), whose records wait
        # for its end (evaluator.close): (alertname, replica) -> [a copy of
        # its state at the start of the instant (pending or firing; one made
        # in the instant is pending), its state if it stopped holding since
        # (parked: it goes on as it was if it holds again in the instant;
        # else None), when it stopped, the description of the firing or
        # repeat it may send]. Only a step
        # changes an alert's state, so the instant is closed by the first
        # step at a later instant, or by the watermark or the end of the
        # input (AlertListener.on_time), whichever comes first: the shortcuts
        # that skip a step need not know of it.
        self.held: Optional[dict[tuple[str, int], list]] = None
        self.open_t = -1

    def to_list(self) -> list:
        s = self.stall
        return [self.cluster, self.topic, self.partition, self.policy, self.t, self.due,
                s.hw, s.behind, s.since, self.last_event_ts,
                # (most watches' dicts are empty: no sort called for them)
                sorted(self.served_ms.items()) if self.served_ms else [],
                sorted(self.unserved.items()) if self.unserved else [],
                self.reported, list(self.flaps.times),
                [[name, r, *v] for (name, r), v in sorted(self.alerts.items())]
                if self.alerts else [],
                self.due_lag] + ([] if self.held is None else [[
                    self.open_t, [[name, r, *h] for (name, r), h in sorted(self.held.items())]]])

    @classmethod
    def from_list(cls, values: list) -> "Watch":
        (cluster, topic, partition, policy, t, due, hw, behind, since, last_event_ts,
         served, unserved, reported, flaps, alerts) = values[:15]
        w = cls(intern(cluster), intern(topic), partition, intern(policy))
        w.t, w.due = t, due
        if len(values) > 15:  # a row written before due_lag keeps -1 (none known)
            w.due_lag = values[15]
        w.stall = HwStall(hw, behind, since)
        w.last_event_ts = last_event_ts
        w.served_ms = _mapping((r, ms) for r, ms in served)
        w.unserved = _mapping((r, ts) for r, ts in unserved)
        w.reported, w.flaps = reported, FlapWindow(flaps)
        w.alerts = _mapping(((name, r), list(v)) for name, r, *v in alerts)
        if len(values) > 16:  # an instant not over yet (a row without it has none)
            w.open_t, held = values[16]
            w.held = {(name, r): list(h) for name, r, *h in held}
        return w
