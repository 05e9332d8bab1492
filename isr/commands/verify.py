"""`isr verify EVENTS`: where the computed ISR decisions and the cluster's own
(`isr` events, e.g. from `isr tap server-log`) differ, per partition, and why.

Each ISR change the cluster committed is matched with a computed change of
the same partition to the same ISR within `tolerance_ms` (the leader's
AlterPartition round trip lies between its decision and the commit). A
commit that is the ISR a `leader` event handed the monitor (a new partition,
a leader election: `isr tap metadata` writes both at the controller's time)
is a starting state, not a decision to match: it agrees when the ISRs are the
same. What is left on either side is a difference, printed with the numbers
of both sides: the computed reason (lag, lastCaughtUpTime) and the cluster's
own log line. The rules are in docs/tap.md ("isr verify").
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Optional

import orjson

from isr.commands import options
from isr.config import ConfigError, MonitorSettings
from isr.contract.decisions import IsrChange
from isr.linecap import DEFAULT_MAX_LINE_BYTES, Overlong, bounded_lines
from isr.pipeline.results import ReplayStats


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
    cluster_only: list[tuple[Commit, Optional[list[int]]]] = field(
        default_factory=list)  # + the computed ISR then
    given: list[Commit] = field(default_factory=list)  # starting states that agree

    @property
    def agrees(self) -> bool:
        return not self.computed_only and not self.cluster_only


@dataclass(frozen=True)
class Given:
    """The ISR a `leader` event set in the monitor's model (the leader is
    always a member, as the model makes it)."""
    ts: int
    isr: list[int]


def _read_cluster_side(paths: list[str], max_line_bytes: int) -> tuple[
        dict[tuple, list[Commit]], dict[tuple, list[Given]]]:
    """The `isr` events (commits) and the ISRs of `leader` events, per partition."""
    raw: dict[tuple, list[Commit]] = defaultdict(list)
    given: dict[tuple, list[Given]] = defaultdict(list)
    for path in paths:
        with open(path, "rb") as f:
            for line in bounded_lines(f, max_line_bytes):
                if isinstance(line, Overlong):
                    continue  # replay reports it as a dead letter
                try:
                    ev = orjson.loads(line)
                    kind = ev.get("type")
                    if kind not in ("isr", "leader"):
                        continue
                    key = (ev.get("cluster", "default"), ev["topic"], ev["partition"])
                    if kind == "isr":
                        raw[key].append(Commit(ev["ts"], sorted(ev["isr"]),
                                               ev.get("kafka_log")))
                    else:
                        given[key].append(Given(ev["ts"], sorted({ev["leader"], *ev["isr"]})))
                except (orjson.JSONDecodeError, AttributeError, KeyError, TypeError):
                    continue  # replay reports it as a dead letter
    for items in given.values():
        items.sort(key=lambda g: g.ts)
    return _changes_only(raw), dict(given)


def _changes_only(raw: dict[tuple, list[Commit]]) -> dict[tuple, list[Commit]]:
    """Per partition, in ts order, the commits that change the ISR."""
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


def verify(paths: list[str], monitor: MonitorSettings, policy: str, tolerance_ms: int,
           max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> tuple[list[PartitionReport],
                                                                  ReplayStats]:
    """The reports of every partition with an ISR change on either side, and
    what became of the input lines.

    A leader's shrink comes from its periodic check, which runs every
    interval from the broker's start; the monitor checks at multiples of the
    interval since the epoch (docs/rules.md), so a shrink may differ by up to
    one interval on top of `tolerance_ms`."""
    # Imported here, as in every command: `isr --help` loads each command's module.
    from isr.engine.local import rules_for
    from isr.pipeline.local import replay

    interval = rules_for(monitor, policy).interval_ms
    result = replay(paths, monitor.model_copy(update={"policy": [policy]}), merge=True,
                    max_line_bytes=max_line_bytes)
    computed: dict[tuple, list[IsrChange]] = defaultdict(list)
    for d in result.decisions:
        if isinstance(d, IsrChange) and d.policy == policy and not d.bootstrap:
            computed[(d.cluster, d.topic, d.partition)].append(d)
    commits, given = _read_cluster_side(paths, max_line_bytes)
    reports = []
    for key in sorted(set(computed) | set(commits)):
        reports.append(_compare(key, computed.get(key, []), commits.get(key, []),
                                given.get(key, []), tolerance_ms, interval))
    return reports, result.stats


def _compare(key: tuple, changes: list[IsrChange], commits: list[Commit], given: list[Given],
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
        if any(g.isr == commit.isr and abs(g.ts - commit.ts) <= tolerance_ms for g in given):
            report.given.append(commit)  # the state a leader event gave: not a decision
            continue
        isr = _computed_isr(changes, given, commit.ts)
        if i > 0 or isr != commit.isr:  # the first commit only differs if the ISR does
            report.cluster_only.append((commit, isr))
    # Computed changes before the cluster's first known ISR cannot be checked.
    report.computed_only = [c for c in left if first is None or c.ts >= first - tolerance_ms]
    return report


def _phase(change: IsrChange, interval_ms: int) -> int:
    return interval_ms if change.action == "shrink" and change.cause == "leader" else 0


def _computed_isr(changes: list[IsrChange], given: list[Given],
                  ts: int) -> Optional[list[int]]:
    """The ISR the monitor held at `ts`: the last leader event's or computed
    change's; before both, the first computed change's `isr_before`; None
    when the monitor knew nothing of the partition's ISR."""
    timeline = sorted([(g.ts, g.isr) for g in given] +
                      [(c.ts, sorted(c.isr_after)) for c in changes], key=lambda x: x[0])
    isr = None
    for t, after in timeline:
        if t > ts:
            break
        isr = after
    if isr is None and changes:
        isr = sorted(changes[0].isr_before)
    return isr


