"""The one protocol every output of the streaming job speaks.

The job (stream/job.py, through pipeline/sinks.py) calls, for every sink in
the configured order: `open(run)` before the query starts, `started(query_id)`
once it runs, `write_batch(batch_id, records)` with each micro-batch's output
records on the driver, and `close()` when the run ends. A new sink is a class
with these methods in its own file, named in `output.sinks` ("module:Class",
built with the settings)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from isr.config import Settings
from isr.contract.records import OutputRecord


@dataclass
class Run:
    """What a sink may use when it opens: the settings, a way to hear Spark's
    progress reports (a dict each, Spark's JSON) and the other sinks (one
    sink may report on another: Prometheus counts the webhooks' deliveries)."""

    settings: Settings
    watch_progress: Callable[[Callable[[dict], None]], None] = lambda _on_progress: None
    sinks: list["Sink"] = field(default_factory=list)


class Sink:
    # The engine adds per-partition metrics to its output when a sink wants them.
    wants_partition_metrics = False

    def open(self, run: Run) -> None:
        """Before the first batch: start what runs beside the batches."""

    def started(self, query_id: str) -> None:
        """The query runs; its id is its checkpoint's, the same across restarts."""

    def write_batch(self, batch_id: int, records: list[OutputRecord]) -> Any:
        """One micro-batch's output records (a batch may come again after a
        restart: its id says so)."""
        raise NotImplementedError

    def close(self) -> None:
        """The run ended."""
