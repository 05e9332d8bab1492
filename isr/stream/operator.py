"""The Spark stateful glue: one state key (bucket) holds a LocalEngine for
many partitions: their leader models, the events queued for the watermark,
the listeners' state (engine/snapshot.py).

Per call it restores the bucket, takes the batch's packed records
(packing.py) in arrival order, dead-letters those the packing stage already
rejected, offers the others to the engine's sequencer (a late one becomes a
dead letter at once), moves the watermark to what every source partition of
the batch has reached (packing.hold_of) minus the allowed lateness, which
applies what lies below it and runs the checks up to it, and returns the
decisions, the changed partitions' states and the dead letters as output
records. The watermark lives in the bucket's own state: every bucket gets a
row from every input task, so all compute the same one, and Spark's own
watermark (which every record, valid or not, would move) is not used. No
rule lives here.
"""

from __future__ import annotations

import json
import pickle
import zlib
from typing import Callable, Iterable, Iterator, Optional, Sequence

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from isr.config import MonitorSettings, Settings
from isr.contract.decisions import DeadLetter
from isr.contract.records import (PARTITION_METRICS, PROPAGATION_STATE, SUMMARY, WATERMARK,
                                  OutputRecord, state_record, to_record)
from isr.engine import snapshot
from isr.engine.local import LocalEngine
from isr.engine.sequencer import LATE
from isr.engine.summary import model_stats
from isr.errors import CheckpointError
from isr.gc_tuning import no_gc_passes_in_call
from isr.pipeline.listeners import standard_listeners
from isr.stream import engineproc, statelog, trim
from isr.stream.packing import END_OF_RUN, PACK_COLUMNS, hold_of, session_home, unpack
from isr.stream.throttle import StateThrottle

STATE_SCHEMA = "engine binary"

# A bucket's state is compressed with zstd at level 1: at 50 k partitions per
# bucket it is 3× faster than zlib at level 1 to write and 1.8× to read, and
# 1.5× smaller (docs/benchmarks.md). The magic prefix tells it from the zlib
# states written before, which are still read.
_ZSTD = pa.Codec("zstd", compression_level=1)
_ZSTD_MAGIC = b"isr-zstd"


def compress_state(data: bytes) -> bytes:
    return _ZSTD_MAGIC + len(data).to_bytes(8, "little") + _ZSTD.compress(data, asbytes=True)


def decompress_state(blob: bytes) -> bytes:
    if not blob.startswith(_ZSTD_MAGIC):
        return zlib.decompress(blob)  # a state saved before zstd
    start = len(_ZSTD_MAGIC)
    size = int.from_bytes(blob[start:start + 8], "little")
    return _ZSTD.decompress(memoryview(blob)[start + 8:], size, asbytes=True)


class Bucket:
    """One state key: its engine, and its layout (bucket index, number of
    buckets) so that a checkpoint is never read with another one."""

    __slots__ = ("engine", "touched", "layout", "arrived", "deferred", "written")

    def __init__(self, engine: LocalEngine, touched: StateThrottle,
                 layout: Optional[tuple[int, int]] = None) -> None:
        self.engine, self.touched, self.layout = engine, touched, layout
        # The events queued in this batch, as the sequencer holds them (statelog.py).
        self.arrived: list[tuple] = []
        # Queue chunks of the row not decoded yet (statelog.undefer).
        self.deferred: list[list] = []
        # The queue chunks of this batch's events, written before the
        # watermark moved (statelog.hold_arrived), for the save.
        self.written: list[list] = []

    @property
    def watermark(self) -> int:
        return self.engine.sequencer.watermark


def layout_error(found, expected_buckets: int) -> CheckpointError:
    return CheckpointError(
        f"the state checkpoint holds bucket {found}, which is not a bucket of "
        f"stream.state_buckets = {expected_buckets}: this checkpoint was written with "
        "another bucket layout (another state_buckets, or an isr-monitor before bucket "
        "labels); start the job with a new stream.checkpoint_location")


def version_error(exc: Exception) -> CheckpointError:
    return CheckpointError(f"the state checkpoint cannot be read: {exc}; start the job with a new "
                      "stream.checkpoint_location")


