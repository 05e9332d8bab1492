"""A Kafka streaming source on Spark's Python Data Source API (confluent-kafka).

Where Spark's built-in `kafka` format cannot be used (its jar is not in the
pyspark wheel), `format("isr_kafka")` reads the same topics with the same
option names and the same columns (key, value, topic, partition, offset,
timestamp). Offsets are a JSON dict {"topic/partition": next offset} kept in
Spark's checkpoint; each micro-batch reads one input partition per Kafka
partition offset range, as Arrow record batches, or packed for the
buckets as it reads (`isr.pack`: packing.py).
"""

from __future__ import annotations

import json
import time
from operator import methodcaller
from typing import TYPE_CHECKING, Iterator, Optional

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

from isr.errors import DataLossError
from isr.stream.packing import (END_OF_RUN, PACKED_SCHEMA, Packer, fewer_gc_passes_while,
                                pack_batch, packed_batch)
from isr.sinks.progress import RECORDS
from isr.stream import trim
from isr.stream.planners import end_planner_after_call
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

if TYPE_CHECKING:
    from isr.kafka.client import OffsetProbe

# Spark's Kafka source's columns, plus `behind`: the partition holds more than
# this micro-batch reads of it (a backlog read in slices), so the watermark
# must wait for it (packing.hold_of).
SCHEMA = ("key binary, value binary, topic string, partition int, offset long, "
          "timestamp timestamp, behind boolean")
# What the job reads of a source (Spark's own Kafka source has no `behind`).
SOURCE_COLUMNS = ["key", "value", "topic", "partition", "offset", "behind"]
ARROW_BATCH_ROWS = 8192
# How far librdkafka fetches ahead of what a read task has consumed: two
# Arrow batches keep its fetches pipelined. Its default (queued.min.messages
# 100,000, or 64 MB) queued up to a whole micro-batch's share of the
# partition beyond the range's end, read and dropped, in the worker's memory
# at the read's peak (~50 MB a 50,000-record range at 100 k partitions,
# docs/benchmarks.md, issue 23, branch `rsscap`). kafka.properties override it.
READ_AHEAD = {"queued.min.messages": str(2 * ARROW_BATCH_ROWS)}
# How long Kafka may not answer before the job stops (kafka.outage_timeout_s).
DEFAULT_OUTAGE_S = 300.0


def record_batch(keys: list, values: list, topic: str, partition: int, offsets: list,
                 timestamps_us: Optional[list] = None, behind: bool = False):
    """One Arrow batch with the sources' columns (SCHEMA)."""
    import pyarrow as pa

    n = len(offsets)
    ts_type = pa.timestamp("us", tz="UTC")
    return pa.RecordBatch.from_arrays(
        [pa.array(keys, pa.binary()), pa.array(values, pa.binary()),
         pa.array([topic] * n, pa.string()), pa.array([partition] * n, pa.int32()),
         pa.array(offsets, pa.int64()),
         pa.nulls(n, ts_type) if timestamps_us is None else pa.array(timestamps_us, ts_type),
         pa.array([behind] * n, pa.bool_())],
        names=["key", "value", "topic", "partition", "offset", "timestamp", "behind"])


def _key(topic: str, partition: int) -> str:
    return f"{topic}/{partition}"


def _split(key: str) -> tuple[str, int]:
    topic, _, partition = key.rpartition("/")
    return topic, int(partition)


def client_options(options: dict) -> dict[str, str]:
    """Kafka client properties from `kafka.`-prefixed options, as Spark's connector."""
    return {k[len("kafka."):]: str(v) for k, v in options.items() if k.startswith("kafka.")}


