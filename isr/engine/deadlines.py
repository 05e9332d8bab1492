"""Which partitions a check must visit: an index of models by deadline
(issue 23, part 4; docs/rules.md, "Fetch sessions").

`LocalEngine.advance_all(until)` used to visit every model of every policy.
Most of those visits do nothing: a model acts by itself (no input) only at its
next instant (`LocalEngine.next_instant`: a shrink, an alert's due instant)
or at the end of a suspected leader stall's confirmation window. Between
those instants a visit runs no check, changes no state that a later call
would not change the same way, and outputs nothing. So the engine keeps each
model in a heap under that instant and visits only those whose instant a
check passes.

A model whose state changes is marked dirty (`touch`) and re-indexed at the
next check, once however often it changed: an event, a session fetch applied,
a check run, a broker event, a session link. Entries are invalidated lazily:
each carries a stamp, and only the entry whose stamp the model holds counts.

Fetch sessions: the fetches a session logs for a partition it did not list
are applied only when something needs the partition (sessions.py). A model
whose pending fetches can only move its followers' times (`SessionDriver.
is_steady`) is indexed at the instant its applied state gives; those fetches
only put that instant off, so it is never too late, and when it comes the
visit catches the model up and indexes it again, later. Any other model with
sessions is EAGER: visited at every check, as before. So a caught-up partition
of a live session is not visited at all under `kafka` and `kip501` (no
deadline), and once per replica.lag.time.max.ms under `kip16` and `legacy`.
"""

from __future__ import annotations

from heapq import heapify, heappop, heappush
from typing import Any, Optional

EAGER = -(2**63)  # an instant every check passes: visited at each one


class DeadlineIndex:
    __slots__ = ("heap", "stamp", "dirty")

    def __init__(self) -> None:
        self.heap: list[tuple[int, int, Any]] = []  # (instant, stamp, model)
        self.stamp = 0
        self.dirty: list = []  # models touched since the last check

    def touch(self, m) -> None:
        if not m.due_dirty:
            m.due_dirty = True
            self.dirty.append(m)

    def place(self, m, at: Optional[int]) -> None:
        """Index `m` at instant `at` (None: nowhere)."""
        if at == m.due_at and (at is None or m.due_stamp):
            return  # already there
        if at is None:
            m.due_at, m.due_stamp = None, 0
            return
        self.stamp += 1
        m.due_at, m.due_stamp = at, self.stamp
        heappush(self.heap, (at, self.stamp, m))

    def pop_due(self, until: int, inclusive: bool) -> list:
        """The models indexed at an instant before `until` (or at it if
        inclusive), taken out of the index."""
        heap, out = self.heap, []
        while heap:
            at, stamp, m = heap[0]
            if at > until or (at == until and not inclusive):
                break
            heappop(heap)
            if m.due_stamp == stamp:
                m.due_at, m.due_stamp = None, 0
                out.append(m)
        return out

    def compact(self, models: int) -> None:
        """Drop the invalidated entries once they outnumber the models."""
        if len(self.heap) > 2 * models + 1024:
            self.heap = [e for e in self.heap if e[2].due_stamp == e[1]]
            heapify(self.heap)

    def clear(self) -> None:
        self.heap, self.dirty = [], []
