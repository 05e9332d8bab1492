"""A bucket's state row, state layout 3: a snapshot, a log of what changed
since, the queue in chunks written once; and the engine kept between
micro-batches in the Python worker (docs/streaming.md, "State").

The row (the state store's one `engine` binary value per bucket) is

    MAGIC b"3\\n" | header length (4 bytes, little-endian) | header (JSON) | segments

The header names the bucket layout (index, buckets), the row's version
(the token of the worker process that wrote it, and a counter) and the
segments' sizes, in order:
- the snapshot: the engine without its queue (engine/snapshot.py), zstd;
- the log: one delta per micro-batch since the snapshot (snapshot.delta:
  the models and listener entries that changed, and what changed in each
  session that changed: its fetches logged and cached entries set), zstd;
- the queue: the events each micro-batch queued for the watermark, one
  chunk per QUEUE_SLICE_MS of their ts (pickled, zstd), with the largest and
  the smallest ts in it. A chunk is dropped once the watermark has passed it;
  a restore keeps the events at or after the watermark (those before were
  applied), and decodes a chunk only when a batch's watermark passes its
  smallest ts (or the input ends): until then it stays bytes
  (`Bucket.deferred`), so that a rebuild costs what the batch releases, not
  the whole queue held (a bucket whose queue spans the allowed lateness of
  many partitions' events). The engine kept between batches holds its queue
  the same way (`_defer_queue`): as the chunks, not as decoded events.

A save re-uses every segment as it is and appends only the batch's delta
and chunks; every COMPACT_AFTER deltas, or when the log grows past
LOG_SHARE snapshots, or when nearly every model changed, it writes a new
snapshot instead (`_compacts`).

The worker keeps each bucket's engine with the version it last saved
(`_CACHE`). When a row arrives with that version (the same worker ran the
bucket's last batch and saved it) nothing is decoded. When the worker's
engine is an earlier version of the same log (the header lists the version
after the snapshot and after each delta), the deltas since catch it up.
Otherwise (another worker, a retried task, a restart) the engine is rebuilt
from the row. The
entry leaves the cache while a batch runs, so a task that fails half-way
leaves none behind.

Layout 2 (before 2026-11-27: the same row, but a delta held each changed
session whole, engine state version 3) and layout 1 (before 2026-11-26:
`compress_state(pickle((layout, snapshot, queue)))`) are read and migrated:
the engine is rebuilt from the row and the batch saves it whole in layout 3.
Any other row is refused with one line.
"""

from __future__ import annotations

import os
import pickle
from collections import OrderedDict
from itertools import count
from typing import Optional

import orjson

from isr.engine import snapshot
from isr.errors import CheckpointError

LAYOUT = 3
MAGIC = b"isr-state-layout:"
_HEAD = MAGIC + b"3\n"
_HEAD_2 = MAGIC + b"2\n"  # layout 2: migrated (the same header, deltas of engine state 3)
QUEUE_SLICE_MS = 1000  # a batch's queued events are written in chunks of this much ts (_chunks)
COMPACT_AFTER = 16  # deltas at most in a row's log
LOG_SHARE = 1.5  # a new snapshot once the log is this share of the snapshot's size
DIRTY_SHARE = 0.8  # ... or this share of the models changed in one batch (_compacts)

# This worker process's rows: (token, counter) is never written twice.
_TOKEN = os.urandom(8).hex()
_COUNTER = count(1)
# key -> Stored; at most CACHE_ENTRIES engines per worker, least recently used out.
_CACHE: "OrderedDict[tuple, Stored]" = OrderedDict()
CACHE_ENTRIES = int(os.environ.get("ISR_STATE_CACHE_ENTRIES", "2"))
STATS = {"hits": 0, "catch-ups": 0, "misses": 0, "snapshots": 0, "deltas": 0}
# For measuring the hit rate in a running job: each load appends
# "<pid> <bucket> hit|catch-up|miss" to this file (bench/bench_stream.py sets it).
_LOG = os.environ.get("ISR_STATE_CACHE_LOG")


def _count(kind: str, layout) -> None:
    STATS[kind] += 1
    if _LOG:
        with open(_LOG, "a") as f:
            f.write(f"{os.getpid()} {layout[0]} {kind[:-1] if kind != 'misses' else 'miss'}\n")


def _compress(data: bytes) -> bytes:
    from isr.stream.operator import compress_state
    return compress_state(data)


def _decompress(blob) -> bytes:
    from isr.stream.operator import decompress_state
    return decompress_state(bytes(blob))


