"""The Spark stateful glue: one state key (bucket) holds the leader models of
many partitions (an engine snapshot) and the raw events still waiting for the
watermark.

Per call it restores the bucket, queues the new rows (late or unreadable ones
become dead letters at once), decodes and applies what lies below the
watermark this batch reaches (its largest ts minus the allowed lateness),
runs the checks up to it, and returns the decisions, the changed partitions'
states and the dead letters as rows. No rule lives here.
"""

from __future__ import annotations

import json
import pickle
import zlib
from typing import Iterable, Iterator, Optional, Sequence

from isr.config import MonitorSettings
from isr.contract import Rejection, decode
from isr.contract.decisions import Alert, DeadLetter, IsrChange, IsrPropagation, PartitionState
from isr.engine.gc_passes import fewer_gc_passes
from isr.engine.local import LocalEngine, late_reason

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
OUTPUT_SCHEMA = "kind string, key string, id string, ts long, value string"
STATE_SCHEMA = "engine binary"
# A value that is not an event but the end of a bounded input (replay).
END_OF_INPUT = b"\x00isr:end-of-input"


def source_name(topic: str, partition: int) -> str:
    """A Kafka partition as topic/partition; a file (partition -1) by its name."""
    return topic if partition < 0 else f"{topic}/{partition}"


def decision_key(d) -> str:
    return f"{d.cluster}/{d.topic}/{d.partition}"


def state_key(s: PartitionState, several_policies: bool) -> str:
    key = decision_key(s)
    return f"{key}@{s.policy}" if several_policies else key


def output_row(d, several_policies: bool = False) -> tuple:
    """(kind, key, id, ts, value) for one output record."""
    if isinstance(d, IsrChange):
        return ("isr_change", decision_key(d), d.id, d.ts, d.model_dump_json())
    if isinstance(d, PartitionState):
        key = state_key(d, several_policies)
        return ("partition_state", key, f"{key}@{d.ts}", d.ts, d.model_dump_json())
    if isinstance(d, IsrPropagation):
        key = f"{d.cluster}/broker-{d.broker}"
        return ("isr_propagation", key, f"{key}/{d.policy}@{d.ts}", d.ts, d.model_dump_json())
    if isinstance(d, Alert):
        return ("alert", d.fingerprint, d.id, d.ts, d.model_dump_json())
    if isinstance(d, DeadLetter):
        return ("dead_letter", d.source, f"{d.source}@{d.offset}", -1, d.model_dump_json())
    raise TypeError(f"not an output record: {type(d).__name__}")


def event_schema():
    """The Arrow schema of the packed events."""
    import pyarrow as pa

    return pa.schema([(name, pa.type_for_alias(t)) for name, t in EVENT_TYPES.items()])


def to_ipc(data) -> bytes:
    """An Arrow table or record batch as IPC stream bytes (packs, state)."""
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, data.schema) as writer:
        writer.write(data)
    return sink.getvalue().to_pybytes()


class Bucket:
    """One state key: the leader models of its partitions, the raw events
    still waiting for the watermark (an Arrow table, sorted by ts and arrival;
    decoded once, when released), the watermark reached, and its layout
    (bucket index, number of buckets) so that a checkpoint is never read
    with another one."""

    __slots__ = ("engine", "pending", "watermark", "layout")

    def __init__(self, engine: LocalEngine, pending, watermark: int,
                 layout: Optional[tuple[int, int]] = None) -> None:
        self.engine, self.pending, self.watermark = engine, pending, watermark
        self.layout = layout


def layout_error(found, expected_buckets: int) -> ValueError:
    return ValueError(
        f"the state checkpoint holds bucket {found}, which is not a bucket of "
        f"stream.state_buckets = {expected_buckets}: this checkpoint was written with "
        "another bucket layout (another state_buckets, or an isr-monitor before bucket "
        "labels); start the job with a new stream.checkpoint_location")


