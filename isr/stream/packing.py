"""The stage before the stateful one, in Python: decode every input record,
judge what can be judged without state, and pack each bucket's share of a
task's records into one Arrow IPC blob, so the stateful operator sees a
handful of rows per batch instead of one per event.

Per record: it is decoded (a rejection keeps its one-line reason), refused as
`future` when it is more than `monitor.max_future_ms` ahead of the micro-batch's
clock (live streams only), and given its bucket (broker events and the
end-of-input marker go to every bucket; a rejected record to one, which
reports it) and its arrival order `seq`. A fetch session is split: each
bucket gets one share of it, the request's header with only the partitions
that bucket holds (`session_shares`; docs/streaming.md, "Fetch sessions").
Per source partition (a Kafka partition of the input, or a file) the
largest ts of its accepted records
goes to every bucket: each computes the same watermark from it
(operator.py). No input, whatever its bytes, makes this raise.
"""

from __future__ import annotations

import zlib
from functools import lru_cache
from typing import Iterator, Optional, Sequence

import msgspec
import orjson

from isr.contract import Rejection
from isr.contract.decode import decode_many
from isr.contract.events import BROKER, LEADER, SCOPE
from isr.contract.fast import ENCODER, encode
from isr.engine.sequencer import FUTURE, future_reason, is_future
from isr.gc_tuning import fewer_gc_passes
from isr.stream import trim

# Records that are not events, made by the monitor's own sources; a Kafka
# record cannot pass for one, whatever its bytes. The end of a bounded input
# comes from a file (partition -1); its key is the input's largest ts
# (files.py, `isr replay --engine spark`). Input lost before it was read is
# reported by the Python Kafka source with offset -1, its reason as the value
# (source.py).
END_OF_INPUT = b"\x00isr:end-of-input"
# The last batch of an `--available-now` run (the Python Kafka source, which
# knows it): every bucket sends its pending partition states (throttle.py).
# Not an end of input: the events still queued for the watermark stay queued.
END_OF_RUN = b"\x00isr:end-of-run"

def is_end_of_input(value, partition: int) -> bool:
    return partition < 0 and value == END_OF_INPUT


def is_data_loss(partition: int, offset: int) -> bool:
    return partition >= 0 and offset < 0

PACKED_SCHEMA = "bucket int, pack binary, summary binary"
# The packed records, per bucket (name -> Arrow type). `reason` is set for a
# record that is rejected already; `end_ts` for the end-of-input marker.
# `shared`: the row is one bucket's share of a record split across buckets
# (a fetch session); `whole`: that record as it came, in the one share that
# reports it (a dead letter names the record, once), null in the others.
PACK_TYPES = {"ts": "int64", "seq": "int64", "value": "binary", "source": "string",
              "offset": "int64", "reason": "string", "reason_class": "string",
              "end_ts": "int64", "shared": "bool", "whole": "binary"}
PACK_COLUMNS = list(PACK_TYPES)


def pack_schema():
    import pyarrow as pa

    return pa.schema([(name, pa.type_for_alias(t)) for name, t in PACK_TYPES.items()])


# The three below run for every record, on few distinct arguments: cached.
@lru_cache(maxsize=4096)
def source_name(topic: str, partition: int) -> str:
    """A Kafka partition as topic/partition; a file (partition -1) by its name."""
    return topic if partition < 0 else f"{topic}/{partition}"


def stable_hash(text: str) -> int:
    return zlib.crc32(text.encode("utf-8", "surrogateescape"))


@lru_cache(maxsize=1 << 17)  # the partitions of a large cluster
def bucket_of(cluster: str, topic: str, partition: int, buckets: int) -> int:
    """The bucket that holds a monitored partition (the same on every run)."""
    return stable_hash(f"{cluster}\x00{topic}\x00{partition}") % buckets


@lru_cache(maxsize=4096)
def session_home(cluster: str, leader: int, buckets: int) -> int:
    """The bucket that speaks for a leader's fetch sessions: it counts their
    anomalies and reports a session record's dead letter, so each is counted
    once per job although every bucket applies the session (operator.py)."""
    return stable_hash(f"{cluster}\x00leader/{leader}") % buckets


