"""A partition's health conditions, each defined once (docs/rules.md,
"Health conditions"). The alert rules, the what-if report and the aggregate
metrics all use these, so "leader alone" or "HW stalled" means the same
everywhere. A follower's lag in time is `rules.lag_ms`.
"""

from __future__ import annotations


def isr_health(isr: list[int], leader: int, replicas: int, min_isr: int
               ) -> tuple[bool, bool, bool, bool]:
    """The conditions of a partition's ISR size, all at once (the alert scan
    asks for them on most events), in this order:
    - under min ISR: producers with acks=all fail (Kafka's UnderMinIsr);
    - at min ISR: exactly min.insync.replicas (Kafka's AtMinIsr);
    - leader alone: the ISR is the leader alone although there are more
      replicas, so losing it makes the partition offline (or unclean);
    - under-replicated: the ISR is smaller than the replicas (UnderReplicated)."""
    n = len(isr)
    return n < min_isr, n == min_isr, replicas > 1 and n == 1 and isr[0] == leader, n < replicas


class HwStall:
    """Since when the HW has stood still below the leader's LEO: from the
    later of its last move and the moment the LEO went past it (an idle
    partition's HW is not stalled)."""

    __slots__ = ("hw", "behind", "since")

    def __init__(self, hw: int = -1, behind: bool = False, since: int = 0) -> None:
        self.hw, self.behind, self.since = hw, behind, since

    def note(self, hw: int, leader_leo: int, ts: int) -> int:
        """The HW and the leader's LEO at `ts`. Returns how long a stretch that
        this ends stood still (0 if none ends): the HW moved, or caught up."""
        behind = leader_leo > hw
        ended = ts - self.since if self.behind and (hw != self.hw or not behind) else 0
        if hw != self.hw or (behind and not self.behind):
            self.since = ts
        self.hw, self.behind = hw, behind
        return ended

    def stalled_for(self, now: int) -> int:
        """How long the HW has stood still below the LEO at `now` (0: it has not)."""
        return now - self.since if self.behind else 0


class FlapWindow:
    """The recent ISR changes of a partition: it *flaps* while at least
    `changes` of them (shrinks, expands, controller removals) fall within the
    last `window_ms`."""

    __slots__ = ("times",)

    def __init__(self, times: list[int] | None = None) -> None:
        # None yet: the empty tuple, shared (most partitions never change
        # their ISR; issue 23, memory); a list of its own from the first.
        self.times: list[int] | tuple[()] = times or ()

    def add(self, ts: int, window_ms: int) -> None:
        self.prune(ts, window_ms)
        if self.times:
            self.times.append(ts)
        else:
            self.times = [ts]

    def prune(self, now: int, window_ms: int) -> None:
        times = self.times
        if times and times[0] <= now - window_ms:
            self.times = [t for t in times if t > now - window_ms]

    def count(self, now: int, window_ms: int) -> tuple[int, int | None]:
        """(changes within (now - window, now], the next instant after `now` at
        which one of them leaves the window, or None)."""
        recent, leaves = 0, None
        for t in self.times:
            if now - window_ms < t <= now:
                recent += 1
            end = t + window_ms
            if end > now and (leaves is None or end < leaves):
                leaves = end
        return recent, leaves
