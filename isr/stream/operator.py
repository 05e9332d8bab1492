"""The Spark stateful glue: one state key (bucket) holds a LocalEngine for
many partitions: their leader models, the events queued for the watermark,
the listeners' state (engine/snapshot.py).

Per call it restores the bucket, decodes the new rows in arrival order and
offers them to the engine's sequencer (unreadable or late ones become dead
letters at once), moves the watermark to what this batch reaches (its
largest ts minus the allowed lateness), which applies what lies below it and
runs the checks up to it, and returns the decisions, the changed partitions'
states and the dead letters as output records. No rule lives here.
"""

from __future__ import annotations

import json
import pickle
import zlib
from typing import Iterable, Iterator, Optional, Sequence

from isr.config import MonitorSettings
from isr.contract import Rejection, decode
from isr.contract.decisions import DeadLetter
from isr.contract.records import SUMMARY, OutputRecord, to_record
from isr.engine import snapshot
from isr.engine.listeners import TouchedPartitions
from isr.engine.local import LocalEngine, standard_listeners
from isr.engine.summary import model_stats
from isr.gc_tuning import fewer_gc_passes

# Per event, after the pre-stage in job.py; packed per bucket into Arrow IPC
# blobs (make_packer) so that the stateful operator gets few large rows.
# Name -> Arrow type (Spark's types for these columns).
EVENT_TYPES = {"ts": "int64", "seq": "int64", "key": "binary", "value": "binary",
               "topic": "string", "partition": "int32", "offset": "int64", "broadcast": "bool",
               "end_ts": "int64"}
EVENT_COLUMNS = list(EVENT_TYPES)
PACKED_SCHEMA = "bucket int, max_ts long, pack binary"
# What the operator receives. `max_ts` is the largest ts of the whole input
# batch the pack came from (not only of its bucket's events): every bucket gets
# a row from every input batch, so each knows the micro-batch's largest ts.
INPUT_COLUMNS = ["bucket", "pack", "max_ts", "et"]
STATE_SCHEMA = "engine binary"
# A value that is not an event but the end of a bounded input (replay).
END_OF_INPUT = b"\x00isr:end-of-input"


def source_name(topic: str, partition: int) -> str:
    """A Kafka partition as topic/partition; a file (partition -1) by its name."""
    return topic if partition < 0 else f"{topic}/{partition}"


def event_schema():
    """The Arrow schema of the packed events."""
    import pyarrow as pa

    return pa.schema([(name, pa.type_for_alias(t)) for name, t in EVENT_TYPES.items()])


def to_ipc(data) -> bytes:
    """An Arrow table or record batch as IPC stream bytes (packs)."""
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, data.schema) as writer:
        writer.write(data)
    return sink.getvalue().to_pybytes()


class Bucket:
    """One state key: its engine, and its layout (bucket index, number of
    buckets) so that a checkpoint is never read with another one."""

    __slots__ = ("engine", "touched", "layout")

    def __init__(self, engine: LocalEngine, touched: TouchedPartitions,
                 layout: Optional[tuple[int, int]] = None) -> None:
        self.engine, self.touched, self.layout = engine, touched, layout

    @property
    def watermark(self) -> int:
        return self.engine.sequencer.watermark


def layout_error(found, expected_buckets: int) -> ValueError:
    return ValueError(
        f"the state checkpoint holds bucket {found}, which is not a bucket of "
        f"stream.state_buckets = {expected_buckets}: this checkpoint was written with "
        "another bucket layout (another state_buckets, or an isr-monitor before bucket "
        "labels); start the job with a new stream.checkpoint_location")


def version_error(exc: Exception) -> ValueError:
    return ValueError(f"the state checkpoint cannot be read: {exc}; start the job with a new "
                      "stream.checkpoint_location")