class Stored:
    """A bucket as its row holds it: the engine and the row's segments."""

    __slots__ = ("bucket", "version", "versions", "snapshot", "log", "log_bytes", "chunks")

    def __init__(self, bucket, snapshot_bytes: Optional[bytes] = None,
                 log: Optional[list] = None, chunks: Optional[list] = None,
                 version=None, versions: Optional[list] = None) -> None:
        self.bucket = bucket
        self.version = version
        # The version the row had after its snapshot, then after each delta.
        self.versions: list = versions or []
        self.snapshot = snapshot_bytes  # None: none yet (the next save writes one)
        self.log: list[bytes] = log or []
        self.log_bytes = sum(len(b) for b in self.log)
        # [max ts, bytes, min ts]; a chunk of a row written before the min
        # was kept: [max ts, bytes]
        self.chunks: list[list] = chunks or []


def layout_of(blob: bytes) -> str:
    """What a state row is, in words, for an error message."""
    if blob.startswith(MAGIC):
        return "state layout " + bytes(blob[len(MAGIC):len(MAGIC) + 8]).split(b"\n")[0].decode(
            "ascii", "replace")
    if blob.startswith(b"isr-zstd") or blob[:1] == b"\x78":
        return "state layout 1"
    return "an unknown state layout"


def refuse(blob: bytes) -> CheckpointError:
    return CheckpointError(
        f"the state checkpoint holds {layout_of(blob)}, this isr-monitor reads state layouts 1, "
        f"2 and {LAYOUT}: start the job with a new stream.checkpoint_location (it reads its input "
        "from input.starting_offsets again, or from where you set them)")


def _header(blob: bytes) -> tuple[dict, int]:
    start = len(_HEAD)
    size = int.from_bytes(blob[start:start + 4], "little")
    return orjson.loads(blob[start + 4:start + 4 + size]), start + 4 + size


def load(processor, blob: Optional[bytes], layout: tuple[int, int], key: tuple) -> Stored:
    """The bucket of this row: the worker's own engine if the row is the
    one it last saved, else rebuilt from the row."""
    cached = _CACHE.pop(key, None)
    if blob is None:
        _count("misses", layout)
        return Stored(processor.restore(None, layout))
    if blob.startswith(_HEAD_2):
        return _migrate(processor, blob, layout)
    if not blob.startswith(_HEAD):
        if blob.startswith(MAGIC):
            raise refuse(blob)
        try:  # layout 1: migrated, saved whole in layout 3 at the end of this batch
            bucket = processor.restore(blob, layout)
        except CheckpointError:
            raise
        except Exception:  # noqa: BLE001 - neither layout: never a pickle traceback
            raise refuse(blob) from None
        _count("misses", layout)
        queued = snapshot.queued_raw(bucket.engine)
        chunks = [_chunk(queued)] if queued else []
        return Stored(bucket, chunks=chunks)
    header, at = _header(blob)
    if list(header["layout"]) != list(layout):
        from isr.stream.operator import layout_error
        raise layout_error(header["layout"][0], layout[1])
    version = tuple(header["version"])
    if cached is not None and cached.version == version:
        _count("hits", layout)
        return cached
    versions = [tuple(v) for v in header.get("versions", [])]
    if cached is not None and cached.version in versions:
        # This worker's engine is the row as it was a few batches ago (another
        # worker ran the batches since): the deltas written since catch it up.
        _count("catch-ups", layout)
        return _catch_up(cached, blob, header, at, versions.index(cached.version), version)
    _count("misses", layout)
    return _rebuild(processor, blob, header, at, layout, version)


def _migrate(processor, blob: bytes, layout: tuple[int, int]) -> Stored:
    """A row of state layout 2, rebuilt as it is (its segments are read as
    layout 3's; snapshot.apply_delta reads its deltas' whole sessions), to be
    saved whole in layout 3 at the end of the batch: no layout-2 segment is
    kept, so no row holds deltas of both."""
    header, at = _header(blob)
    if list(header["layout"]) != list(layout):
        from isr.stream.operator import layout_error
        raise layout_error(header["layout"][0], layout[1])
    _count("misses", layout)
    stored = _rebuild(processor, blob, header, at, layout, None)
    stored.snapshot, stored.log, stored.log_bytes, stored.versions = None, [], 0, []
    return stored