def session_shares(event, buckets: int, homes: Optional[dict] = None) -> list[bytes]:
    """A fetch_session as one event per bucket: the same request (leader,
    replica, times, broker epoch, session id and epoch, full or not) listing
    and forgetting only the partitions that bucket holds (`bucket_of`).
    Every bucket gets its share, even one that lists nothing (an incremental
    request listing nothing is common in Kafka): each bucket's sessions then
    see every session epoch and fetch time, so all resolve each request
    alike and fetch their own partitions at the session's times.
    `homes`: a cache of bucket_of, (cluster, topic, partition) -> bucket."""
    homes = {} if homes is None else homes
    if len(event.partitions) == 1 and not event.forgotten and isinstance(event, msgspec.Struct):
        return _one_partition_shares(event, buckets, homes)
    listed: dict[int, list] = {}  # bucket -> its partitions (only buckets with some)
    forgotten: dict[int, list] = {}
    cluster = event.cluster
    for partitions, into in ((event.partitions, listed), (event.forgotten, forgotten)):
        for p in partitions:
            at = (cluster, p.topic, p.partition)
            b = homes.get(at)
            if b is None:
                b = homes[at] = bucket_of(*at, buckets)
            into.setdefault(b, []).append(p)
    if isinstance(event, msgspec.Struct):
        return _spliced_shares(event, buckets, listed, forgotten)
    return [encode(event.model_copy(update={"partitions": listed.get(b, []),
                                            "forgotten": forgotten.get(b, [])}))
            for b in range(buckets)]


# A session struct's encoding with both lists empty holds each of these
# once: a key's closing quote is never escaped, one inside a string always is.
_NO_PARTITIONS, _NO_FORGOTTEN = b'"partitions":[]', b'"forgotten":[]'


def _one_partition_shares(event, buckets: int, homes: dict) -> list[bytes]:
    """session_shares of a struct that lists one partition and forgets none
    (nearly every incremental request): its bucket's share is the request
    itself, the others' its encoding with that partition cut out of the
    list, which gives the same bytes as _spliced_shares without a copy of
    the struct."""
    p = event.partitions[0]
    at = (event.cluster, p.topic, p.partition)
    b = homes.get(at)
    if b is None:
        b = homes[at] = bucket_of(event.cluster, p.topic, p.partition, buckets)
    whole = ENCODER.encode(event)
    shares = [whole.replace(b'"partitions":[' + ENCODER.encode(p) + b"]", _NO_PARTITIONS, 1)
              ] * buckets
    shares[b] = whole
    return shares


def _spliced_shares(event, buckets: int, listed: dict, forgotten: dict) -> list[bytes]:
    """session_shares of a struct: the bytes ENCODER.encode(msgspec.structs.
    replace(event, partitions=mine, forgotten=gone)) gives (a test holds
    them to it), made from one encoding of the request without partitions,
    with each bucket's partitions encoded into its lists; most shares list
    nothing and are that encoding itself. Neither replace's __post_init__
    nor a struct per share: a share lists a subset of a valid request's
    partitions, which keeps every check of impossible_fetch_session true."""
    empty = event.__copy__()  # the same fields, without __post_init__
    msgspec.structs.force_setattr(empty, "partitions", [])
    msgspec.structs.force_setattr(empty, "forgotten", [])
    bare = ENCODER.encode(empty)
    shares = [bare] * buckets
    for b in listed.keys() | forgotten.keys():
        share = bare
        if b in listed:
            share = share.replace(_NO_PARTITIONS, b'"partitions":[' + b",".join(
                map(ENCODER.encode, listed[b])) + b"]", 1)
        if b in forgotten:
            share = share.replace(_NO_FORGOTTEN, b'"forgotten":[' + b",".join(
                map(ENCODER.encode, forgotten[b])) + b"]", 1)
        shares[b] = share
    return shares


@lru_cache(maxsize=4096)
def _source_tag(source: str) -> int:
    return stable_hash(source) % (1 << 20)


def arrival_seq(source: str, offset: int) -> int:
    """Arrival order: the offset within its source partition, then the source."""
    return offset * (1 << 20) + _source_tag(source)