def share_limit(lags: dict[str, int], max_rows: int) -> dict[str, int]:
    """Split a per-trigger row limit over partitions in proportion to their lag,
    deterministically, always making progress."""
    total = sum(lags.values())
    if total <= max_rows:
        return dict(lags)
    shares = {k: (lag * max_rows) // total for k, lag in lags.items()}
    left = max_rows - sum(shares.values())
    for k in sorted(lags):  # hand out what rounding left, in a fixed order
        if left <= 0:
            break
        if shares[k] < lags[k]:
            shares[k] += 1
            left -= 1
    return shares


class KafkaRange(InputPartition):
    def __init__(self, topic: str, partition: int, start: int, end: int, conf: dict,
                 outage_s: float, fail_on_data_loss: bool, behind: bool = False) -> None:
        super().__init__((topic, partition, start, end))
        self.topic, self.partition, self.start, self.end, self.conf = (
            topic, partition, start, end, conf)
        self.outage_s, self.fail_on_data_loss = outage_s, fail_on_data_loss
        self.behind = behind  # the partition holds more than this range
        self.clock: Optional[int] = None  # the batch's clock, when the reader packs


class DataLossRow(InputPartition):
    """One record saying which offsets of a partition were lost (offset -1:
    packing.is_data_loss)."""

    def __init__(self, topic: str, partition: int, reason: str) -> None:
        super().__init__((topic, partition, reason))
        self.topic, self.partition, self.reason = topic, partition, reason
        self.clock: Optional[int] = None


# In an end offset (the offset log keeps them, so a re-run batch reads alike):
GAPS = "~gaps"  # {partition key: [offset to read on from, reason]}
BEHIND = "~behind"  # [partition keys that hold more than the batch reads]
LAST = "~last"  # true: the last batch of an available-now run (packing.END_OF_RUN)
CLOCK = "~clock"  # the batch's clock (ms) when the reader packs: the future test's


def pack_option(labels, max_future_ms: int, live: bool) -> str:
    """The `isr.pack` option: the reader packs what it reads for the buckets
    (packing.py) and its rows are PACKED_SCHEMA's, not SCHEMA's. Both Python
    sources take it (this one and files.py)."""
    return json.dumps({"labels": list(labels), "max_future_ms": max_future_ms, "live": live})


def pack_settings(options) -> Optional[dict]:
    """The `isr.pack` option's settings; None: the reader does not pack."""
    pack = {str(k).lower(): v for k, v in dict(options).items()}.get("isr.pack")
    return json.loads(pack) if pack else None


def source_schema(options) -> str:
    return PACKED_SCHEMA if pack_settings(options) is not None else SCHEMA


def packed_batches(pack: Optional[dict], batches: Iterator, clock: Optional[int]) -> Iterator:
    """A reader's Arrow batches, packed for the buckets if it packs: Spark
    then sees a row per bucket per batch read, not one per event, and no
    packing stage runs after the source."""
    if pack is None:
        return batches
    packer = Packer(pack["labels"], pack["max_future_ms"])
    return _given_back_after(
        fewer_gc_passes_while(pack_batch(packer, b, clock) for b in batches if b.num_rows))


def _given_back_after(batches: Iterator) -> Iterator:
    """The batches, then what the read task freed goes back to the system
    (trim.py), as after a packing stage's task: the Python worker that ran
    it lives on, holding it until its next task."""
    yield from batches
    trim.give_back()


class EndOfRunRow(InputPartition):
    """The record that tells every bucket this is the last batch of the run."""

    def __init__(self) -> None:
        super().__init__("end-of-run")
        self.clock: Optional[int] = None


def _positions(offsets: dict) -> dict[str, int]:
    return {k: v for k, v in offsets.items() if not k.startswith("~")}


# How long a partition's end may stay below the offset already read before
# the job calls it lost (`_lost`).
WENT_BACK_GRACE_S = 10.0


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options) -> None:
        # Spark hands options over case-insensitively (keys lower-cased).
        self.options = {str(k).lower(): v for k, v in dict(options).items()}
        self.conf = client_options(self.options)
        if "bootstrap.servers" not in self.conf:
            raise ValueError("isr_kafka: option kafka.bootstrap.servers is required")
        self.topics = [t for t in self.options.get("subscribe", "").split(",") if t]
        self.pattern: Optional[str] = self.options.get("subscribepattern")
        if not self.topics and not self.pattern:
            raise ValueError("isr_kafka: set option subscribe or subscribePattern")
        self.starting = self.options.get("startingoffsets", "earliest")
        if self.starting not in ("earliest", "latest"):
            raise ValueError("isr_kafka: startingOffsets must be earliest or latest")
        limit = self.options.get("maxoffsetspertrigger")
        self.max_offsets = int(limit) if limit else None
        # Spark's connector's name and default for the same choice.
        self.fail_on_data_loss = str(self.options.get("failondataloss", "true")).lower() != "false"
        self.outage_s = float(self.options.get("isr.outagetimeouts", DEFAULT_OUTAGE_S))
        self.latest: dict[str, int] = {}
        self.went_back: dict[str, float] = {}  # partition -> when its end was first seen below
        self.target: Optional[dict[str, int]] = None  # Trigger.AvailableNow
        self.pack = pack_settings(self.options)
        self._probe: Optional[OffsetProbe] = None  # made at the first question

    def __getstate__(self) -> dict:
        # Spark pickles the reader into every read task; the probe's clients
        # stay with the driver's (their threads and sockets cannot travel).
        return {**self.__dict__, "_probe": None}

    def stop(self) -> None:
        if self._probe is not None:
            self._probe.close()

    # ------------------------------------------------------------ offsets
    def _marks(self) -> dict[str, tuple[int, int]]:
        """(log start, end) of every input partition, riding out an outage."""
        from isr.kafka.client import OffsetProbe, riding_out

        if self._probe is None:
            self._probe = OffsetProbe(self.conf)
        probe = self._probe

        def ask():
            tps = probe.partitions(self.topics, self.pattern)
            return {_key(t, p): v for (t, p), v in probe.watermarks(tps).items()}

        return riding_out("input", self.outage_s, ask)

    def initialOffset(self) -> dict:
        marks = self._marks()
        pick = 1 if self.starting == "latest" else 0
        return {k: v[pick] for k, v in marks.items()}

    def latestOffset(self, previous: dict, limit: ReadLimit) -> dict:
        start = _positions(previous)
        marks = self._marks()
        gaps = self._lost(start, marks)
        ends = {k: high for k, (_low, high) in marks.items()}
        if self.target is not None:  # AvailableNow: what was there when it began
            ends = {k: min(v, self.target[k]) for k, v in ends.items() if k in self.target}
        self.latest = {k: high for k, (_low, high) in marks.items()}
        # A partition new to the query is read from its start (or its end).
        begin = {k: gaps[k][0] if k in gaps else start.get(
            k, marks[k][0] if self.starting == "earliest" else marks[k][1]) for k in ends}
        ends = {k: max(v, begin[k]) for k, v in ends.items()}
        if isinstance(limit, ReadMaxRows):
            lags = {k: ends[k] - begin[k] for k in ends}
            shares = share_limit(lags, limit.max_rows)
            ends = {k: begin[k] + shares[k] for k in ends}
        if not gaps and all(ends[k] == begin[k] for k in ends):
            # Nothing to read: the same offsets as before, flags and all, or
            # Spark would take the dropped flags for news and run an empty batch.
            return previous
        end: dict = {**start, **ends}  # offsets, and the GAPS/BEHIND/LAST/RECORDS flags
        if gaps:
            end[GAPS] = {k: list(v) for k, v in gaps.items()}
        full = self.target if self.target is not None else self.latest
        behind = sorted(k for k, v in ends.items() if v < full.get(k, v))
        if behind:
            end[BEHIND] = behind
        elif self.target is not None and any(ends[k] > begin[k] for k in ends):
            end[LAST] = True  # it reads up to the target: nothing follows
        end[RECORDS] = sum(ends[k] - begin[k] for k in ends)
        if self.pack is not None and self.pack["live"]:
            # Kept in the offset log: a re-run batch judges future times alike.
            end[CLOCK] = int(time.time() * 1000)
        return end

    def _lost(self, start: dict[str, int], marks: dict) -> dict[str, tuple[int, str]]:
        """Partitions whose next offset is gone: {key: (offset to read on from, reason)}.
        Stops the job instead unless failOnDataLoss is false. Never in silence."""
        gaps = {}
        for key, begin in start.items():
            if key not in marks:
                continue  # not there now (a broker restarting): nothing to read yet
            low, high = marks[key]
            if high < begin:
                # Looked at again for a while first: a partition back from a
                # broker restart, or led by a replica whose high watermark has
                # not caught up yet, can show an end below what was read.
                seen = self.went_back.setdefault(key, time.monotonic())
                if time.monotonic() - seen < WENT_BACK_GRACE_S:
                    continue  # nothing to read from it meanwhile (latestOffset)
                why = (f"input {key}: offsets went back from {begin} to {high} (was the topic "
                       "deleted and created again?)")
            elif low > begin:
                why = f"input {key}: offsets {begin}..{low - 1} were deleted before they were read"
            else:
                self.went_back.pop(key, None)
                continue
            if self.fail_on_data_loss:
                raise DataLossError(
                    f"{why}; set input.fail_on_data_loss = false to read on and record the gap "
                    "as a dead letter, or start with a new stream.checkpoint_location")
            gaps[key] = (low, f"{why}; read on from offset {low}")
        return gaps

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.max_offsets) if self.max_offsets else ReadAllAvailable()

    def reportLatestOffset(self) -> Optional[dict]:
        return self.latest or None

    def prepareForTriggerAvailableNow(self) -> None:
        self.target = {k: high for k, (_low, high) in self._marks().items()}

    def partitions(self, start: dict, end: dict) -> list:
        gaps = end.get(GAPS, {})
        behind = set(end.get(BEHIND, ()))
        ranges: list = []
        for key in sorted(_positions(end)):
            topic, partition = _split(key)
            begin = start.get(key, 0)
            if key in gaps:
                begin, reason = gaps[key]
                ranges.append(DataLossRow(topic, partition, reason))
            if end[key] > begin:
                ranges.append(KafkaRange(topic, partition, begin, end[key], self.conf,
                                         self.outage_s, self.fail_on_data_loss, key in behind))
        if end.get(LAST):
            ranges.append(EndOfRunRow())
        for r in ranges:
            r.clock = end.get(CLOCK)
        return ranges

    def commit(self, end: dict) -> None:
        pass  # offsets live in Spark's checkpoint, not in a consumer group

    # ------------------------------------------------------------ data
    def read(self, partition) -> Iterator:
        if isinstance(partition, EndOfRunRow):
            batches = iter([record_batch([None], [END_OF_RUN], "isr:end-of-run", -1, [0])])
        elif isinstance(partition, DataLossRow):
            batches = iter([record_batch([None], [partition.reason.encode()], partition.topic,
                                         partition.partition, [-1])])
        elif self.pack is not None:
            return packed_range(partition, self.pack, partition.clock)
        else:
            batches = read_range(partition)
        return packed_batches(self.pack, batches, partition.clock)


