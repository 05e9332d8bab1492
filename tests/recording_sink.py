"""A sink in one file, named in one line of configuration (issue 25):
`output.sinks = ["recording_sink:RecordingSink"]` (tests/ is on sys.path).
It keeps what the job gives it, in this process (the driver's)."""

from __future__ import annotations

from isr.sinks.base import Run, Sink


class RecordingSink(Sink):
    last: "RecordingSink | None" = None  # the one the latest run built

    def __init__(self, settings) -> None:
        self.calls: list[str] = []
        self.batches: dict[int, list] = {}
        RecordingSink.last = self

    def open(self, run: Run) -> None:
        self.calls.append("open")
        self.others = [type(s).__name__ for s in run.sinks]

    def started(self, query_id: str) -> None:
        self.calls.append("started")

    def write_batch(self, batch_id: int, records: list) -> None:
        self.calls.append("write_batch")
        self.batches[batch_id] = list(records)

    def close(self) -> None:
        self.calls.append("close")

    def records(self) -> list:
        return [r for _batch, records in sorted(self.batches.items()) for r in records]