def _segments(blob: bytes, header: dict, at: int) -> tuple[bytes, list, list]:
    view = memoryview(blob)
    segments = []
    for size in [header["snapshot"], *header["log"], *(c[1] for c in header["queue"])]:
        segments.append(bytes(view[at:at + size]))
        at += size
    snap, log = segments[0], segments[1:1 + len(header["log"])]
    chunks = [[c[0], b, *c[2:3]] for c, b in zip(header["queue"], segments[1 + len(log):])]
    return snap, log, chunks


def _chunks(events: list, watermark: int) -> list:
    """The queue chunks of a batch's `events`: one per QUEUE_SLICE_MS of ts, so
    that a watermark passing the smallest ts of a chunk decodes one slice of
    the batch's events, not all (`undefer`; the part of a chunk at or after
    the watermark is decoded again at the next call: at most a slice). A
    slice wholly before the `watermark` was applied: not written."""
    slices: dict[int, list] = {}
    for e in events:
        key = e[0] // QUEUE_SLICE_MS
        got = slices.get(key)
        if got is None:
            slices[key] = [e]
        else:
            got.append(e)
    first = watermark // QUEUE_SLICE_MS  # the slices before it end before the watermark
    return [_chunk(slices[key]) for key in sorted(slices) if key >= first]


def _chunk(events: list) -> list:
    """A queue chunk of `events` (ts, seq, raw, origin): [max ts, bytes, min ts]."""
    stamps = [e[0] for e in events]
    return [max(stamps), _compress(pickle.dumps(events, protocol=5)), min(stamps)]


def _requeue(bucket, chunks: list) -> None:
    """The queue from the row's chunks: the events at or after the
    watermark. A chunk whose smallest ts is known is left as bytes in
    `bucket.deferred` until a watermark passes it (`undefer`)."""
    bucket.engine.sequencer.queued = []
    bucket.deferred = [c for c in chunks if len(c) > 2]
    _decode_chunks(bucket.engine.sequencer, [c for c in chunks if len(c) <= 2])


def _decode_chunks(sequencer, chunks: list) -> None:
    """The events of `chunks` at or after the watermark, into the queue
    (those before it were applied before the row was saved)."""
    watermark = sequencer.external_watermark
    queued = sequencer.queued
    for c in chunks:
        queued.extend(e for e in pickle.loads(_decompress(c[1])) if e[0] >= watermark)


def undefer(bucket, until: Optional[int]) -> None:
    """Decode the deferred chunks holding an event before `until` (None:
    all, the end of the input), before the watermark moves to `until`.
    Exact: while a chunk stays deferred no watermark passed its smallest ts
    since the restore, so the watermark is still the row's (if that ts was
    before it) or not past the chunk's first event: decoding it later keeps
    the same events as decoding it at the restore."""
    deferred = bucket.deferred
    if not deferred:
        return
    due = deferred if until is None else [c for c in deferred if c[2] < until]
    if due:
        bucket.deferred = [] if until is None else [c for c in deferred if c[2] >= until]
        _decode_chunks(bucket.engine.sequencer, due)


def _defer_queue(stored: Stored) -> None:
    """Between calls the queue is held as the row's chunks (bytes, ~15× smaller
    than the decoded events: ~4 MB against ~60 MB a bucket at 50 k
    partitions), not as the events: the engine kept is then the one a
    restore from the row makes (`_requeue`), decoded by `undefer` as a
    watermark passes each chunk. Exact as a restore is: every queued event is
    in a kept chunk (a batch's arrived events are its chunk; a chunk is
    dropped only once the watermark passed its largest ts), and the events
    of a chunk before the watermark were applied. A chunk of an older row
    without its smallest ts cannot be deferred: then the queue stays decoded."""
    if all(len(c) > 2 for c in stored.chunks):
        stored.bucket.engine.sequencer.queued = []
        stored.bucket.deferred = list(stored.chunks)


def hold_arrived(bucket) -> None:
    """Once a batch's events are queued, before the watermark moves: write
    them as the row's queue chunks now (`_chunks`) and hold them as those
    (`bucket.deferred`: the watermark about to move decodes the slices it
    reaches), not as events for the rest of the call. Only when the queue
    holds nothing but the batch's events (the engine kept or restored
    deferred all the rest); else the save writes them."""
    queued, arrived = bucket.engine.sequencer.queued, bucket.arrived
    if not arrived or len(queued) != len(arrived):
        return
    bucket.written = _chunks(arrived, bucket.engine.sequencer.external_watermark)
    bucket.deferred.extend(bucket.written)
    bucket.engine.sequencer.queued = []
    bucket.arrived = []