def read_range(r: KafkaRange) -> Iterator:
    """The records [start, end) of one Kafka partition as Arrow record batches."""
    for c in range_columns(r):
        yield record_batch(c["key"], c["value"], r.topic, r.partition, c["offset"],
                           c["timestamp"], r.behind)


def packed_range(r: KafkaRange, pack: dict, clock: Optional[int]) -> Iterator:
    """The range's records packed for the buckets (PACKED_SCHEMA's rows), as
    `packed_batches(pack, read_range(r), clock)` gives them, without the trip
    through Arrow in between (~2 CPU s of the read tasks' ~12 in a 100 k
    partition run: docs/benchmarks.md, issue 23): the packer takes the
    columns as lists, as files.packed_lines gives them."""
    packer = Packer(pack["labels"], pack["max_future_ms"])

    def packed() -> Iterator:
        for c in range_columns(r, PACKED_FIELDS):
            n = len(c["offset"])
            # No keys: the packer reads a key only for a file's line number.
            yield packed_batch(packer.pack([None] * n, c["value"], [r.topic] * n,
                                           [r.partition] * n, c["offset"], clock,
                                           [r.behind] * n))

    return _given_back_after(fewer_gc_passes_while(packed()))


# range_columns' columns: all (a reader's Arrow batches), or what packing reads.
FIELDS = ("key", "value", "offset", "timestamp")
PACKED_FIELDS = ("value", "offset")


