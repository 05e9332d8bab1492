"""What the CLI prints on a terminal (rich): replay summaries, the what-if
table, progress. Nothing here decides anything."""

from __future__ import annotations

from collections import Counter
from typing import Optional

from rich import box
from rich.console import Console
from rich.progress import (BarColumn, Progress, TextColumn, TimeRemainingColumn,
                           TransferSpeedColumn)
from rich.table import Table

from isr.contract.decisions import Alert
from isr.pipeline.results import Progress as ReplayProgress
from isr.pipeline.results import ReplayResult, ReplayStats


def _duration(ms: int) -> str:
    if ms <= 0:
        return "0 s"
    seconds = ms / 1000
    return f"{seconds:.1f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


def quiet_policy_notes(result: ReplayResult, lag_max_ms: Optional[int]) -> list[str]:
    """Why a policy changed nothing although followers lagged (issue 24): the
    FollowerLagging alerts of the policy say they lagged, the absent shrink
    that no lag reached the limit."""
    lagging = Counter(d.labels.get("policy") for d in result.decisions
                      if isinstance(d, Alert) and not d.is_repeat and d.status == "firing"
                      and d.labels["alertname"] == "FollowerLagging")
    limit = f" = {lag_max_ms:,} ms" if lag_max_ms is not None else ""
    return [f"{row.policy}: no ISR change although followers lagged (FollowerLagging fired "
            f"{lagging[row.policy]}x): no lag reached monitor.replica_lag_time_max_ms"
            f"{limit} under {row.policy}'s rule"
            for row in result.summary
            if lagging[row.policy] and not (row.shrinks or row.expands
                                            or row.controller_removals)]


def print_summary(result: ReplayResult, console: Console,
                  lag_max_ms: Optional[int] = None) -> None:
    table = Table(title="ISR decisions by policy", title_justify="left", box=box.SIMPLE_HEAD)
    for column in ("policy", "shrinks", "expands", "ctrl removals", "partitions",
                   "<min ISR", "time <min ISR"):
        table.add_column(column, justify="left" if column == "policy" else "right",
                         no_wrap=True)
    for row in result.summary:
        table.add_row(row.policy, str(row.shrinks), str(row.expands),
                      str(row.controller_removals), str(row.partitions),
                      str(row.partitions_under_min_isr), _duration(row.time_under_min_isr_ms))
    console.print(table)
    for note in quiet_policy_notes(result, lag_max_ms):
        console.print(note, highlight=False, soft_wrap=True)
    alerts = Counter((d.labels["alertname"], d.status) for d in result.decisions
                     if isinstance(d, Alert) and not d.is_repeat)
    if alerts:
        names = sorted({name for name, _ in alerts})
        console.print("alerts (fired/resolved): " + ", ".join(
            f"{n} {alerts[(n, 'firing')]}/{alerts[(n, 'resolved')]}" for n in names),
            soft_wrap=True)
    console.print(input_line(result.stats))


def input_line(s: ReplayStats) -> str:
    """What became of the input lines: read, accepted, ignored, rejected."""
    line = f"{s.lines} events read, {s.accepted} accepted"
    if s.ignored:
        line += ", ignored: " + ", ".join(f"{k} {v}" for k, v in sorted(s.ignored.items()))
    if s.session_anomalies:  # requests whose fetch session the monitor did not know
        line += ", fetch session anomalies: " + ", ".join(
            f"{k} {v}" for k, v in sorted(s.session_anomalies.items()))
    if s.dead_letters:
        line += ", dead letters: " + ", ".join(
            f"{k} {v}" for k, v in sorted(s.dead_letters.items()))
    return line


def print_whatif(result: ReplayResult, console: Console) -> None:
    from isr.engine.whatif import COLUMNS, table_cells

    table = Table(title="What-if by policy", title_justify="left", box=box.SIMPLE_HEAD)
    for key, header in COLUMNS:
        table.add_column(header, justify="left" if key == "policy" else "right")
    for row in result.whatif_rows:
        table.add_row(*table_cells(row))
    console.print(table)


class RichProgress(ReplayProgress):
    """A transient progress bar per input (bytes read; no total for stdin)."""

    def __init__(self, console: Console) -> None:
        self.progress = Progress(TextColumn("{task.description}"), BarColumn(),
                                 TransferSpeedColumn(), TimeRemainingColumn(), console=console,
                                 transient=True)

    def __enter__(self) -> "RichProgress":
        self.progress.start()
        return self

    def __exit__(self, *exc) -> None:
        self.progress.stop()

    def start(self, name: str, total: Optional[int]) -> object:
        return self.progress.add_task(name, total=total)

    def advance(self, task, completed: int) -> None:
        self.progress.update(task, completed=completed)

    def done(self, task) -> None:
        total = self.progress.tasks[task].total
        if total is not None:
            self.progress.update(task, completed=total)