def _apply_log(bucket, entries: list, chunks: list) -> None:
    """The row's deltas `entries` (decompressed, or decoded by
    snapshot.fold_log) applied in order, then its queue; the engine then
    holds no pending changes (the row has them all)."""
    engine = bucket.engine
    for entry in entries:
        snapshot.apply_delta(engine, entry)
    _requeue(bucket, chunks)
    snapshot.clear_changes(engine)


def _catch_up(cached: Stored, blob: bytes, header: dict, at: int, position: int,
              version) -> Stored:
    snap, log, chunks = _segments(blob, header, at)
    _apply_log(cached.bucket, [_decompress(e) for e in log[position:]], chunks)
    return Stored(cached.bucket, snap, log, chunks, version,
                  [tuple(v) for v in header["versions"]])


def _rebuild(processor, blob: bytes, header: dict, at: int, layout, version) -> Stored:
    snap, log, chunks = _segments(blob, header, at)
    # The deltas' models folded into the snapshot's rows first: each model
    # is built once (most of a rebuild's cost is building models).
    folded, deltas = snapshot.fold_log(_decompress(snap), [_decompress(e) for e in log])
    bucket = processor.restore(None, layout, snapshot_blob=folded)
    try:
        _apply_log(bucket, deltas, chunks)
    except snapshot.StateVersionError as exc:
        from isr.stream.operator import version_error
        raise version_error(exc) from None
    return Stored(bucket, snap, log, chunks, version,
                  [tuple(v) for v in header.get("versions", [])])


def _compacts(stored: Stored, engine) -> bool:
    """Whether this save writes a whole snapshot rather than a delta. A
    snapshot encodes every model, a delta the changed ones (plus the
    listeners' and sessions' changes): in a batch that changed half the
    models the snapshot costs about twice the delta, at 80 % ~1.2 times.
    The log costs a rebuild (a cache miss) only its bytes to decode, as each
    model is built once from its last row (snapshot.fold_log): so deltas
    until the log passes LOG_SHARE snapshots, unless nearly every model
    changed (docs/benchmarks.md, issue 23, branch `snapshare`). Always a
    snapshot when there is none yet, when a state no listener took is to be
    dropped (engine.unclaimed), and after COMPACT_AFTER deltas."""
    if stored.snapshot is None or engine.unclaimed or len(stored.log) >= COMPACT_AFTER:
        return True
    models = sum(len(parts) for parts in engine.partitions.values())
    return (stored.log_bytes > LOG_SHARE * len(stored.snapshot)
            or len(engine.dirty) > DIRTY_SHARE * models)


def save(stored: Stored, arrived: list, key: tuple) -> bytes:
    """The row after a batch (`arrived`: the events it queued, as the
    sequencer holds them), and the engine kept for the next batch."""
    engine = stored.bucket.engine
    watermark = engine.sequencer.external_watermark
    if engine.sequencer.queued or stored.bucket.deferred:
        stored.chunks = [c for c in stored.chunks + stored.bucket.written
                         if c[0] >= watermark]
        if arrived:
            stored.chunks.extend(_chunks(arrived, watermark))
        _defer_queue(stored)
    else:
        stored.chunks = []  # all applied (the end of a bounded input)
    stored.bucket.written = []
    if _compacts(stored, engine):
        snapshot.clear_changes(engine)
        # A whole snapshot also drops the states no listener takes any more
        # (engine.unclaimed: handed on by this batch's outputs).
        engine.unclaimed = {}
        stored.snapshot = _compress(snapshot.snapshot(engine, with_queue=False))
        stored.log, stored.log_bytes = [], 0
        stored.versions = []
        STATS["snapshots"] += 1
    else:
        entry = _compress(snapshot.delta(engine))
        stored.log.append(entry)
        stored.log_bytes += len(entry)
        STATS["deltas"] += 1
    snap = stored.snapshot
    assert snap is not None  # _compacts: a snapshot if there was none
    stored.version = (_TOKEN, next(_COUNTER))
    stored.versions.append(stored.version)
    header = orjson.dumps({
        "layout": list(stored.bucket.layout), "version": list(stored.version),
        "versions": [list(v) for v in stored.versions],
        "snapshot": len(snap), "log": [len(b) for b in stored.log],
        "queue": [[c[0], len(c[1]), *c[2:3]] for c in stored.chunks]})
    row = b"".join([_HEAD, len(header).to_bytes(4, "little"), header, snap,
                    *stored.log, *(c[1] for c in stored.chunks)])
    if CACHE_ENTRIES > 0:
        _CACHE[key] = stored
        while len(_CACHE) > CACHE_ENTRIES:
            _CACHE.popitem(last=False)
    return row