def describe(report: PartitionReport, t0: int) -> list[str]:
    """Lines for one partition that differs (times relative to `t0`, in s)."""
    from isr.tap.server_log import proposal_numbers

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
        held = (f"the computed ISR was {isr}" if isr is not None else
                "the monitor knew no ISR for it (no `leader` event before: add the output of "
                "`isr tap metadata`)")
        lines.append(f"  the cluster committed {commit.isr} at +{(commit.ts - t0) / 1000:.3f}s "
                     f"while {held}{why}")
    return lines


def add_parser(sub) -> None:
    p = sub.add_parser("verify", help="where the computed ISR changes and the cluster's own differ",
                       description="Replay EVENTS (with the cluster's own `isr` events, e.g. from "
                                   "`isr tap server-log`) and print, per partition, where the "
                                   "computed ISR changes and the ones the cluster committed "
                                   "differ, with the numbers of both sides. Exit 1 if any differ.")
    p.add_argument("events", nargs="+", metavar="EVENTS", help="JSON-lines event files")
    p.add_argument("--policy", default="kafka", help="the policy to compare (default kafka)")
    p.add_argument("--tolerance-ms", type=int, default=2000,
                   help="a computed change and a commit this close in time are the same change "
                        "(the leader's AlterPartition round trip; default 2000); a shrink may "
                        "also differ by one ISR check interval (docs/tap.md)")
    options.add_config_options(p)
    p.set_defaults(func=cmd_verify)


def cmd_verify(args: argparse.Namespace) -> int:
    from isr import preflight

    if "-" in args.events:
        raise ConfigError("reads its files twice (the replay, then the cluster's side): give "
                          "files, not - (stdin)")
    preflight.readable_inputs(args.events)
    settings = options.settings(args)
    reports, stats = verify(args.events, settings.monitor, args.policy, args.tolerance_ms,
                            settings.input.max_line_bytes)
    if stats.dead_letters:  # a wrong file must not read as a calm cluster
        from isr.console import input_line

        print(f"isr verify: {input_line(stats)} (`isr replay --dead-letters FILE` lists them)",
              file=sys.stderr)
    if stats.lines and not stats.accepted:
        from isr.commands.replay import NOTHING_ACCEPTED

        print(f"isr verify: none of the {stats.lines} input lines was accepted: nothing to "
              f"compare (exit code {NOTHING_ACCEPTED})", file=sys.stderr)
        return NOTHING_ACCEPTED
    if not reports:
        print("no ISR changes on either side: nothing to compare", file=sys.stderr)
        return 0
    t0 = min([c.ts for r in reports for c, _ in r.matched] +
             [c.ts for r in reports for c in r.computed_only] +
             [c.ts for r in reports for c, _ in r.cluster_only] or [0])
    differ = [r for r in reports if not r.agrees]
    for r in differ:
        print("\n".join(describe(r, t0)))
    agreed = sum(len(r.matched) for r in reports)
    given = sum(len(r.given) for r in reports)
    states = f"; {given} ISRs set by leader events agree" if given else ""
    print(f"{len(reports)} partitions, {agreed} ISR changes agree, {len(differ)} partitions "
          f"differ (policy {args.policy}, tolerance {args.tolerance_ms} ms{states})")
    return 1 if differ else 0
