"""A bounded streaming source over JSON-lines files, for `isr replay --engine spark`.

Same columns as the Kafka sources, or with the `isr.pack` option
(source.pack_option) rows packed for the buckets as it reads, as the
isr_kafka source does. `offset` is the line's index over all
files (the arrival order the local engine uses), `key` its 1-based line
number in its file (what a dead letter reports), `partition` is -1 (a file,
not a Kafka partition). Lines whose index is in the `skip` option's file are
left out (replay_spark.py judged them late or future already). After the
last line comes one end-of-input row whose key is the largest event time of
the input: it makes every bucket apply what it still holds and run its
checks up to that time.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Iterator, Optional, Sequence, Union

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from isr.linecap import DEFAULT_MAX_LINE_BYTES, Overlong, block_lines
from isr.stream.packing import END_OF_INPUT, Packer, fewer_gc_passes_while, packed_batch
from isr.sinks.progress import RECORDS
from isr.stream.planners import end_planner_after_call
from isr.stream.source import pack_settings, record_batch, source_schema

if TYPE_CHECKING:
    import numpy as np

# A file's (byte offset, line number) pairs: line_starts', or the row index's records.
Starts = Union[list[tuple[int, int]], "np.ndarray"]

# Each micro-batch's lines are read by this many tasks of equal size (a
# multiple of the cores here: 5 uneven chunks on 2 cores left one idle), and
# none smaller than MIN_CHUNK_ROWS.
READ_TASKS = 4
MIN_CHUNK_ROWS = 10_000


def line_starts(path: str,
                max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> list[tuple[int, int]]:
    """(byte offset, 1-based line number) of every non-blank line; a line over
    `max_line_bytes` counts as one, unread (replay_spark.Admission skips it)."""
    starts, pos = [], 0
    line: Any  # bytes or Overlong, told apart by `__class__` (mypy does not narrow on it)
    with open(path, "rb") as f:
        for number, line in enumerate(block_lines(f, max_line_bytes), 1):
            if line.__class__ is Overlong:
                starts.append((pos, number))
                pos += line.length + 1
                continue
            if line.strip():
                starts.append((pos, number))
            pos += len(line) + 1
    return starts


class LineRange(InputPartition):
    def __init__(self, path: str, label: str, first_index: int, first_line: int, count: int,
                 byte_start: int, end_row: bool, end_ts: int,
                 skip: frozenset = frozenset(),
                 max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
                 index: Optional[str] = None, file_end: int = 0) -> None:
        super().__init__((path, first_index, count))
        self.path, self.label, self.first_index, self.first_line, self.count = (
            path, label, first_index, first_line, count)
        self.byte_start, self.end_row, self.end_ts = byte_start, end_row, end_ts
        self.skip = skip  # row indices in this range to leave out
        self.max_line_bytes = max_line_bytes
        # The admission's row index (rowindex.py), and the row index after
        # this file's last row: packed_rows reads the range without decoding.
        self.index, self.file_end = index, file_end


class LinesStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options) -> None:
        opts = {str(k).lower(): v for k, v in dict(options).items()}
        self.paths: list[str] = json.loads(opts["paths"])
        # What dead letters name as the source (e.g. "-" for stdin).
        self.labels: list[str] = json.loads(opts.get("labels") or opts["paths"])
        self.end_ts = int(opts["end_ts"])
        skip_path = opts.get("skip")
        self.skip: list[int] = json.load(open(skip_path)) if skip_path else []
        # The admission's row index (rowindex.py) and each file's rows in it:
        # the lines' places are read from it, and they are packed without
        # decoding (packed_rows). Without it, every line is decoded here.
        self.index: Optional[str] = opts.get("index")
        self.file_rows: Optional[list[int]] = json.loads(opts["rows"]) if self.index else None
        limit = opts.get("maxoffsetspertrigger")
        self.max_rows = int(limit) if limit else None
        self.pack = pack_settings(options)  # packs as it reads (source.pack_option)
        self.max_line_bytes = int(opts.get("max_line_bytes") or DEFAULT_MAX_LINE_BYTES)
        self._starts: Optional[Sequence[Starts]] = None

    @property
    def starts(self) -> Sequence[Starts]:
        """Each file's line_starts, read when first needed: Spark makes
        readers in processes that only plan, where a whole pass over the
        input would be spent for nothing."""
        if self._starts is None:
            if self.index is not None:
                from isr.stream import rowindex  # numpy: only where it is used

                # (start, line, ...) records: a row's place, as line_starts gives it
                rows = self.file_rows  # (set with the index)
                self._starts = rowindex.file_starts(
                    rowindex.load(self.index), rows)  # type: ignore[arg-type]
            else:
                self._starts = [line_starts(p, self.max_line_bytes) for p in self.paths]
        return self._starts

    @property
    def total(self) -> int:
        """Rows over all files, +1 for the end row."""
        return sum(len(s) for s in self.starts) + 1

    def __getstate__(self) -> dict:
        # Spark pickles the reader into every read task, which needs only its
        # LineRange: leave the (large) line index on the driver.
        return {**self.__dict__, "_starts": None}

    def initialOffset(self) -> dict:
        return {"row": 0}

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        end = self.total
        if isinstance(limit, ReadMaxRows):
            end = min(end, start["row"] + limit.max_rows)
        # Rows read, as the records a packing reader hides from numInputRows (progress.py).
        return {"row": end, RECORDS: end - start["row"]}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.max_rows) if self.max_rows else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        pass  # files do not grow

    def partitions(self, start: dict, end: dict) -> list[LineRange]:
        ranges, base = [], 0
        lo, hi = start["row"], end["row"]
        chunk_rows = max(MIN_CHUNK_ROWS, -(-(hi - lo) // READ_TASKS))
        for path, label, starts in zip(self.paths, self.labels, self.starts):
            first, last = max(lo, base), min(hi, base + len(starts))
            # Chunks, so that several tasks read (and pre-process) in parallel.
            for chunk in range(first, last, chunk_rows):
                count = min(chunk_rows, last - chunk)
                byte, number = (int(x) for x in tuple(starts[chunk - base])[:2])
                skip = frozenset(i for i in self.skip if chunk <= i < chunk + count)
                ranges.append(LineRange(path, label, chunk, number, count, byte, False, 0, skip,
                                        self.max_line_bytes, self.index, base + len(starts)))
            base += len(starts)
        if lo <= base < hi:  # the end-of-input row
            ranges.append(LineRange("", "", base, 0, 0, 0, True, self.end_ts))
        return ranges

    # (Spark hands back the partitions `partitions` made: LineRanges.)
    def read(self, partition: LineRange) -> Iterator:  # type: ignore[override]
        if self.pack is None:
            return fewer_gc_passes_while(read_lines(partition))
        if partition.index is not None:
            # Imported here: Spark's planning processes import this module and
            # must connect back within 10 s (docs/streaming.md, "On a cluster").
            from isr.stream.packrows import packed_rows

            return fewer_gc_passes_while(packed_rows(partition, self.pack))
        return fewer_gc_passes_while(packed_lines(partition, self.pack))  # no clock: a replay


def line_columns(r: LineRange, batch_rows: int = 8192) -> Iterator[tuple[list, list, list]]:
    """The range's lines, `batch_rows` at a time: (line numbers, values, row
    indices), the lines in `r.skip` left out, blank lines not counted."""
    numbers: list[int] = []
    values: list[bytes] = []
    indices: list[int] = []
    skip = r.skip
    with open(r.path, "rb") as f:
        f.seek(r.byte_start)
        index, line_no, left = r.first_index, r.first_line, r.count
        raw: Any  # bytes or Overlong, told apart by `__class__` (mypy does not narrow on it)
        for raw in block_lines(f, r.max_line_bytes):
            if not left:
                break
            if raw.__class__ is Overlong:  # in r.skip: Admission dead-lettered it
                index, left, line_no = index + 1, left - 1, line_no + 1
                continue
            raw = raw.rstrip(b"\r\n")
            if raw.strip():
                if not skip or index not in skip:
                    numbers.append(line_no)
                    values.append(raw)
                    indices.append(index)
                    if len(indices) >= batch_rows:
                        yield numbers, values, indices
                        numbers, values, indices = [], [], []
                index, left = index + 1, left - 1
            line_no += 1
    if indices:
        yield numbers, values, indices


def read_lines(r: LineRange, batch_rows: int = 8192) -> Iterator:
    """The range's lines as Arrow record batches (the Kafka sources' columns)."""
    if r.end_row:
        yield record_batch([str(r.end_ts).encode()], [END_OF_INPUT], r.label, -1, [r.first_index])
        return
    for numbers, values, indices in line_columns(r, batch_rows):
        yield record_batch([str(n).encode() for n in numbers], values, r.label, -1, indices)


def packed_lines(r: LineRange, pack: dict, batch_rows: int = 8192) -> Iterator:
    """The range's lines packed for the buckets (PACKED_SCHEMA's rows), as
    `packed_batches(pack, read_lines(r, batch_rows), None)` gives them,
    without the trip through Arrow in between: the packer takes the columns
    as lists (a line number for a key, as `packing._line` reads it)."""
    packer = Packer(pack["labels"], pack["max_future_ms"])
    if r.end_row:
        yield packed_batch(packer.pack([r.end_ts], [END_OF_INPUT], [r.label], [-1],
                                       [r.first_index], None))
        return
    for numbers, values, indices in line_columns(r, batch_rows):
        n = len(indices)
        yield packed_batch(packer.pack(numbers, values, [r.label] * n, [-1] * n, indices, None))


class LinesDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "isr_lines"

    def schema(self) -> str:
        end_planner_after_call()
        return source_schema(self.options)

    def streamReader(self, schema) -> LinesStreamReader:
        end_planner_after_call()
        return LinesStreamReader(self.options)
