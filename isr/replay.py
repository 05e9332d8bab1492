"""`isr replay`: JSON-lines event files in, decisions as JSON lines out.

Data flows one way: lines -> decode/validate -> LocalEngine (leader model)
-> sorted decisions + final partition states -> output; bad lines become
dead-letter records; a summary goes to stderr.
"""

from __future__ import annotations

import sys
from collections import Counter
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Iterator, Optional

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn
from rich import box
from rich.table import Table

from isr.config import MonitorSettings
from isr.contract import DeadLetter, Rejection, decode
from isr.contract.decisions import Alert
from isr.engine.gc_passes import fewer_gc_passes
from isr.engine.local import LocalEngine, PolicySummary
from isr.whatif import WhatIf


@dataclass
class ReplayStats:
    lines: int = 0
    accepted: int = 0
    dead_letters: Counter = field(default_factory=Counter)
    ignored: Counter = field(default_factory=Counter)


@dataclass
class ReplayResult:
    decisions: list
    states: list
    dead_letters: list[DeadLetter]
    stats: ReplayStats
    summary: list[PolicySummary]
    whatif: Optional[WhatIf] = None


def _lines(sources: list[str], progress: Optional[Progress]) -> Iterator[tuple[str, int, bytes]]:
    """(source name, 1-based line number, raw bytes) for every non-blank line."""
    with ExitStack() as stack:
        for name in sources:
            if name == "-":
                stream: BinaryIO = sys.stdin.buffer
            else:
                stream = stack.enter_context(open(name, "rb"))
            task = None
            if progress is not None and name != "-":
                task = progress.add_task(Path(name).name, total=Path(name).stat().st_size)
            for number, raw in enumerate(stream, 1):
                if task is not None and number % 4096 == 0:
                    progress.update(task, completed=stream.tell())
                raw = raw.rstrip(b"\r\n")
                if raw.strip():
                    yield name, number, raw
            if task is not None:
                progress.update(task, completed=progress.tasks[task].total)


def replay(sources: list[str], monitor: MonitorSettings, progress: Optional[Progress] = None,
           whatif: bool = False) -> ReplayResult:
    """`whatif`: also follow every partition under every policy for the
    what-if report (result.whatif)."""
    with fewer_gc_passes():
        return _replay(sources, monitor, progress, whatif)


def _replay(sources: list[str], monitor: MonitorSettings, progress: Optional[Progress],
            with_whatif: bool) -> ReplayResult:
    stats = ReplayStats()
    dead: list[DeadLetter] = []

    def on_reject(origin, reason: str) -> None:
        source, offset, raw = origin
        stats.accepted -= 1
        stats.dead_letters["model"] += 1
        dead.append(DeadLetter.of(source, offset, raw, reason, "model"))

    engine = LocalEngine(monitor, on_reject=on_reject)
    whatif = WhatIf(engine) if with_whatif else None
    if whatif is not None:
        engine.after_apply = whatif.after_apply
    for seq, (source, offset, raw) in enumerate(_lines(sources, progress)):
        stats.lines += 1
        event = decode(raw)
        if isinstance(event, Rejection):
            stats.dead_letters[event.reason_class] += 1
            dead.append(DeadLetter.of(source, offset, raw, event.reason, event.reason_class))
            continue
        # The origin rides along (JSON-able) in case the model rejects the event.
        origin = (source, offset, raw.decode("utf-8", "backslashreplace"))
        outcome = engine.submit(event, seq, origin)
        if outcome.status == "late":
            stats.dead_letters["late"] += 1
            dead.append(DeadLetter.of(source, offset, raw, outcome.reason, "late"))
        else:
            stats.accepted += 1
    engine.finish()
    if whatif is not None:
        whatif.finish()
    stats.ignored = engine.ignored
    dead.sort(key=lambda d: (d.source, d.offset))  # as every engine reports them
    return ReplayResult(engine.sorted_decisions(), engine.states(), dead, stats, engine.summary(),
                        whatif)


def write_jsonl(records, stream: BinaryIO) -> None:
    for record in records:
        stream.write(record.model_dump_json().encode())
        stream.write(b"\n")


def _duration(ms: int) -> str:
    if ms <= 0:
        return "0 s"
    seconds = ms / 1000
    return f"{seconds:.1f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


def print_summary(result: ReplayResult, console: Console) -> None:
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
    alerts = Counter((d.labels["alertname"], d.status) for d in result.decisions
                     if isinstance(d, Alert) and not d.is_repeat)
    if alerts:
        names = sorted({name for name, _ in alerts})
        console.print("alerts (fired/resolved): " + ", ".join(
            f"{n} {alerts[(n, 'firing')]}/{alerts[(n, 'resolved')]}" for n in names),
            soft_wrap=True)
    s = result.stats
    line = f"{s.lines} events read, {s.accepted} accepted"
    if s.ignored:
        line += ", ignored: " + ", ".join(f"{k} {v}" for k, v in sorted(s.ignored.items()))
    if s.dead_letters:
        line += ", dead letters: " + ", ".join(
            f"{k} {v}" for k, v in sorted(s.dead_letters.items()))
    console.print(line)


def print_whatif(whatif: WhatIf, console: Console) -> None:
    from isr.whatif import COLUMNS, table_cells

    table = Table(title="What-if by policy", title_justify="left", box=box.SIMPLE_HEAD)
    for key, header in COLUMNS:
        table.add_column(header, justify="left" if key == "policy" else "right")
    for row in whatif.rows():
        table.add_row(*table_cells(row))
    console.print(table)


def make_progress(console: Console) -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(), TransferSpeedColumn(),
                    TimeRemainingColumn(), console=console, transient=True)
