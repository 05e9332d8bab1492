"""The per-policy summary of a run: ISR changes by kind, partitions, and time
spent under min ISR (what `isr replay` prints and the what-if report extends)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable

from isr.contract.decisions import IsrChange

if TYPE_CHECKING:
    from isr.engine.local import LocalEngine


@dataclass
class PolicySummary:
    policy: str
    shrinks: int = 0
    expands: int = 0
    controller_removals: int = 0
    partitions: int = 0
    partitions_under_min_isr: int = 0
    time_under_min_isr_ms: int = 0


def model_stats(engine: LocalEngine) -> dict[str, list[int]]:
    """Per policy: [partitions, partitions ever under min ISR, ms under min ISR]."""
    stats = {}
    for policy, parts in engine.partitions.items():
        row = stats[policy] = [len(parts), 0, 0]
        for m in parts.values():
            under = m.time_under_min_isr(engine.max_ts)
            if under > 0 or m.is_under_min_isr():
                row[1] += 1
            row[2] += under
    return stats


def summarize(policies: list[str], decisions: Iterable, stats: dict[str, list[int]]
              ) -> list[PolicySummary]:
    """The summary from the decisions and the models' statistics (model_stats,
    added up over the engines that held the partitions)."""
    rows = {p: PolicySummary(p) for p in policies}
    for d in decisions:
        if isinstance(d, IsrChange):
            row = rows[d.policy]
            if d.cause == "controller":
                row.controller_removals += 1
            elif d.action == "shrink":
                row.shrinks += 1
            else:
                row.expands += 1
    for policy, (partitions, under, under_ms) in stats.items():
        row = rows[policy]
        row.partitions += partitions
        row.partitions_under_min_isr += under
        row.time_under_min_isr_ms += under_ms
    return list(rows.values())


def summary(engine: LocalEngine, decisions: Iterable) -> list[PolicySummary]:
    return summarize(engine.policies, decisions, model_stats(engine))
