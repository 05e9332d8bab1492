"""`isr verify EVENTS`: where the computed ISR decisions and the cluster's own
(`isr` events, e.g. from `isr tap server-log`) differ, per partition, and why.

Each ISR change the cluster committed is matched with a computed change of
the same partition to the same ISR within `tolerance_ms` (the leader's
AlterPartition round trip lies between its decision and the commit). What is
left on either side is a difference, printed with the numbers of both sides:
the computed reason (lag, lastCaughtUpTime) and the cluster's own log line.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Optional

import orjson

from isr.config import MonitorSettings
from isr.contract.decisions import IsrChange
from isr.engine.local import rules_for
from isr.replay import replay
from isr.tap.server_log import proposal_numbers


@dataclass
class Commit:
    ts: int
    isr: list[int]
    kafka_log: Optional[str]


@dataclass
class PartitionReport:
    cluster: str
    topic: str
    partition: int
    matched: list[tuple[IsrChange, Commit]] = field(default_factory=list)
    computed_only: list[IsrChange] = field(default_factory=list)
    cluster_only: list[tuple[Commit, list[int]]] = field(default_factory=list)  # + computed ISR

    @property
    def agrees(self) -> bool:
        return not self.computed_only and not self.cluster_only


def cluster_commits(paths: list[str]) -> dict[tuple, list[Commit]]:
    """The `isr` events of the files that change the ISR, per partition, in ts order."""
    raw: dict[tuple, list[Commit]] = defaultdict(list)
    for path in paths:
        with open(path, "rb") as f:
            for line in f:
                try:
                    ev = orjson.loads(line)
                except orjson.JSONDecodeError:
                    continue  # replay reports it as a dead letter
                if isinstance(ev, dict) and ev.get("type") == "isr":
                    key = (ev.get("cluster", "default"), ev["topic"], ev["partition"])
                    raw[key].append(Commit(ev["ts"], sorted(ev["isr"]), ev.get("kafka_log")))
    commits = {}
    for key, items in raw.items():
        items.sort(key=lambda c: c.ts)
        changes, last = [], None
        for c in items:
            if c.isr != last:
                changes.append(c)
            last = c.isr
        commits[key] = changes
    return commits


def verify(paths: list[str], monitor: MonitorSettings, policy: str,
           tolerance_ms: int) -> list[PartitionReport]:
    """A leader's shrink comes from its periodic check, which runs every
    interval from the broker's start; the monitor checks at multiples of the
    interval since the epoch (docs/rules.md), so a shrink may differ by up to
    one interval on top of `tolerance_ms`."""
    interval = rules_for(monitor, policy).interval_ms
    result = replay(paths, monitor.model_copy(update={"policy": [policy]}), merge=True)
    computed: dict[tuple, list[IsrChange]] = defaultdict(list)
    for d in result.decisions:
        if isinstance(d, IsrChange) and d.policy == policy and not d.bootstrap:
            computed[(d.cluster, d.topic, d.partition)].append(d)
    commits = cluster_commits(paths)
    reports = []
    for key in sorted(set(computed) | set(commits)):
        reports.append(_compare(key, computed.get(key, []), commits.get(key, []), tolerance_ms,
                                interval))
    return reports


def _compare(key: tuple, changes: list[IsrChange], commits: list[Commit],
             tolerance_ms: int, interval_ms: int) -> PartitionReport:
    report = PartitionReport(*key)
    left = list(changes)
    first = commits[0].ts if commits else None
    for i, commit in enumerate(commits):
        match = next((c for c in left if sorted(c.isr_after) == commit.isr
                      and abs(c.ts - commit.ts) <= tolerance_ms + _phase(c, interval_ms)),
                     None)
        if match is not None:
            left.remove(match)
            report.matched.append((match, commit))
            continue
        isr = _computed_isr(changes, commit.ts)
        if i > 0 or isr != commit.isr:  # the first commit only differs if the ISR does
            report.cluster_only.append((commit, isr))
    # Computed changes before the cluster's first known ISR cannot be checked.
    report.computed_only = [c for c in left if first is None or c.ts >= first - tolerance_ms]
    return report


def _phase(change: IsrChange, interval_ms: int) -> int:
    return interval_ms if change.action == "shrink" and change.cause == "leader" else 0


def _computed_isr(changes: list[IsrChange], ts: int) -> Optional[list[int]]:
    isr = None
    for c in changes:
        if c.ts > ts:
            break
        isr = sorted(c.isr_after)
    if isr is None and changes:
        isr = sorted(changes[0].isr_before)
    return isr


def describe(report: PartitionReport, t0: int) -> list[str]:
    """Lines for one partition that differs (times relative to `t0`, in s)."""
    name = f"{report.topic}-{report.partition}"
    lines = [f"{name}: {len(report.matched)} ISR changes agree, "
             f"{len(report.computed_only)} only computed, {len(report.cluster_only)} only "
             "in the cluster"]
    for c in report.computed_only:
        lines.append(f"  computed {c.action} to {sorted(c.isr_after)} at +{(c.ts - t0) / 1000:.3f}s "
                     f"that the cluster did not commit: {c.reason}")
    for commit, isr in report.cluster_only:
        numbers = proposal_numbers(commit.kafka_log)
        why = ""
        if numbers:
            parts = [f"leader HW {numbers.get('hw')}, LEO {numbers.get('leader_leo')}"]
            parts += [f"replica {r}: endOffset {n['leo']}, lastCaughtUpTimeMs "
                      f"{n['last_caught_up_ts']} (+{(n['last_caught_up_ts'] - t0) / 1000:.3f}s)"
                      for r, n in sorted(numbers.get("replicas", {}).items())]
            why = "; the cluster's numbers: " + ", ".join(parts)
        lines.append(f"  the cluster committed {commit.isr} at +{(commit.ts - t0) / 1000:.3f}s "
                     f"while the computed ISR was {isr}{why}")
    return lines
