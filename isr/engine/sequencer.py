"""Event-time ordering with bounded lateness, shared by every engine.

Events of a partition must be applied in `(ts, arrival)` order, and a check
at T may run only once no event with ts <= T can still arrive. With
`allowed_lateness_ms` the watermark is `max ts seen - allowed_lateness_ms`:
an event older than the watermark is late (dead-lettered, never applied out
of order); the others wait here until the watermark passes them, then leave
sorted.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Any


class Sequencer:
    __slots__ = ("allowed_lateness_ms", "max_ts", "pending")

    def __init__(self, allowed_lateness_ms: int, max_ts: int = -1) -> None:
        self.allowed_lateness_ms = allowed_lateness_ms
        self.max_ts = max_ts
        self.pending: list[tuple[int, int, Any]] = []

    @property
    def watermark(self) -> int:
        return self.max_ts - self.allowed_lateness_ms if self.max_ts >= 0 else -1

    def offer(self, ts: int, seq: int, item: Any) -> bool:
        """Queue an event; False (and nothing queued) if it is late."""
        if ts < self.watermark:
            return False
        if ts > self.max_ts:
            self.max_ts = ts
        self.pending.append((ts, seq, item))
        return True

    def release(self) -> list[tuple[int, int, Any]]:
        """Every queued event with ts < watermark, in (ts, seq) order."""
        pending = self.pending
        if not pending:
            return []
        pending.sort(key=_order)
        cut = bisect_left(pending, self.watermark, key=_ts)
        ready, self.pending = pending[:cut], pending[cut:]
        return ready

    def drain(self) -> list[tuple[int, int, Any]]:
        """End of a bounded input: everything, in order."""
        ready = sorted(self.pending, key=_order)
        self.pending = []
        return ready


def _order(entry: tuple[int, int, Any]) -> tuple[int, int]:
    return (entry[0], entry[1])


def _ts(entry: tuple[int, int, Any]) -> int:
    return entry[0]