class BucketProcessor:
    """What one call of the stateful function does, without Spark types, so
    it can be tested and benchmarked on its own."""

    def __init__(self, monitor: MonitorSettings) -> None:
        self.monitor = monitor
        self.several = len(monitor.policy) > 1

    def _listeners(self) -> tuple[list, TouchedPartitions]:
        touched = TouchedPartitions()
        return standard_listeners(self.monitor) + [touched], touched

    def restore(self, blob: Optional[bytes], layout: Optional[tuple[int, int]] = None) -> Bucket:
        """A bucket from its state (None: a new one). `layout` (index, buckets)
        must be the one the state was saved with."""
        listeners, touched = self._listeners()
        if blob is None:
            engine = LocalEngine(self.monitor, listeners=listeners, external_watermark=True)
            return Bucket(engine, touched, layout)
        state = pickle.loads(zlib.decompress(blob))
        if len(state) != 2 or state[0] != layout:
            found = state[0] if len(state) in (2, 4) else "without a layout"
            raise layout_error(found, layout[1] if layout else 0)
        try:
            engine = snapshot.restore(self.monitor, state[1], listeners=listeners,
                                      external_watermark=True)
        except snapshot.StateVersionError as exc:
            raise version_error(exc) from None
        return Bucket(engine, touched, layout)

    @staticmethod
    def save(bucket: Bucket) -> bytes:
        # Our own state store entry (never untrusted input), hence pickle.
        return zlib.compress(pickle.dumps((bucket.layout, snapshot.snapshot(bucket.engine)),
                                          protocol=5), 1)

    def process(self, bucket_id: int, bucket: Bucket, table, watermark: int,
                batch_max_ts: Optional[int] = None) -> list[OutputRecord]:
        """Apply one batch of rows (an Arrow table of event_schema(), in
        arrival order). Rows older than Spark's `watermark` (the previous
        batch's largest ts minus the allowed lateness) are late. Then the
        watermark moves on to this batch's largest ts (`batch_max_ts`, over
        all buckets) minus the lateness, the value Spark will hand the next
        batch: any row that could still come below it will be late, so what
        lies below is applied now, not one batch later."""
        engine = bucket.engine
        sequencer = engine.sequencer
        sequencer.external_watermark = max(sequencer.external_watermark, watermark)
        dead: list[DeadLetter] = []
        end_ts = None
        columns = {name: table.column(name).to_pylist() for name in
                   ("seq", "key", "value", "topic", "partition", "offset", "broadcast",
                    "end_ts")}
        for i, value in enumerate(columns["value"]):
            if value == END_OF_INPUT:
                end = columns["end_ts"][i]
                end_ts = end if end_ts is None else max(end_ts, end)
                continue
            origin = self._origin(columns, i)
            event = decode(value)
            if isinstance(event, Rejection):
                # A broadcast row (broker event) reaches every bucket; only
                # bucket 0 reports it.
                if not columns["broadcast"][i] or bucket_id == 0:
                    dead.append(DeadLetter.of(*origin, event.reason, event.reason_class))
                continue
            outcome = engine.submit(event, columns["seq"][i], origin)
            if outcome.status == "late" and (not columns["broadcast"][i] or bucket_id == 0):
                dead.append(DeadLetter.of(*origin, outcome.reason, "late"))
        engine.on_reject = lambda origin, reason: dead.append(
            DeadLetter.of(*origin, reason, "model"))
        if end_ts is not None:
            engine.finish(until=end_ts)
            return self._emit(engine, [to_record(s, self.several) for s in engine.states()],
                              dead, OutputRecord(SUMMARY, str(bucket_id), f"summary/{bucket_id}",
                                                 end_ts, json.dumps(model_stats(engine))))
        new = watermark if batch_max_ts is None else max(
            watermark, batch_max_ts - self.monitor.allowed_lateness_ms)
        engine.advance_watermark(new)
        states = [to_record(m.view(), self.several) for key in bucket.touched.take()
                  for m in self._models(engine, key)]
        return self._emit(engine, states, dead)

    @staticmethod
    def _origin(columns: dict, i: int) -> tuple[str, int, str]:
        """(source, offset, raw) of row i: a file reports its line number (the
        key), a Kafka partition its offset."""
        topic, partition = columns["topic"][i], columns["partition"][i]
        offset = int(columns["key"][i]) if partition < 0 else columns["offset"][i]
        return (source_name(topic, partition), offset,
                columns["value"][i].decode("utf-8", "backslashreplace"))

    @staticmethod
    def _models(engine: LocalEngine, key: tuple):
        for policy in engine.policies:
            m = engine.partitions[policy].get(key)
            if m is not None:
                yield m

    def _emit(self, engine: LocalEngine, states: list[OutputRecord], dead: list[DeadLetter],
              *extra: OutputRecord) -> list[OutputRecord]:
        engine.on_reject = None
        out = [*extra, *(to_record(d, self.several) for d in engine.take_decisions())]
        out.extend(states)
        out.extend(to_record(d) for d in dead)
        return out