def to_ipc(data) -> bytes:
    """An Arrow table or record batch as IPC stream bytes."""
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, data.schema) as writer:
        writer.write(data)
    return sink.getvalue().to_pybytes()


class Packer:
    """Packs the records of one input task (pure: no Spark types)."""

    def __init__(self, labels: Sequence[int], max_future_ms: int) -> None:
        self.labels = list(labels)
        self.max_future_ms = max_future_ms
        self._buckets: dict[tuple, int] = {}  # (cluster, topic, partition) -> bucket_of

    def pack(self, keys: list, values: list, topics: list, partitions: list, offsets: list,
             clock_ms: Optional[int], behind: Optional[list] = None
             ) -> list[tuple[int, bytes, bytes]]:
        """[(bucket label, pack, summary)] for one batch of input records, a row
        for every bucket. `clock_ms`: the micro-batch's time (None: no future
        test, as in a replay, which tests it against event time beforehand).
        `behind`: per record, whether its source partition holds more than the
        batch reads (None: nobody knows, e.g. Spark's own Kafka source)."""
        n = len(self.labels)
        rows: list[list] = [[] for _ in range(n)]
        latest: dict[str, list] = {}  # source -> [largest accepted ts, behind]
        behind = behind or [False] * len(values)
        everyone = range(n)
        decoded = decode_many(values)  # a marker or a lost record decodes to a Rejection
        sources: dict = {}  # (topic, partition) -> source_name: few per call
        homes = self._buckets
        max_future_ms = self.max_future_ms
        row: tuple  # one bucket's row (_ROW's fields)
        b: Optional[int]  # a bucket; homes.get's None: a partition not placed yet
        for key, value, topic, partition, offset, more, event in zip(
                keys, values, topics, partitions, offsets, behind, decoded):
            source = sources.get((topic, partition))
            if source is None:
                source = sources[(topic, partition)] = source_name(topic, partition)
            # A file reports the line number (its key), Kafka the offset.
            where = _line(key) if partition < 0 else offset
            seq = arrival_seq(source, offset)
            if partition < 0 and value and value[:1] == b"\x00":  # a marker of our own
                if value == END_OF_RUN:  # to every bucket, like end of input
                    row = (None, seq, value, source, where, None, None, None, None, None)
                    for b in everyone:
                        rows[b].append(row)
                    continue
                if is_end_of_input(value, partition):
                    row = (None, seq, value, source, where, None, None, _line(key), None, None)
                    for b in everyone:
                        rows[b].append(row)
                    continue
            # A record to reject (written inline, not as a call: nearly every
            # record is a valid event, not ahead of the clock).
            if offset < 0 and is_data_loss(partition, offset):
                reason, reason_class = _text(value), "data_loss"
            elif isinstance(event, Rejection):
                reason, reason_class = event.reason, event.reason_class
            elif clock_ms is not None and is_future(event.ts, clock_ms, max_future_ms):
                reason, reason_class = future_reason(event.ts, clock_ms, max_future_ms,
                                                     "the batch's clock"), FUTURE
            else:
                reason = None
            if reason is not None:
                home = stable_hash(f"{source}@{offset}") % n
                rows[home].append((None, seq, value, source, where, reason, reason_class,
                                   None, None, None))
                continue
            ts = event.ts
            seen = latest.get(source)
            if seen is None:
                latest[source] = [ts, bool(more)]
            elif ts > seen[0]:
                seen[0] = ts
            scope = SCOPE[event.type]
            if scope == LEADER:  # a fetch session: a share to every bucket
                home = session_home(event.cluster, event.leader, n)
                for b, share in enumerate(session_shares(event, n, homes)):
                    rows[b].append((ts, seq, share, source, where, None, None, None, True,
                                    value if b == home else None))
                continue
            row = (ts, seq, value, source, where, None, None, None, None, None)
            if scope == BROKER:  # every partition of its cluster
                for b in everyone:
                    rows[b].append(row)
                continue
            at = (event.cluster, event.topic, event.partition)
            b = homes.get(at)
            if b is None:
                b = homes[at] = bucket_of(*at, n)
            rows[b].append(row)
        summary = orjson.dumps(latest)
        return [(label, _ipc_rows(bucket_rows) if bucket_rows else b"", summary)
                for label, bucket_rows in zip(self.labels, rows)]