class BucketProcessor:
    """What one call of the stateful function does, without Spark types, so
    it can be tested and benchmarked on its own."""

    def __init__(self, monitor: MonitorSettings, state_interval_ms: int = 0,
                 partition_metrics: bool = False, metrics_refresh_ms: int = 0,
                 metrics_busy_refresh_ms: int = 0) -> None:
        """`state_interval_ms`: output.state_interval_ms (throttle.py);
        `partition_metrics`: also report partitions' states to the metrics
        each batch, in one record per bucket: every one whose health
        changed, the others whose offsets or followers' times move once per
        `metrics_busy_refresh_ms` (metrics.busy_refresh_interval_ms; 0:
        every batch), the quiet ones once per `metrics_refresh_ms`
        (metrics.refresh_interval_ms; 0: every touched one every batch;
        StateThrottle.metrics_keys)."""
        self.monitor = monitor
        self.several = len(monitor.policy) > 1
        self.state_interval_ms = state_interval_ms
        self.partition_metrics = partition_metrics
        self.metrics_refresh_ms = metrics_refresh_ms
        self.metrics_busy_refresh_ms = metrics_busy_refresh_ms

    def restore(self, blob: Optional[bytes], layout: Optional[tuple[int, int]] = None,
                snapshot_blob: Optional[snapshot.State] = None) -> Bucket:
        """A bucket from its layout-1 state (None: a new one, or the one of
        `snapshot_blob`, an engine snapshot without its queue, as bytes or as
        snapshot.fold_log decoded it). `layout`
        (index, buckets) must be the one the state was saved with."""
        touched = StateThrottle(self.state_interval_ms, self.metrics_refresh_ms,
                                self.metrics_busy_refresh_ms)
        listeners = standard_listeners(self.monitor, propagation=False) + [touched]
        if blob is None and snapshot_blob is not None:
            try:
                engine = snapshot.restore(self.monitor, snapshot_blob, listeners=listeners,
                                          external_watermark=True)
            except snapshot.StateVersionError as exc:
                raise version_error(exc) from None
            return Bucket(engine, touched, layout)
        if blob is None:
            engine = LocalEngine(self.monitor, listeners=listeners, external_watermark=True)
            return Bucket(engine, touched, layout)
        state = pickle.loads(decompress_state(blob))
        # (layout, snapshot, queue); before the queue was kept apart: (layout, snapshot)
        if len(state) not in (2, 3) or state[0] != layout:
            found = state[0] if len(state) in (2, 3, 4) else "without a layout"
            raise layout_error(found, layout[1] if layout else 0)
        try:
            engine = snapshot.restore(self.monitor, state[1], listeners=listeners,
                                      external_watermark=True,
                                      queued=state[2] if len(state) == 3 else None)
        except snapshot.StateVersionError as exc:
            raise version_error(exc) from None
        return Bucket(engine, touched, layout)

    @staticmethod
    def save(bucket: Bucket) -> bytes:
        # Our own state store entry (never untrusted input), hence pickle. The
        # queue (every event of the allowed lateness, saved again each batch)
        # is pickled as raw bytes: no JSON escaping, no decoding on restore.
        engine = bucket.engine
        return compress_state(pickle.dumps(
            (bucket.layout, snapshot.snapshot(engine, with_queue=False),
             snapshot.queued_raw(engine)), protocol=5))

    def process(self, bucket_id: int, bucket: Bucket, table, hold: Optional[int],
                hand_over: Optional[Callable[[list], None]] = None,
                queued: Optional[Callable[[Bucket], None]] = None) -> list[OutputRecord]:
        """Apply one batch's packed records (an Arrow table of packing's
        columns, in arrival order). Records older than the bucket's watermark
        (what the batches before reached) are late. Then the watermark moves
        on to `hold` (what every source partition of this batch reached) minus
        the allowed lateness: whatever could still come below it will be late,
        so what lies below is applied now. `hand_over`: takes the output
        records made so far, in order, whenever REPLY_ROWS of them are
        ready once the batch is applied, and empties the list (the engine
        process writes them to the worker: _emit); the rest are returned.
        `queued`: called once the batch's events are queued, before the
        watermark moves (statelog.hold_arrived writes them to the row's queue
        chunks there, and lets go of them)."""
        engine = bucket.engine
        dead: list[DeadLetter] = []
        self._speak_for_sessions(engine, bucket.layout)
        bucket.touched.begin(bucket.watermark)
        end_ts, flush = _admit(engine, bucket, table, dead)
        del table
        if queued is not None:
            queued(bucket)

        def on_reject(origin: Optional[tuple[str, int, bytes]], reason: str) -> None:
            if origin is not None:  # a share without it: another bucket reports it
                dead.append(DeadLetter.of(*origin, reason, "model"))

        engine.on_reject = on_reject
        try:
            if end_ts is not None:
                statelog.undefer(bucket, None)
                engine.finish(until=end_ts)
                stats = OutputRecord(SUMMARY, str(bucket_id), f"summary/{bucket_id}", end_ts,
                                     json.dumps(bucket_summary(engine)))
                bucket.touched.take_touched()
                # Every model's state goes out: each brought up to date and
                # visited once (engine.models() does the catching up).
                models = list(engine.models())
                bucket.touched.all_sent(models, engine.max_ts)
                return self._emit(engine, (state_record(m.state_fields(), self.several)
                                           for m in models), dead, [stats], hand_over)
            if hold is not None:
                statelog.undefer(bucket, hold - self.monitor.allowed_lateness_ms)
                engine.advance_watermark(hold - self.monitor.allowed_lateness_ms)
            wm = bucket.watermark
            internal = [OutputRecord(WATERMARK, str(bucket_id), f"watermark/{bucket_id}", wm, "")]
            models_of = lambda key: self._models(engine, key)  # noqa: E731
            touched = bucket.touched.take_touched()
            states = _StatesOnce(self.several)
            shown: list = []  # (model, its state record) the metrics show
            if self.partition_metrics and touched:
                keys = bucket.touched.metrics_keys(
                    touched, lambda key: self._models(engine, key, False), wm,
                    engine.session_driver.sessions.by_sid)
                shown = [(m, states(m)) for key in keys for m in models_of(key)]
            due = bucket.touched.due(lambda key: self._models(engine, key, False), wm, flush,
                                     engine.current)
            if shown:
                internal.append(OutputRecord(
                    PARTITION_METRICS, str(bucket_id), f"metrics/{bucket_id}", wm,
                    _metrics_value(shown, due)))
                del shown
            return self._emit(engine, (states.take(m) for m in due), dead, internal,
                              hand_over)
        finally:
            engine.on_reject = None

    @staticmethod
    def _speak_for_sessions(engine: LocalEngine, layout: Optional[tuple[int, int]]) -> None:
        """Every bucket applies every fetch session (its share of it), so all
        meet the same session anomalies; only the session's home bucket
        counts them (packing.session_home), so the job counts each once."""
        if layout is None:
            return  # a bucket on its own (tests, benchmarks): it counts all
        index, buckets = layout
        engine.session_driver.counts_anomaly = (
            lambda ev: session_home(ev.cluster, ev.leader, buckets) == index)

    @staticmethod
    def _models(engine: LocalEngine, key: tuple, current: bool = True):
        """The partition's models, each up to date (its session fetches and
        the checks the deadline index skipped) before it is shown
        (`current`), else as they stand."""
        for policy in engine.policies:
            m = engine.partitions[policy].get(key)
            if m is not None:
                yield engine.current(m) if current else m

    def _emit(self, engine: LocalEngine, states: Iterable[OutputRecord],
              dead: list[DeadLetter], internal: list[OutputRecord],
              hand_over: Optional[Callable[[list], None]] = None) -> list[OutputRecord]:
        """The batch's output records; `states`: the partition_state records
        (records.state_record of their models' state_fields), made as they
        are written: a state's fields (~1.3 KB) are let go of once its
        record (~0.8 KB) is made, not all held until the last record is
        (~65 and ~40 MB at 50,000 states a bucket; docs/benchmarks.md,
        issue 23, branch `engreply`). With `hand_over` (process) they are
        handed over REPLY_ROWS at a time as they are made: every decision
        and dead letter of the batch is known by now, so nothing after can
        change what went."""
        out = [*internal, *(to_record(d, self.several) for d in engine.take_decisions())]
        handed = engine.unclaimed.get("propagation")
        if handed:  # a row from when the buckets ran it: the driver's stage takes it on
            out.append(OutputRecord(PROPAGATION_STATE, "propagation", "propagation_state",
                                    engine.sequencer.external_watermark, json.dumps(handed)))
        if hand_over is None:
            out.extend(states)
        else:
            piece = engineproc.REPLY_ROWS
            for record in states:
                out.append(record)
                if len(out) >= piece:
                    hand_over(out)
        out.extend(to_record(d) for d in dead)
        return out