def make_packer(labels: Sequence[int]):
    """For mapInArrow: each input batch becomes one row per bucket (by label,
    partitioning.py) holding that bucket's events as an Arrow IPC stream (no
    per-event Python work).
    Every bucket gets a row (empty pack if no event of the batch is its own)
    carrying the batch's largest ts, so that each bucket learns the
    micro-batch's largest ts and can release events one batch earlier."""

    def pack_by_bucket(batches: Iterator) -> Iterator:
        import pyarrow as pa
        import pyarrow.compute as pc

        for batch in batches:
            if batch.num_rows == 0:
                continue
            batch_max = pc.max(batch.column("ts")).as_py()
            order = pc.sort_indices(batch.column("bucket"))
            ordered = batch.take(order)
            runs = pc.run_end_encode(ordered.column("bucket"))
            packs: dict[int, bytes] = {}
            start = 0
            for value, end in zip(runs.values.to_pylist(), runs.run_ends.to_pylist()):
                part = ordered.slice(start, end - start)
                packs[value] = to_ipc(pa.RecordBatch.from_arrays(
                    [part.column(c) for c in EVENT_COLUMNS], names=EVENT_COLUMNS))
                start = end
            # A key that is not a label still gets its row, so that the state
            # function stops with a clear error instead of the events vanishing.
            targets = sorted(set(labels) | set(packs)) if batch_max is not None else sorted(packs)
            yield pa.RecordBatch.from_pydict(
                {"bucket": pa.array(targets, pa.int32()),
                 "max_ts": pa.array([batch_max] * len(targets), pa.int64()),
                 "pack": pa.array([packs.get(b, b"") for b in targets], pa.binary())})

    return pack_by_bucket


def unpack(packs: Iterable[bytes]):
    """The events of packed blobs as one Arrow table, in arrival order."""
    import pyarrow as pa

    batches = [batch for blob in packs if blob  # empty: no event of that input batch
               for batch in pa.ipc.open_stream(blob)]
    schema = event_schema()
    return pa.Table.from_batches(batches).cast(schema) if batches else schema.empty_table()


def make_state_function(monitor: MonitorSettings, labels: Sequence[int]):
    """The function for applyInPandasWithState, grouped by bucket label."""
    settings_json = monitor.model_dump_json()
    index_of = {label: i for i, label in enumerate(labels)}

    def process_bucket(key, pdfs: Iterator, state) -> Iterator:
        import pandas as pd

        bucket = index_of.get(int(key[0]))
        if bucket is None:
            raise layout_error(f"key {key[0]}", len(labels))
        with fewer_gc_passes():
            rows = _call(_processor(settings_json), (bucket, len(labels)), pdfs, state)
        if rows:
            yield pd.DataFrame(rows, columns=list(OutputRecord._fields))

    return process_bucket


def _call(processor: BucketProcessor, layout: tuple[int, int], pdfs: Iterator,
          state) -> list[OutputRecord]:
    """Restore the bucket (index, buckets), apply the batch's rows, save it."""
    bucket = layout[0]
    bucket_state = processor.restore(state.get[0] if state.exists else None, layout)
    watermark = state.getCurrentWatermarkMs()
    # All chunks of the batch at once: one partition_state per changed
    # partition per batch, not per chunk.
    packs: list[bytes] = []
    batch_max_ts = None
    for pdf in pdfs:
        packs.extend(pdf["pack"].tolist())
        top = pdf["max_ts"].max()
        if top == top and (batch_max_ts is None or top > batch_max_ts):  # not NaN
            batch_max_ts = int(top)
    rows = processor.process(bucket, bucket_state, unpack(packs), watermark, batch_max_ts)
    state.update((processor.save(bucket_state),))
    # Called again once Spark's watermark passes the one reached here, rows
    # or not: that is what runs the checks of partitions that get no events.
    state.setTimeoutTimestamp(max(bucket_state.watermark, watermark, 0) + 1)
    return rows


_PROCESSORS: dict[str, BucketProcessor] = {}


def _processor(settings_json: str) -> BucketProcessor:
    """One processor per Python worker and configuration (validated once)."""
    p = _PROCESSORS.get(settings_json)
    if p is None:
        p = _PROCESSORS[settings_json] = BucketProcessor(
            MonitorSettings.model_validate_json(settings_json))
    return p