def range_columns(r: KafkaRange, fields: tuple = FIELDS) -> Iterator[dict[str, list]]:
    """The records [start, end) of one Kafka partition, ARROW_BATCH_ROWS at
    a time, as lists by column (`fields` of key, value, offset, timestamp
    in µs). An outage of up to `r.outage_s` is waited out; offsets deleted
    under the read stop it, or are reported as a data-loss record (offset -1)."""
    from confluent_kafka import KafkaError, TopicPartition

    from isr.errors import KafkaUnavailable
    from isr.kafka.client import consumer

    # "error": an offset that is gone must be said, never skipped by a reset.
    c = consumer({**READ_AHEAD, **r.conf},
                 **{"enable.partition.eof": True, "auto.offset.reset": "error"})
    keyed = "key" in fields
    columns = _no_columns(fields)
    try:
        c.assign([TopicPartition(r.topic, r.partition, r.start)])
        position, last_progress = r.start, time.monotonic()
        while position < r.end:
            messages = c.consume(num_messages=min(ARROW_BATCH_ROWS, r.end - position),
                                 timeout=1.0)
            offsets = _records_below(messages, r.end)
            if offsets:  # the common case, taken in bulk (C calls, no step per record)
                columns["value"] += map(_VALUE, messages)
                columns["offset"] += offsets
                if keyed:
                    columns["key"] += map(_KEY, messages)
                    columns["timestamp"] += [t * 1000 for _type, t in map(_TIMESTAMP, messages)]
                position = offsets[-1] + 1
                messages = []
            for m in messages:
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        if m.offset() >= r.end:  # type: ignore[operator]  # (an EOF has one)
                            position = r.end
                        continue
                    if err.code() == KafkaError._AUTO_OFFSET_RESET:
                        position = _lost_under_read(c, r, position, columns)
                        break
                    if err.fatal():
                        raise RuntimeError(f"isr_kafka: reading {r.topic}/{r.partition}: {err}")
                    continue  # transient (a broker restarting): librdkafka retries
                offset: int = m.offset()  # type: ignore[assignment]  # (a record has one)
                if offset >= r.end:
                    position = r.end
                    break
                columns["value"].append(m.value())
                columns["offset"].append(offset)
                if keyed:
                    columns["key"].append(m.key())
                    columns["timestamp"].append(m.timestamp()[1] * 1000)
                position = offset + 1
            if offsets or messages:
                last_progress = time.monotonic()
            elif time.monotonic() - last_progress > r.outage_s:
                raise KafkaUnavailable(
                    f"input {r.topic}/{r.partition}: no record for {r.outage_s:g} s at offset "
                    f"{position} (end {r.end}; kafka.outage_timeout_s)")
            if len(columns["offset"]) >= ARROW_BATCH_ROWS:
                yield columns
                columns = _no_columns(fields)
        if columns["offset"]:
            yield columns
    finally:
        c.close()