class _StatesOnce(dict):
    """A batch's models' partition_state records, each made once: a model
    the metrics show is often a throttled state of the same batch too (every
    partition whose interval ends, ~125 k of 490 k at 100 k partitions,
    docs/benchmarks.md, branch `metricscost`), at the same watermark and
    caught up by the first view (engine.current), so both outputs show the
    same fields, and the metrics record lists the same JSON (records.
    state_record's value is the fields' orjson text). Held as the record
    (~0.8 KB), its fields let go of at once (~1.3 KB; ~65 MB at 50,000
    states a bucket; docs/benchmarks.md, issue 23, branch `engreply`).
    Keyed by the model's id: every model outlives the batch."""

    def __init__(self, several: bool) -> None:
        super().__init__()
        self.several = several

    def __call__(self, model) -> OutputRecord:
        record = self.get(id(model))
        if record is None:
            record = self[id(model)] = state_record(model.state_fields(), self.several)
        return record

    def take(self, model) -> OutputRecord:
        """The model's state record, to write: no longer kept here (a
        model's state goes out once a batch)."""
        record = self.pop(id(model), None)
        return state_record(model.state_fields(), self.several) if record is None else record


def _metrics_value(shown: list, due: list) -> str:
    """The partition_metrics record's JSON list: each shown model's state
    (`shown`: (model, its state record)), or, for a model whose
    partition_state record this batch writes too (`due`), that record's id:
    the same JSON once in the bucket's result, not twice
    (records.metrics_states reads it back)."""
    going = {id(m) for m in due}
    return _json_list([orjson.dumps(r.id).decode() if id(m) in going else r.value
                       for m, r in shown])


