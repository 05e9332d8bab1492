"""What a run of the pipeline gives back (the local replay and the Spark
replay alike), kept on a low floor so that the console and the Spark path
read it without importing the pipelines themselves."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Optional, Sequence

from isr.contract import DeadLetter
from isr.engine.summary import PolicySummary
from isr.engine.whatif import PolicyRow, WhatIf
from isr.linecap import Overlong

TOO_LONG = "too_long"  # the dead letters' reason class of a line over input.max_line_bytes


@dataclass
class ReplayStats:
    lines: int = 0
    accepted: int = 0
    dead_letters: Counter = field(default_factory=Counter)
    ignored: Counter = field(default_factory=Counter)
    # fetch_session requests taken as a new session (isr/model/session.py)
    session_anomalies: Counter = field(default_factory=Counter)


@dataclass
class ReplayResult:
    decisions: list
    states: Sequence  # a PartitionStates (contract/decisions.py), or []
    dead_letters: list[DeadLetter]
    stats: ReplayStats
    summary: list[PolicySummary]
    whatif: Optional[WhatIf] = None
    whatif_rows: list[PolicyRow] = field(default_factory=list)


class Progress:
    """How far the reading got: `advance(task, bytes)` is called per 4096 lines."""

    def start(self, name: str, total: Optional[int]) -> object:
        return None

    def advance(self, task: object, completed: int) -> None:
        pass

    def done(self, task: object) -> None:
        pass


def too_long(source: str, offset: int, line: Overlong) -> DeadLetter:
    """Nothing of the line was kept: its length is the evidence."""
    return DeadLetter.of(source, offset, b"", line.reason, TOO_LONG).model_copy(
        update={"raw_truncated": True, "raw_size": line.length})