def _text(value) -> str:
    return (value or b"").decode("utf-8", "replace")


def _line(key) -> int:
    try:
        return int(key)
    except (TypeError, ValueError):
        return -1


def _ipc_rows(rows: list[tuple]) -> bytes:
    import pyarrow as pa

    n = len(rows)
    schema = pack_schema()
    # Most columns of most packs are all null (no rejection, no end of
    # input, no session): made as such, not converted value by value.
    return to_ipc(pa.RecordBatch.from_arrays(
        [pa.nulls(n, field.type) if col.count(None) == n else pa.array(col, field.type)
         for col, field in zip(zip(*rows), schema)], schema=schema))


def unpack(packs):
    """The records of packed blobs as one Arrow table, in arrival order per task."""
    import pyarrow as pa

    batches = [batch for blob in packs if blob for batch in pa.ipc.open_stream(blob)]
    schema = pack_schema()
    return pa.Table.from_batches(batches, schema) if batches else schema.empty_table()


def hold_of(summaries) -> Optional[int]:
    """The event time the batch lets the watermark reach: the largest
    accepted ts of the batch, but no further than a source partition that is
    behind (it holds more than the batch read of it: a backlog read in
    slices) has reached, so that its next events are not late because another
    source ran ahead. Sources read to their end, or without records in the
    batch, hold nothing back."""
    latest: dict[str, int] = {}
    behind: set[str] = set()
    for blob in summaries:
        for source, (ts, more) in orjson.loads(blob).items():
            if ts > latest.get(source, -1):
                latest[source] = ts
            if more:
                behind.add(source)
    if not latest:
        return None
    return min([max(latest.values())] + [latest[s] for s in behind])


def pack_batch(packer: Packer, batch, clock_ms: Optional[int]):
    """One Arrow batch of the sources' columns as PACKED_SCHEMA's rows: one
    per bucket. Used by the packing stage and by the Python Kafka source,
    which packs as it reads (`input.source = "python"`)."""
    return packed_batch(packer.pack(
        batch.column("key").to_pylist(), batch.column("value").to_pylist(),
        batch.column("topic").to_pylist(), batch.column("partition").to_pylist(),
        batch.column("offset").to_pylist(), clock_ms, batch.column("behind").to_pylist()))


def packed_batch(out: list[tuple[int, bytes, bytes]]):
    """`Packer.pack`'s rows as an Arrow batch of PACKED_SCHEMA."""
    import pyarrow as pa

    return pa.RecordBatch.from_pydict(
        {"bucket": pa.array([label for label, _p, _s in out], pa.int32()),
         "pack": pa.array([p for _l, p, _s in out], pa.binary()),
         "summary": pa.array([s for _l, _p, s in out], pa.binary())})


def fewer_gc_passes_while(batches: Iterator) -> Iterator:
    """The batches of a reader or of the packing stage, made with the
    collector's thresholds raised as a bucket's work is (gc_tuning): with
    CPython's defaults the collector kept walking the decoded events and the
    rows being packed (in one measurement half of a read task's CPU,
    docs/benchmarks.md)."""
    with fewer_gc_passes():
        yield from batches


def make_packer(labels: Sequence[int], max_future_ms: int, live: bool):
    """The function for mapInArrow: one row per bucket per input batch.
    `live`: the input has a `clock` column (the micro-batch's timestamp, which
    Spark keeps in its offset log, so a re-run batch judges the same way)."""
    packer = Packer(labels, max_future_ms)

    def pack_batches(batches: Iterator) -> Iterator:
        return fewer_gc_passes_while(_packed(batches))

    def _packed(batches: Iterator) -> Iterator:
        for batch in batches:
            if batch.num_rows == 0:
                continue
            clock_ms = None
            if live:
                clock_us = batch.column("clock")[0].value
                clock_ms = None if clock_us is None else clock_us // 1000
            yield pack_batch(packer, batch, clock_ms)
        trim.give_back()  # the task's decoded records (trim.py)

    return pack_batches