def _json_list(texts: list[str]) -> str:
    """The JSON array of JSON `texts`, as orjson.dumps of the values they
    encode writes it (no spaces, elements comma-separated), from the texts
    themselves: neither the values nor the array's bytes beside its text."""
    return "[" + ",".join(texts) + "]"


def _admit(engine: LocalEngine, bucket: Bucket, table, dead: list) -> tuple:
    """Offer the batch's packed records to the engine's sequencer, in
    arrival order: (the end of input's ts or None, whether the run ends).
    The events queued go to `bucket.arrived` as well, the others to `dead`;
    the batch's columns as lists are let go of on return (their events are
    then held by the queue and `bucket.arrived` only)."""
    end_ts = None
    flush = False
    arrived = bucket.arrived = []
    plain, table = _split_plain(table, bucket.watermark)
    if plain is not None:  # events none of which is late: queued at once
        arrived.extend(zip(plain["ts"], plain["seq"], plain["value"],
                           zip(plain["source"], plain["offset"], plain["value"])))
        engine.queue_raw(arrived, plain["max_ts"])
    cols = {name: table.column(name).to_pylist() for name in PACK_COLUMNS}
    sources, offsets, reasons = cols["source"], cols["offset"], cols["reason"]
    ts_of = cols["ts"]
    shared, wholes = cols["shared"], cols["whole"]
    submit = engine.submit_raw
    for i, value in enumerate(cols["value"]):
        end = cols["end_ts"][i]
        if end is not None:
            end_ts = end if end_ts is None else max(end_ts, end)
            continue
        if reasons[i] is not None:  # rejected when it was packed
            dead.append(DeadLetter.of(sources[i], offsets[i], value, reasons[i],
                                      cols["reason_class"][i]))
            continue
        if value == END_OF_RUN:  # packed as such only from the source's own row
            flush = True
            continue
        origin: Optional[tuple[str, int, bytes]] = (sources[i], offsets[i], value)
        if shared[i]:  # one bucket's share of a fetch session: one bucket reports it
            whole = wholes[i]
            origin = None if whole is None else (sources[i], offsets[i], whole)
        # Validated by the packing stage: decoded when the watermark releases it.
        outcome = submit(ts_of[i], value, cols["seq"][i], origin)
        if outcome.status == LATE:
            if origin is not None:  # a share without it: another bucket reports it
                dead.append(DeadLetter.of(*origin, outcome.reason, LATE))
        else:
            arrived.append((ts_of[i], cols["seq"][i], value, origin))
    return end_ts, flush


