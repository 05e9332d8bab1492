"""The alert rules, one declaration each: name, summary, when it holds, default
severity and `for_ms`, its thresholds with their defaults, whether a fetch or
an append can end it, and the sentence that describes a holding condition with
its numbers.

The configuration's rule settings (config.AlertRule), the annotations' summary,
the evaluator's fetch and append fast paths and the docs table (docs/alerts.md, written by
`python -m isr.contract.catalog`) all come from here. The conditions themselves
are evaluated in one pass over a partition (conditions.py), in this order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any, Callable

from pydantic import Field

PositiveMs = Annotated[int, Field(gt=0)]


@dataclass(frozen=True)
class Threshold:
    default: Any
    type: Any  # the pydantic annotation that validates a configured value
    meaning: str


@dataclass(frozen=True)
class Rule:
    name: str
    summary: str
    holds_when: str  # for the docs table
    why: str  # why an operator cares
    severity: str
    # A fetch that changes no ISR only lowers a lag, moves the HW or ends a
    # silence: rules it cannot end let the evaluator skip work on most fetches.
    fetch_can_end: bool
    # An append that changes no ISR only raises the leader's LEO: it ends a
    # silence and moves the HW of a leader alone. It ends a lag only where the
    # LEO reaches a follower ahead of it (after a leader change), which the
    # evaluator checks apart, so FollowerLagging counts as not ended here.
    append_can_end: bool
    describe: Callable[[tuple, Any], str]  # (the scan's numbers, RuleParams) -> sentence
    for_ms: int = 0
    thresholds: dict[str, Threshold] = field(default_factory=dict)
    per_replica: bool = False  # labelled with the follower (`replica`)


def _missing(isr: list, replicas: list) -> list:
    return [r for r in replicas if r not in isr]


CATALOG: tuple[Rule, ...] = (
    Rule("UnderMinIsr", "ISR below min.insync.replicas",
         "`len(isr) < min.insync.replicas`",
         "producers with `acks=all` are failing right now",
         "critical", fetch_can_end=False, append_can_end=False,
         describe=lambda n, P: (f"ISR {n[0]} has {len(n[0])} member(s), below "
                                f"min.insync.replicas {n[1]}: acks=all produces fail")),
    Rule("AtMinIsr", "ISR at min.insync.replicas",
         "`len(isr) == min.insync.replicas < len(replicas)`",
         "one more failure and writes stop",
         "warning", fetch_can_end=False, append_can_end=False,
         describe=lambda n, P: (f"ISR {n[0]} is at min.insync.replicas {n[1]} of {n[2]} "
                                f"replicas: one more failure stops acks=all writes")),
    Rule("LeaderOnlyIsr", "Leader alone in the ISR",
         "the ISR is the leader alone, more than one replica",
         "losing that broker makes the partition offline (or unclean)",
         "critical", fetch_can_end=False, append_can_end=False,
         describe=lambda n, P: f"only the leader {n[0]} is in the ISR of replicas {n[1]}"),
    Rule("UnderReplicated", "Under-replicated partition",
         "`len(isr) < len(replicas)`",
         "the classic URP signal, per partition",
         "warning", fetch_can_end=False, append_can_end=False, for_ms=30000,
         describe=lambda n, P: f"replicas {_missing(n[0], n[1])} are not in the ISR {n[0]}"),
    Rule("IsrFlapping", "ISR flapping",
         "the partition is flapping: at least `changes` ISR changes (shrinks, expands, "
         "controller removals) in the last `window_ms`",
         "the KAFKA-4485 symptom; ISR churn loads the controller",
         "warning", fetch_can_end=False, append_can_end=False,
         thresholds={"changes": Threshold(4, Annotated[int, Field(ge=1)],
                                          "ISR changes that make a partition flap"),
                     "window_ms": Threshold(300000, PositiveMs, "... within this window")},
         describe=lambda n, P: f"{n[0]} ISR changes in the last {n[1]} ms (threshold {n[2]})"),
    Rule("FollowerLagging", "ISR follower lagging",
         "an ISR follower's lag (time since it was last caught up; 0 at the leader's LEO) "
         "exceeds `warn_ratio × replica_lag_time_max_ms`",
         "early warning before the shrink",
         "warning", fetch_can_end=True, append_can_end=False, per_replica=True,
         thresholds={"warn_ratio": Threshold(0.5, Annotated[float, Field(gt=0)],
                                             "share of replica_lag_time_max_ms")},
         describe=lambda n, P: (f"ISR follower {n[0]} lags {n[1]} ms (> {n[2]} ms = "
                                f"{P.warn_ratio} x {P.lag_max_ms}); leo {n[3]}, "
                                f"leader_leo {n[4]}")),
    Rule("HighWatermarkStalled", "High watermark stalled",
         "the HW is stalled: below the leader's LEO and not moved for `stall_ms` since it "
         "last moved or since the LEO went past it",
         "consumers see nothing new although producers write",
         "warning", fetch_can_end=True, append_can_end=True,
         thresholds={"stall_ms": Threshold(10000, PositiveMs, "how long the HW stands still")},
         describe=lambda n, P: f"hw {n[0]} has not moved for {n[1]} ms while leader_leo is {n[2]}"),
    Rule("SlowLeaderFetch", "Leader slow to serve follower fetches",
         "a follower's last fetch took more than `follower_fetch_process_time_max_ms` to "
         "serve (`ts - received_ts`), or a `fetch_start` has waited longer",
         "KIP-501: a slow leader pushes healthy followers out of the ISR",
         "warning", fetch_can_end=True, append_can_end=False,
         thresholds={"follower_fetch_process_time_max_ms": Threshold(
             500, PositiveMs, "KIP-501's name for the longest acceptable serve time")},
         describe=lambda n, P: (f"leader {n[0]} is slow to serve fetches (> {n[1]} ms): "
                                + ", ".join(f"{r} {what} {ms} ms" for r, ms, what in n[2]))),
    Rule("IsrDivergence", "Cluster ISR differs from the computed ISR",
         "the ISR of the last `isr` event differs from the computed one (reset by a "
         "`leader` event)",
         "the cluster is not doing what its configuration says",
         "warning", fetch_can_end=False, append_can_end=False, for_ms=10000,
         describe=lambda n, P: f"the cluster reports ISR {n[0]}, the computed ISR is {n[1]}"),
    Rule("PartitionSilent", "No events for the partition",
         "no event for the partition for `silent_ms` of event time",
         "leader down, or the event feed is broken",
         "warning", fetch_can_end=True, append_can_end=True,
         thresholds={"silent_ms": Threshold(60000, PositiveMs, "event time without an event")},
         describe=lambda n, P: f"no event for {n[0]} ms (> {n[1]} ms)"),
)
RULES: dict[str, Rule] = {r.name: r for r in CATALOG}
RULE_NAMES: tuple[str, ...] = tuple(RULES)
# Every threshold, by name (each belongs to one rule).
THRESHOLDS: dict[str, tuple[str, Threshold]] = {
    name: (r.name, t) for r in CATALOG for name, t in r.thresholds.items()}


def markdown_table() -> str:
    """The rules table of docs/alerts.md."""
    lines = ["| rule | holds when (per partition and policy) | default | why an operator cares |",
             "|---|---|---|---|"]
    for r in CATALOG:
        defaults = [r.severity] + ([f"`for_ms` {r.for_ms}"] if r.for_ms else []) + [
            f"`{name}` {t.default}" for name, t in r.thresholds.items()]
        label = " (label `replica`)" if r.per_replica else ""
        lines.append(f"| `{r.name}`{label} | {r.holds_when} | {', '.join(defaults)} | {r.why} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(markdown_table())