_ERROR, _OFFSET, _KEY, _VALUE, _TIMESTAMP = map(
    methodcaller, ("error", "offset", "key", "value", "timestamp"))


def _records_below(messages: list, end: int) -> Optional[list[int]]:
    """The offsets of `messages` if every one is a record (no error, no
    end-of-partition event) below `end`, else None (and None for no
    messages): then they are looked at one by one."""
    # A KafkaError is true (and compares with None by raising): any() finds one.
    if not messages or any(map(_ERROR, messages)):
        return None
    offsets = list(map(_OFFSET, messages))
    return offsets if offsets[-1] < end else None  # a partition's offsets only grow


def _no_columns(fields: tuple = FIELDS) -> dict[str, list]:
    return {n: [] for n in fields}


def _lost_under_read(c, r: KafkaRange, position: int, columns: dict) -> int:
    """Offsets deleted while the range was read: stop, or record the gap and
    read on from the log's start."""
    from confluent_kafka import TopicPartition

    low, _high = c.get_watermark_offsets(TopicPartition(r.topic, r.partition), timeout=10)
    why = (f"input {r.topic}/{r.partition}: offsets {position}..{low - 1} were deleted "
           "before they were read")
    if r.fail_on_data_loss:
        raise DataLossError(f"{why}; set input.fail_on_data_loss = false to read on and record "
                            "the gap as a dead letter, or start with a new "
                            "stream.checkpoint_location")
    columns["value"].append(f"{why}; read on from offset {low}".encode())
    columns["offset"].append(-1)
    if "key" in columns:
        columns["key"].append(None)
        columns["timestamp"].append(None)
    c.assign([TopicPartition(r.topic, r.partition, low)])
    return low


class IsrKafkaDataSource(DataSource):
    """`spark.readStream.format("isr_kafka").option("kafka.bootstrap.servers", ...)
    .option("subscribe", "topic").load()`"""

    @classmethod
    def name(cls) -> str:
        return "isr_kafka"

    def schema(self) -> str:
        end_planner_after_call()
        return source_schema(self.options)

    def streamReader(self, schema) -> KafkaStreamReader:
        end_planner_after_call()
        return KafkaStreamReader(self.options)