def _split_plain(table, watermark: int):
    """(the columns `process` needs of the batch's plain events as lists, the
    other rows as a table). Plain: an event packed as it came (no rejection,
    marker or session share), at or after the bucket's `watermark` (not
    late); those are queued at once. (None, table) when any is late."""
    n = table.num_rows
    if not n:
        return None, table
    ts = table.column("ts")
    plain = pc.and_(pc.and_(pc.is_valid(ts), pc.is_null(table.column("reason"))),
                    pc.and_(pc.is_null(table.column("end_ts")),
                            pc.is_null(table.column("shared"))))
    count = pc.sum(plain).as_py() or 0
    if not count:
        return None, table
    events, rest = ((table, table.slice(0, 0)) if count == n else
                    (table.filter(plain), table.filter(pc.invert(plain))))
    ts = events.column("ts")
    if pc.min(ts).as_py() < watermark:
        return None, table
    sources = events.column("source")
    names = pc.unique(sources)
    return ({"ts": _ints(ts), "max_ts": pc.max(ts).as_py(),
             "seq": _ints(events.column("seq")), "value": events.column("value").to_pylist(),
             "source": ([names[0].as_py()] * count if len(names) == 1
                        else sources.to_pylist()),
             "offset": _ints(events.column("offset"))}, rest)


def _ints(column) -> list:
    """An integer column as a list (`to_pylist`), through numpy when it has
    no nulls: the same ints for a third of the cost."""
    return column.to_numpy().tolist() if not column.null_count else column.to_pylist()


def bucket_summary(engine: LocalEngine) -> dict:
    """The SUMMARY record's value: the bucket's model statistics, and the
    fetch-session anomalies it counted (replay_spark.collect adds them up)."""
    return {"models": model_stats(engine),
            "session_anomalies": dict(engine.session_driver.sessions.anomalies)}


def processor_config(monitor: MonitorSettings, state_interval_ms: int = 0,
                     partition_metrics: bool = False, metrics_refresh_ms: int = 0,
                     metrics_busy_refresh_ms: int = 0) -> str:
    """BucketProcessor's arguments as the one string the workers receive
    (and _processor's cache key). Left out, an interval is 0: every touched
    partition reported, as BucketProcessor's own defaults do."""
    return json.dumps([monitor.model_dump_json(), state_interval_ms, partition_metrics,
                       metrics_refresh_ms, metrics_busy_refresh_ms])


def job_processor_config(settings: Settings, partition_metrics: bool) -> str:
    """processor_config as the job sets it from its settings (the benches
    that call the operator without Spark use it too, to measure the same)."""
    return processor_config(settings.monitor, settings.output.state_interval_ms,
                            partition_metrics, settings.metrics.refresh_interval_ms,
                            settings.metrics.busy_refresh_interval_ms)