class BucketProcessor:
    """What one call of the stateful function does, without Spark types, so
    it can be tested and benchmarked on its own. Rows are handled as Arrow
    columns until an event is released: queueing, sorting and the lateness
    test cost no Python work per event."""

    def __init__(self, monitor: MonitorSettings) -> None:
        self.monitor = monitor
        self.several = len(monitor.policy) > 1

    def restore(self, blob: Optional[bytes], layout: Optional[tuple[int, int]] = None) -> Bucket:
        """A bucket from its state (None: a new one). `layout` (index, buckets)
        must be the one the state was saved with."""
        if blob is None:
            return Bucket(LocalEngine(self.monitor, external_watermark=True),
                          event_schema().empty_table(), -1, layout)
        import pyarrow as pa

        state = pickle.loads(zlib.decompress(blob))
        if len(state) != 4 or state[0] != layout:
            found = state[0] if len(state) == 4 else "without a layout"
            raise layout_error(found, layout[1] if layout else 0)
        _, snapshot, pending, watermark = state
        engine = LocalEngine.restore(self.monitor, snapshot, external_watermark=True)
        return Bucket(engine, pa.ipc.open_stream(pending).read_all(), watermark, layout)

    @staticmethod
    def save(bucket: Bucket) -> bytes:
        # Our own state store entry (never untrusted input), hence pickle; the
        # models are in the engine's JSON snapshot, waiting events Arrow IPC.
        state = (bucket.layout, bucket.engine.snapshot(), to_ipc(bucket.pending),
                 bucket.watermark)
        return zlib.compress(pickle.dumps(state, protocol=5), 1)

    def process(self, bucket_id: int, bucket: Bucket, table, watermark: int,
                batch_max_ts: Optional[int] = None) -> list[tuple]:
        """Apply one batch of rows (an Arrow table of event_schema(), in
        arrival order). Rows older than Spark's `watermark` (the previous
        batch's largest ts minus the allowed lateness) are late. Then the
        watermark moves on to this batch's largest ts (`batch_max_ts`, over
        all buckets) minus the lateness, the value Spark will hand the next
        batch: any row that could still come below it will be late, so what
        lies below is applied now, not one batch later."""
        import pyarrow as pa
        import pyarrow.compute as pc

        engine = bucket.engine
        late_before = bucket.watermark = max(bucket.watermark, watermark)
        dead: list[DeadLetter] = []
        is_end = pc.equal(table["value"], pa.scalar(END_OF_INPUT, pa.binary()))
        end_ts = None
        if pc.any(is_end).as_py():
            end_ts = pc.max(table.filter(is_end)["end_ts"]).as_py()
            table = table.filter(pc.invert(is_end))
        late = pc.fill_null(pc.less(table["ts"], late_before), True)
        if pc.any(late).as_py():
            for row in table.filter(late).to_pylist():
                self._reject_now(row, bucket_id, late_before, dead)
            table = table.filter(pc.invert(late))
        queue = pa.concat_tables([bucket.pending, table])
        queue = queue.take(pc.sort_indices(queue, [("ts", "ascending"), ("seq", "ascending")]))
        if batch_max_ts is not None:
            bucket.watermark = max(bucket.watermark,
                                   batch_max_ts - self.monitor.allowed_lateness_ms)
        cut = len(queue) if end_ts is not None else pc.sum(
            pc.less(queue["ts"], bucket.watermark)).as_py() or 0
        ready, bucket.pending = queue.slice(0, cut), queue.slice(cut)
        for value, i in zip(ready["value"].to_pylist(), range(cut)):
            event = decode(value)
            if isinstance(event, Rejection):
                self._dead(dead, ready, i, bucket_id, event.reason, event.reason_class)
                continue
            outcome = engine.apply_next(event)
            if outcome.status == "rejected":
                self._dead(dead, ready, i, bucket_id, outcome.reason, "model")
        return self._emit(bucket_id, engine, bucket.watermark, end_ts, dead)

    def _reject_now(self, row: dict, bucket_id: int, watermark: int, dead: list) -> None:
        """A row without a usable ts, or older than the watermark: invalid
        beats late, as in the local engine."""
        event = decode(row["value"])
        if isinstance(event, Rejection):
            reason, reason_class = event.reason, event.reason_class
        else:
            reason, reason_class = late_reason(event.ts, watermark,
                                               self.monitor.allowed_lateness_ms), "late"
        self._dead_row(dead, row, bucket_id, reason, reason_class)

    def _dead(self, dead: list, table, i: int, bucket_id: int, reason: str,
              reason_class: str) -> None:
        self._dead_row(dead, table.slice(i, 1).to_pylist()[0], bucket_id, reason, reason_class)

    @staticmethod
    def _dead_row(dead: list, row: dict, bucket_id: int, reason: str, reason_class: str) -> None:
        # A broadcast row (broker event) reaches every bucket; only bucket 0
        # reports it.
        if row["broadcast"] and bucket_id != 0:
            return
        topic, partition = row["topic"], row["partition"]
        # A file reports its line number (the key), a Kafka partition its offset.
        offset = int(row["key"]) if partition < 0 else row["offset"]
        dead.append(DeadLetter.of(source_name(topic, partition), offset, row["value"], reason,
                                  reason_class))

    def _emit(self, bucket_id: int, engine: LocalEngine, watermark: int,
              end_ts: Optional[int], dead: list) -> list[tuple]:
        out: list[tuple] = []
        if end_ts is not None:
            engine.finish(until=end_ts)
            states = [m.view() for p in engine.policies
                      for _, m in sorted(engine.partitions[p].items())]
            engine.touched.clear()
            out.append(("summary", str(bucket_id), f"summary/{bucket_id}", end_ts,
                        json.dumps(engine.model_stats())))
        else:
            engine.advance_watermark(watermark)
            states = None
        decisions = engine.take_decisions()
        if states is None:
            states = engine.take_touched_states()
        out.extend(output_row(d, self.several) for d in decisions)
        out.extend(output_row(s, self.several) for s in states)
        out.extend(output_row(d) for d in dead)
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
            yield pd.DataFrame(rows, columns=["kind", "key", "id", "ts", "value"])

    return process_bucket


def _call(processor: BucketProcessor, layout: tuple[int, int], pdfs: Iterator,
          state) -> list[tuple]:
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
