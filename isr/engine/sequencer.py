"""Event-time ordering with bounded lateness: the one sequencer of `isr
replay` and of the Spark job's buckets.

Events of a partition must be applied in `(ts, arrival)` order, and a check
at T may run only once no event with ts <= T can still arrive. With
`allowed_lateness_ms` the watermark is `max ts seen - allowed_lateness_ms`:
an event older than the watermark is late (dead-lettered, never applied out
of order); the others are *queued* here until the watermark passes them,
then leave sorted.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Any, Optional


class Sequencer:
    __slots__ = ("allowed_lateness_ms", "max_ts", "queued", "release_at", "external_watermark")

    def __init__(self, allowed_lateness_ms: Optional[int], max_ts: int = -1) -> None:
        # None: the watermark is set from outside (Spark's, once per micro-batch).
        self.allowed_lateness_ms = allowed_lateness_ms
        self.external_watermark = -1
        self.max_ts = max_ts
        # (ts, seq, event, origin); seq is unique, so entries never compare
        # their events.
        self.queued: list[tuple[int, int, Any, Any]] = []
        # Sort again once the queue doubled since the last release: keeping
        # order then costs amortised O(1) per event.
        self.release_at = 1024

    @property
    def watermark(self) -> int:
        if self.allowed_lateness_ms is None:
            return self.external_watermark
        return self.max_ts - self.allowed_lateness_ms if self.max_ts >= 0 else -1

    def offer(self, ts: int, seq: int, event: Any, origin: Any = None) -> bool:
        """Queue an event; False (and nothing queued) if it is late."""
        max_ts = self.max_ts
        if self.allowed_lateness_ms is None:
            if ts < self.external_watermark:
                return False
        elif max_ts >= 0 and ts < max_ts - self.allowed_lateness_ms:
            return False
        if ts > max_ts:
            self.max_ts = ts
        self.queued.append((ts, seq, event, origin))
        return True

    def release(self) -> list[tuple[int, int, Any, Any]]:
        """Every queued event with ts < watermark, in (ts, seq) order."""
        queued = self.queued
        if not queued:
            return []
        queued.sort()
        cut = bisect_left(queued, (self.watermark,))
        ready, self.queued = queued[:cut], queued[cut:]
        self.release_at = 2 * len(self.queued) + 1024
        return ready

    def drain(self) -> list[tuple[int, int, Any, Any]]:
        """End of a bounded input: everything, in order."""
        ready = sorted(self.queued)
        self.queued = []
        self.release_at = 1024
        return ready


def late_reason(ts: int, watermark: int, allowed_lateness_ms: int) -> str:
    return (f"ts {ts} is before the watermark {watermark} "
            f"(allowed lateness {allowed_lateness_ms} ms)")