def make_state_function(settings_json: str, labels: Sequence[int], identity: str = ""):
    """The function for applyInPandasWithState, grouped by bucket label;
    `settings_json`: processor_config's. `identity`: the query's (its
    checkpoint), so that the workers' engine cache (statelog.py) keeps two
    queries' buckets apart."""
    index_of = {label: i for i, label in enumerate(labels)}

    def process_bucket(key, pdfs: Iterator, state) -> Iterator:
        bucket = index_of.get(int(key[0]))
        if bucket is None:
            raise layout_error(f"key {key[0]}", len(labels))
        layout = (bucket, len(labels))
        query = (identity, settings_json)
        blob, packs, summaries = _inputs(pdfs, state)
        if engineproc.enabled():  # the bucket's engine process runs the call
            reply = engineproc.call(settings_json, layout, blob, packs, summaries, query)
            del blob, packs, summaries  # not held while the outputs come
            # one frame per piece of the reply, each handed to Spark as it
            # comes: never all of the outputs at once (engineproc.Reply)
            for piece in reply.pieces():
                yield _frame(piece)
            row = reply.row
        else:
            rows, row = _call_rows(_processor(settings_json), layout, blob, packs, summaries,
                                   query)
            del blob, packs, summaries
            for start in range(0, len(rows), engineproc.REPLY_ROWS):
                yield _frame(rows[start:start + engineproc.REPLY_ROWS])
            del rows
        # Spark reads the state once every frame is taken (applyInPandasWithState)
        state.update((row,))
        trim.give_back()  # the batch's records, its old and new row (trim.py)

    return process_bucket


def _frame(rows: list):
    """A pandas frame of output rows (OutputRecords or tuples of their fields)."""
    import pandas as pd

    return pd.DataFrame(rows, columns=_COLUMNS)


_COLUMNS = list(OutputRecord._fields)


def _inputs(pdfs: Iterator, state) -> tuple[Optional[bytes], list, list]:
    """A bucket call's state row (None: none yet) and the batch's packs and
    summaries, all chunks of the batch at once: one partition_state per
    changed partition per batch, not per chunk."""
    packs: list[bytes] = []
    summaries: list[bytes] = []
    for pdf in pdfs:
        packs.extend(pdf["pack"].tolist())
        summaries.extend(pdf["summary"].tolist())
    return (state.get[0] if state.exists else None), packs, summaries


def _call(processor: BucketProcessor, layout: tuple[int, int], pdfs: Iterator,
          state, query: tuple = ()) -> list[OutputRecord]:
    """Restore the bucket (index, buckets), apply the batch's rows, save it
    (state layout 3, statelog.py; `query` keys the process's engine cache),
    in this process: process_bucket's path without an engine process, for the
    benches and tests that call a bucket directly."""
    blob, packs, summaries = _inputs(pdfs, state)
    rows, row = _call_rows(processor, layout, blob, packs, summaries, query)
    state.update((row,))
    return rows


def _call_rows(processor: BucketProcessor, layout: tuple[int, int], blob: Optional[bytes],
               packs: Iterable[bytes], summaries: list, query: tuple,
               hand_over: Optional[Callable[[list], None]] = None
               ) -> tuple[list[OutputRecord], bytes]:
    """One bucket call on its state row `blob`: (output rows, the new row),
    without cyclic GC passes meanwhile (gc_tuning.py); `packs` may be an
    iterator (the engine process hands each over as it is read). Here or in the
    bucket's engine process (engineproc.py), which passes `hand_over`: it
    takes the output rows as they are made once the records are applied
    (process), the rest after, before the bucket is saved, and empties the
    list (so they are not held at once, nor during the save)."""
    with no_gc_passes_in_call():
        key = (*query, *layout)
        stored = statelog.load(processor, blob, layout, key)
        bucket = stored.bucket
        rows = processor.process(layout[0], bucket, unpack(packs), hold_of(summaries),
                                 hand_over, statelog.hold_arrived)
        if hand_over is not None:
            hand_over(rows)
        row = statelog.save(stored, bucket.arrived, key)
        bucket.arrived = []
        return rows, row


_PROCESSORS: dict[str, BucketProcessor] = {}


def _processor(settings_json: str) -> BucketProcessor:
    """One processor per Python worker and configuration (validated once)."""
    p = _PROCESSORS.get(settings_json)
    if p is None:
        # (the refresh intervals last, each 0 where left out)
        monitor, state_interval_ms, partition_metrics, *refresh_ms = json.loads(settings_json)
        p = _PROCESSORS[settings_json] = BucketProcessor(
            MonitorSettings.model_validate_json(monitor), state_interval_ms, partition_metrics,
            *refresh_ms)
    return p
