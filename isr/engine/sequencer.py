"""Event-time ordering with bounded lateness: the one sequencer of `isr
replay` and of the Spark job's buckets.

Events of a partition must be applied in `(ts, arrival)` order, and a check
at T may run only once no event with ts <= T can still arrive. With
`allowed_lateness_ms` the watermark is `max ts seen - allowed_lateness_ms`:
an event older than the watermark is late (dead-lettered, never applied out
of order); the others are *queued* here until the watermark passes them,
then leave sorted.

An event more than `max_future_ms` ahead of the stream's time is `future`
(dead-lettered): one absurd timestamp must not move the watermark and make
every later event late. The stream's time is the largest ts admitted so far
here (a replay), or the micro-batch's clock in the live job, which applies
the same rule (`is_future`) before events reach a bucket.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Any, Optional

LATE, FUTURE = "late", "future"


def is_future(ts: int, reference: int, max_future_ms: int) -> bool:
    """More than max_future_ms ahead of the stream's time (`reference`, -1: unknown)."""
    return reference >= 0 and ts > reference + max_future_ms


def future_reason(ts: int, reference: int, max_future_ms: Optional[int], of: str) -> str:
    return (f"ts {ts} is {ts - reference} ms ahead of {of} {reference} "
            f"(monitor.max_future_ms {max_future_ms})")


def late_reason(ts: int, watermark: int, allowed_lateness_ms: int) -> str:
    return (f"ts {ts} is before the watermark {watermark} "
            f"(allowed lateness {allowed_lateness_ms} ms)")


class Sequencer:
    __slots__ = ("allowed_lateness_ms", "max_future_ms", "external", "max_ts", "queued",
                 "release_at", "external_watermark")

    def __init__(self, allowed_lateness_ms: int, max_future_ms: Optional[int] = None,
                 external: bool = False, max_ts: int = -1) -> None:
        # external: the watermark is set from outside (what a Spark batch
        # reached), and the future test is made before events get here.
        # max_future_ms None: no future test.
        self.allowed_lateness_ms = allowed_lateness_ms
        self.external = external
        self.max_future_ms = None if external else max_future_ms
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
        if self.external:
            return self.external_watermark
        return self.max_ts - self.allowed_lateness_ms if self.max_ts >= 0 else -1

    def offer(self, ts: int, seq: int, event: Any, origin: Any = None) -> Optional[str]:
        """Queue an event, or say why not: LATE or FUTURE (nothing is queued)."""
        max_ts = self.max_ts
        if self.external:
            if ts < self.external_watermark:
                return LATE
        elif max_ts >= 0:
            if ts < max_ts - self.allowed_lateness_ms:
                return LATE
            # (A future ts is past max_ts: max_future_ms >= 0.)
            if (ts > max_ts and self.max_future_ms is not None
                    and is_future(ts, max_ts, self.max_future_ms)):
                return FUTURE
        if ts > max_ts:
            self.max_ts = ts
        self.queued.append((ts, seq, event, origin))
        return None

    def offer_stamps(self, stamps) -> Optional[list[tuple[int, str]]]:
        """`offer` of each ts of `stamps` (a numpy int64 array) in turn, but
        nothing queued, in bulk (the Spark replay's admission): [(position,
        reason)] of those refused as late; None, and nothing changed, when one
        may be future (then offer them one at a time). Not for an external
        watermark. A late event never moves `max_ts`, so without a future one
        the largest ts before each event is a running maximum."""
        import numpy as np

        if not len(stamps):
            return []
        upto = np.maximum.accumulate(np.maximum(stamps, self.max_ts))
        before = np.empty_like(upto)
        before[0] = self.max_ts
        before[1:] = upto[:-1]
        known = before >= 0
        if self.max_future_ms is not None and (
                known & (stamps > before + self.max_future_ms)).any():
            return None
        late = np.flatnonzero(known & (stamps < before - self.allowed_lateness_ms)).tolist()
        lateness = self.allowed_lateness_ms
        refused = [(i, late_reason(int(stamps[i]), int(before[i]) - lateness, lateness))
                   for i in late]
        self.max_ts = int(upto[-1])
        return refused

    def refusal(self, verdict: str, ts: int) -> str:
        """The reason for what `offer` just refused."""
        if verdict == FUTURE:
            return future_reason(ts, self.max_ts, self.max_future_ms, "the stream's time")
        return late_reason(ts, self.watermark, self.allowed_lateness_ms)

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
