"""State layout 3 (isr/stream/statelog.py): a bucket's row is a snapshot, a
log of the entries changed since and the queue in chunks; the worker keeps
its engine between batches. Whatever the worker's cache holds (its own last
save, nothing, a batch a failed attempt already applied), and whatever the
batches, the outputs are those of the layout-1 round trip every batch."""

from __future__ import annotations

import os
import random
from collections import OrderedDict
from pathlib import Path

import orjson
import pytest
from helpers import T0
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import event_streams, session_streams

from isr.config import MonitorSettings
from isr.contract.fast import encode
from isr.contract.policies import POLICIES
from isr.engine import snapshot
from isr.engine.local import LocalEngine
from isr.errors import CheckpointError
from isr.pipeline.listeners import standard_listeners
from isr.stream import statelog
from isr.stream.operator import BucketProcessor, _call
from isr.stream.packing import Packer

MONITOR = MonitorSettings(allowed_lateness_ms=1000, policy=["kafka", "kip16"],
                          replica_lag_time_max_ms=10000, propagation="zk")
LAYOUT = (0, 1)
TOKEN = statelog._TOKEN


class State:
    """applyInPandasWithState's state handle, as the function sees it."""

    def __init__(self, row=None) -> None:
        self.row = row

    @property
    def exists(self) -> bool:
        return self.row is not None

    @property
    def get(self):
        return (self.row,)

    def update(self, value) -> None:
        self.row = value[0]


class Frame:
    """The one column of a pandas chunk the function reads."""

    def __init__(self, values) -> None:
        self.values = values

    def tolist(self):
        return list(self.values)


def rows(values: list[bytes], first: int) -> list[dict]:
    packer = Packer([0], MONITOR.max_future_ms)
    ((_label, packed, summary),) = packer.pack(
        [None] * len(values), values, ["in"] * len(values), [0] * len(values),
        list(range(first, first + len(values))), None, [False] * len(values))
    return [{"pack": Frame([packed]), "summary": Frame([summary])}]


def batches_of(events: list, cuts: list[int]) -> list[list[bytes]]:
    values = [encode(e) for e in events]
    bounds = sorted({min(c, len(values)) for c in cuts} | {0, len(values)})
    return [values[a:b] for a, b in zip(bounds, bounds[1:])]


def layout1_run(batches) -> list:
    """The reference: the whole bucket restored and saved every batch."""
    p = BucketProcessor(MONITOR)
    blob, out, first = None, [], 0
    for values in batches:
        bucket = p.restore(blob, LAYOUT)
        out.append(p.process(0, bucket, _table(values, first), _hold(values, first)))
        blob = p.save(bucket)
        first += len(values)
    return out


def _table(values, first):
    from isr.stream.packing import unpack
    return unpack([rows(values, first)[0]["pack"].values[0]])


def _hold(values, first):
    from isr.stream.packing import hold_of
    return hold_of([rows(values, first)[0]["summary"].values[0]])


def layout2_run(batches, cache: str, seed: int = 0, key: str = "q") -> list:
    """cache: "keep" (the worker ran every batch), "drop" (never the same
    worker), "random", "swap" (two workers in turn: each catches its engine
    of the batch before last up with the delta written since), or "retry"
    (every batch runs twice: the first attempt saves, is lost, and the second
    starts from the row before)."""
    rng = random.Random(seed)
    p = BucketProcessor(MONITOR)
    state, out, first = State(), [], 0
    # Deltas even when every model changed, a snapshot every 5 batches: both paths.
    shares = statelog.DIRTY_SHARE, statelog.LOG_SHARE, statelog.COMPACT_AFTER
    statelog.DIRTY_SHARE, statelog.LOG_SHARE, statelog.COMPACT_AFTER = 2, 1e9, 5
    statelog._CACHE.clear()
    workers = [({}, "worker-a"), ({}, "worker-b")]  # "swap": two workers in turn
    for i, values in enumerate(batches):
        if cache == "swap":
            statelog._CACHE, statelog._TOKEN = workers[i % 2]
        if cache == "drop" or (cache == "random" and rng.random() < 0.5):
            statelog._CACHE.clear()
        if cache == "retry":
            before = state.row
            _call(p, LAYOUT, iter(rows(values, first)), state, (key,))
            state.row = before  # the attempt failed after its save: its row is lost
        out.append(_call(p, LAYOUT, iter(rows(values, first)), state, (key,)))
        first += len(values)
    statelog._CACHE = OrderedDict()
    statelog._TOKEN = TOKEN
    statelog.DIRTY_SHARE, statelog.LOG_SHARE, statelog.COMPACT_AFTER = shares
    return out


def workload(partitions: int = 6, seconds: int = 40) -> list:
    """Steady partitions, one follower stuck after 12 s, one idle after 20 s."""
    from isr.contract import validate
    events = []
    for p in range(partitions):
        events.append({"type": "leader", "ts": T0, "topic": "t", "partition": p, "leader": 1,
                       "leader_epoch": 1, "replicas": [1, 2, 3], "isr": [1, 2, 3],
                       "leader_epoch_start_offset": 0})
    for t in range(500, seconds * 1000, 500):
        for p in range(partitions):
            if p == 1 and t > 20000:
                continue
            leo = t // 100
            events.append({"type": "append", "ts": T0 + t, "topic": "t", "partition": p,
                           "leader": 1, "leader_epoch": 1, "leader_leo": leo})
            for r in (2, 3):
                if p == 0 and r == 3 and t > 12000:
                    continue
                events.append({"type": "fetch", "ts": T0 + t + 1, "topic": "t",
                               "partition": p, "leader": 1, "leader_epoch": 1, "replica": r,
                               "fetch_offset": leo, "leader_leo": leo})
    return [validate({"v": 1, **e}) for e in events]


def dump(out) -> list:
    """Each batch's records. In their order but for alerts: those of one
    partition at one instant come in the order of its watch's alerts, which a
    restored watch holds sorted (alerts/watch.py), as any restart did before."""
    return [sorted(tuple(r) for r in batch) for batch in out]


@pytest.mark.parametrize("cache", ["keep", "drop", "random", "retry", "swap"])
def test_every_batch_outputs_what_the_layout_1_round_trip_does(cache):
    events = workload()
    batches = batches_of(events, list(range(0, len(events), 97)))
    expected = dump(layout1_run(batches))
    assert sum(1 for b in expected for r in b if r[0] == "isr_change") >= 2
    before = dict(statelog.STATS)
    assert dump(layout2_run(batches, cache, seed=3)) == expected
    if cache in ("keep", "swap"):  # the engine reused, or caught up with the deltas since
        kind = "hits" if cache == "keep" else "catch-ups"
        assert statelog.STATS[kind] - before[kind] >= len(batches) - 4
        assert statelog.STATS["deltas"] > before["deltas"]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(event_streams(max_events=60, jitter_ms=300), st.lists(st.integers(0, 60), max_size=5),
       st.sampled_from(["keep", "drop", "random", "retry", "swap"]), st.integers(0, 9))
def test_any_stream_any_batches_any_cache_outputs_as_layout_1(events, cuts, cache, seed):
    batches = batches_of(events, cuts)
    assert dump(layout2_run(batches, cache, seed)) == dump(layout1_run(batches))


def _engine(monitor, deadline_index: bool) -> LocalEngine:
    return LocalEngine(monitor, listeners=standard_listeners(monitor), external_watermark=True,
                       deadline_index=deadline_index)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(session_streams(), st.lists(st.integers(0, 50), max_size=5), st.integers(0, 9),
       st.booleans())
def test_a_snapshot_and_its_deltas_restore_an_engine_that_decides_the_same(events, cuts, seed,
                                                                          deadline_index):
    """Fetch sessions too: an engine rebuilt from its snapshot and the deltas
    of the batches since carries on with the decisions of the engine that ran
    through, with the deadline index (as a Spark bucket runs) or without. With
    the index a model no check visited is in no delta; restored, it is
    indexed at once, as having seen the checks up to the saved watermark."""
    monitor = MonitorSettings(policy=POLICIES, replica_lag_time_max_ms=10000,
                              propagation="zk", allowed_lateness_ms=0)
    rng = random.Random(seed)
    ref, engine = _engine(monitor, deadline_index), _engine(monitor, deadline_index)
    snap, log = None, []
    got, want = [], []
    start = 0
    for end in sorted({min(c, len(events)) for c in cuts}) + [len(events)]:
        for e in (ref, engine):
            for seq in range(start, end):
                e.submit(events[seq], seq)
            e.advance_watermark(events[end - 1].ts if end else None)
        want.append(sorted(d.model_dump_json() for d in ref.take_decisions()))
        got.append(sorted(d.model_dump_json() for d in engine.take_decisions()))
        if snap is None or rng.random() < 0.3:
            snapshot.clear_changes(engine)
            snap, log = snapshot.snapshot(engine, with_queue=False), []
        else:
            log.append(snapshot.delta(engine))
        if rng.random() < 0.5:  # another worker: rebuilt from the row (its queue: chunks)
            queued = snapshot.queued_raw(engine)
            # The deltas' models folded into the snapshot first (as statelog's
            # rebuild does), or applied one delta after the other.
            snap_, log_ = snapshot.fold_log(snap, log) if rng.random() < 0.5 else (snap, log)
            engine = snapshot.restore(monitor, snap_, listeners=standard_listeners(monitor),
                                      external_watermark=True, queued=queued,
                                      deadline_index=deadline_index)
            for entry in log_:
                snapshot.apply_delta(engine, entry)
            snapshot.clear_changes(engine)
        start = end
    for e in (ref, engine):
        e.finish()
    want.append(sorted(d.model_dump_json() for d in ref.take_decisions()))
    got.append(sorted(d.model_dump_json() for d in engine.take_decisions()))
    assert got == want  # each batch's (in any order: see dump)
    assert [s.model_dump_json() for s in engine.states()] == [
        s.model_dump_json() for s in ref.states()]


@pytest.mark.parametrize("rebuilt", [False, True])
def test_a_batch_that_touches_few_partitions_logs_only_those(rebuilt):
    """Checks run for every partition every batch, but only models, watches
    and throttle entries that changed are logged; also by an engine the
    worker rebuilt from the row for this batch (`rebuilt`)."""
    events = workload(partitions=50, seconds=20)
    p = BucketProcessor(MONITOR)
    state = State()
    statelog._CACHE.clear()
    key = ("few", *LAYOUT)

    def append(t: int) -> bytes:
        return (b'{"v":1,"type":"append","ts":%d,"topic":"t","partition":3,"leader":1,'
                b'"leader_epoch":1,"leader_leo":9999}' % (T0 + t))

    # The workload, then one append that releases all of it (every model changed).
    batches = [[encode(e) for e in events], [append(22000)]]
    first = 0
    for values in batches:
        _call(p, LAYOUT, iter(rows(values, first)), state, ("few",))
        first += len(values)
    before = len(statelog._CACHE[key].log)
    if rebuilt:
        statelog._CACHE.clear()
    _call(p, LAYOUT, iter(rows([append(23500)], first)), state, ("few",))  # releases 22000
    stored = statelog._CACHE[key]
    assert len(stored.log) == before + 1  # a delta, not a new snapshot
    delta = orjson.loads(statelog._decompress(stored.log[-1]))
    keys = {(row[2], row[3]) for rows_ in delta["partitions"].values() for row in rows_}
    assert keys == {("t", 3)}
    # and the watches evaluated: partition 3's, and partition 0's, whose stuck
    # follower's alert had an instant due
    assert {(w[1], w[2]) for w in delta["listeners"]["alerts"]} <= {("t", 3), ("t", 0)}
    statelog._CACHE.clear()


def test_a_layout_1_row_is_migrated_and_saved_in_layout_3():
    events = workload(partitions=3, seconds=10)
    batches = batches_of(events, [len(events) // 2])
    p = BucketProcessor(MONITOR)
    bucket = p.restore(None, LAYOUT)
    p.process(0, bucket, _table(batches[0], 0), _hold(batches[0], 0))
    old = p.save(bucket)
    assert bucket.engine.sequencer.queued  # the queue moves into a chunk
    state = State(old)
    statelog._CACHE.clear()
    out = _call(p, LAYOUT, iter(rows(batches[1], len(batches[0]))), state, ("m",))
    assert state.row.startswith(b"isr-state-layout:3\n")
    ref = layout1_run(batches)
    assert dump([out]) == dump([ref[1]])


LAYOUT_2 = Path(__file__).resolve().parent / "data" / "state-layout2"


def test_a_layout_2_row_is_migrated_and_carries_on_as_an_uninterrupted_run():
    """tests/data/state-layout2 (README there): a row written by the code of
    state layout 2, whose deltas hold fetch sessions whole. Restarted from it,
    the bucket gives the outputs of a run that never stopped, and saves
    layout 3 from its first batch on."""
    lines = (LAYOUT_2 / "input.jsonl").read_bytes().splitlines()
    batches = [lines[i:i + 150] for i in range(0, len(lines), 150)]
    row = (LAYOUT_2 / "row.bin").read_bytes()
    assert row.startswith(b"isr-state-layout:2\n")
    expected = dump(layout1_run(batches))
    p, state, out = BucketProcessor(MONITOR), State(row), []
    first = sum(len(b) for b in batches[:5])
    statelog._CACHE.clear()
    for values in batches[5:]:
        out.append(_call(p, LAYOUT, iter(rows(values, first)), state, ("layout2",)))
        assert state.row.startswith(b"isr-state-layout:3\n")
        first += len(values)
    statelog._CACHE.clear()
    assert dump(out) == expected[5:]
    assert any(batch for batch in out)


def test_a_delta_holds_what_changed_in_each_session_not_the_whole_session():
    """A session fetches every few hundred ms and caches many partitions: a
    delta writes only the fetches it logged since the last save and the
    entries its requests listed, and an engine restored from the snapshot and
    that delta holds the session as the engine that ran through does."""
    from isr.contract import validate
    from isr.model.session import log_entries
    monitor = MonitorSettings(policy=["kafka"], replica_lag_time_max_ms=10000,
                              allowed_lateness_ms=0)
    events = [validate({"v": 1, "type": "leader", "ts": T0, "topic": "t", "partition": p,
                        "leader": 1, "leader_epoch": 1, "replicas": [1, 2], "isr": [1, 2],
                        "leader_epoch_start_offset": 0}) for p in range(20)]

    def request(t: int, epoch: int, listed: list[int]):
        return validate({"v": 1, "type": "fetch_session", "ts": T0 + t, "leader": 1,
                         "replica": 2, "session_id": 7, "session_epoch": epoch,
                         "full": epoch == 0, "partitions": [
                             {"topic": "t", "partition": p, "leader_epoch": 1,
                              "fetch_offset": t // 100} for p in listed]})

    events += [request(100, 0, list(range(20)))] + [request(100 + 500 * i, i, [])
                                                   for i in range(1, 9)]
    later = [request(100 + 500 * i, i, [4] if i == 10 else []) for i in range(9, 12)]
    engine = _engine(monitor, True)
    for seq, e in enumerate(events):
        engine.submit(e, seq)
    engine.advance_watermark(events[-1].ts + 1)
    snapshot.clear_changes(engine)
    snap = snapshot.snapshot(engine, with_queue=False)
    for seq, e in enumerate(later, len(events)):
        engine.submit(e, seq)
    engine.advance_watermark(later[-1].ts + 1)
    entry = snapshot.delta(engine)
    whole, patches = orjson.loads(entry)["sessions"][:2]
    assert whole == [] and len(patches) == 1
    _sid, session_id, epoch, _base, fetches, cached = patches[0]
    assert (session_id, epoch) == (7, 12)
    assert [f[0] for f in log_entries(fetches)] == [e.ts for e in later]  # the three since
    assert cached == [["t", 4, 1, 51]]  # the one partition listed since
    restored = snapshot.restore(monitor, snap, listeners=standard_listeners(monitor),
                                external_watermark=True)
    snapshot.apply_delta(restored, entry)
    assert (snapshot.snapshot(restored, with_queue=False)
            == snapshot.snapshot(engine, with_queue=False))


@given(st.lists(st.tuples(st.integers(0, 2**62), st.integers(0, 2**62), st.integers(-2, 2**31),
                          st.integers(0, 2**40)), max_size=40))
def test_a_session_log_written_as_columns_reads_back_entry_for_entry(log):
    from isr.model.session import log_columns, log_entries
    assert log_entries(orjson.loads(orjson.dumps(log_columns(log)))) == log


@pytest.mark.parametrize("row,named", [
    (b"isr-state-layout:4\n....", "state layout 4"),
    (b"\x80\x05garbage", "an unknown state layout"),
    (b"isr-zstd" + b"\0" * 20, "state layout 1"),
])
def test_a_row_of_another_layout_is_refused_in_one_line(row, named):
    statelog._CACHE.clear()
    with pytest.raises(CheckpointError) as err:
        statelog.load(BucketProcessor(MONITOR), row, LAYOUT, ("x",))
    message = str(err.value)
    assert "\n" not in message and named in message and "state layouts 1, 2 and 3" in message
    assert "new stream.checkpoint_location" in message


def test_the_queue_is_saved_in_chunks_written_once_and_dropped_once_applied():
    events = workload(partitions=2, seconds=12)
    batches = batches_of(events, list(range(0, len(events), 20)))
    p = BucketProcessor(MONITOR)
    state = State()
    statelog._CACHE.clear()
    first, seen = 0, {}
    for values in batches:
        _call(p, LAYOUT, iter(rows(values, first)), state, ("c",))
        first += len(values)
        stored = statelog._CACHE[("c", *LAYOUT)]
        for max_ts, chunk, *_min in stored.chunks:
            assert seen.setdefault(id(chunk), chunk) is chunk  # never written again
        wm = stored.bucket.engine.sequencer.external_watermark
        assert all(c[0] >= wm for c in stored.chunks)
        assert 1 <= len(stored.chunks) <= 3  # 1 s of lateness: a few batches' worth
    statelog._CACHE.clear()


def test_a_rebuild_leaves_the_chunks_no_watermark_passes_undecoded():
    """A worker that rebuilds a bucket decodes only the queue chunks its
    batch releases (statelog.undefer); the others stay bytes, and the outputs
    are those of the layout-1 round trip, batch by batch."""
    events = workload(partitions=2, seconds=8)
    batches = batches_of(events, list(range(0, len(events), 5)))  # ~0.3 s a batch, 1 s lateness
    expected = dump(layout1_run(batches))
    p = BucketProcessor(MONITOR)
    state, out, first, deferred = State(), [], 0, []
    for values in batches:
        statelog._CACHE.clear()  # another worker every batch: rebuilt from the row
        out.append(_call(p, LAYOUT, iter(rows(values, first)), state, ("d",)))
        first += len(values)
        deferred.append(len(statelog._CACHE[("d", *LAYOUT)].bucket.deferred))
    statelog._CACHE.clear()
    assert dump(out) == expected
    assert max(deferred) >= 2  # the last batches' chunks, still ahead of the watermark


def test_between_calls_the_queue_is_held_as_its_chunks_one_a_slice_of_ts():
    """The engine kept between calls holds its queue as the row's chunks
    (bytes), not as decoded events: the next call decodes a chunk once its
    watermark passes the chunk's smallest ts (statelog._defer_queue; issue
    23, branch `queuemem`). A batch's events are written one chunk per
    QUEUE_SLICE_MS of ts, so a call decodes the slices its watermark
    reaches, not the batch's whole queue. The outputs are the layout-1
    round trip's, batch by batch."""
    events = workload(partitions=2, seconds=12)
    batches = batches_of(events, list(range(0, len(events), 20)))  # ~1.7 s a batch, 1 s lateness
    expected = dump(layout1_run(batches))
    p = BucketProcessor(MONITOR)
    state, out, first, held = State(), [], 0, []
    statelog._CACHE.clear()
    for values in batches:
        out.append(_call(p, LAYOUT, iter(rows(values, first)), state, ("q",)))
        first += len(values)
        stored = statelog._CACHE[("q", *LAYOUT)]
        assert stored.bucket.engine.sequencer.queued == []
        assert stored.bucket.deferred == stored.chunks
        slice_ms = statelog.QUEUE_SLICE_MS
        assert all(c[2] // slice_ms == c[0] // slice_ms for c in stored.chunks)
        held.append(len(stored.chunks))
    statelog._CACHE.clear()
    assert dump(out) == expected
    assert max(held) >= 2  # a batch's events ahead of the watermark in two slices


def test_a_batchs_events_are_written_as_chunks_before_the_watermark_moves(monkeypatch):
    """A call writes its batch's queued events to the row's chunks as soon
    as they are queued, and holds them as those (statelog.hold_arrived): when
    the watermark moves, neither `bucket.arrived` nor the sequencer holds
    them as events (the slices the watermark reaches are decoded then). The
    outputs are the layout-1 round trip's, batch by batch."""
    events = workload(partitions=2, seconds=12)
    batches = batches_of(events, list(range(0, len(events), 20)))
    expected = dump(layout1_run(batches))
    seen = []
    undefer = statelog.undefer

    def watched(bucket, until):
        seen.append((len(bucket.arrived), len(bucket.engine.sequencer.queued)))
        undefer(bucket, until)

    monkeypatch.setattr(statelog, "undefer", watched)
    p = BucketProcessor(MONITOR)
    state, out, first = State(), [], 0
    statelog._CACHE.clear()
    for values in batches:
        out.append(_call(p, LAYOUT, iter(rows(values, first)), state, ("h",)))
        first += len(values)
    statelog._CACHE.clear()
    assert dump(out) == expected
    assert len(seen) == len(batches) and set(seen) == {(0, 0)}


@pytest.mark.parametrize("retry", [False, True])
@pytest.mark.parametrize("engine_process", ["1", "0"])
def test_the_buckets_engine_process_outputs_as_layout_1(tmp_path, monkeypatch, retry,
                                                        engine_process):
    """The Spark function with ISR_ENGINE_PROCESS (the default): the batch
    goes to the bucket's engine process (engineproc.py), which keeps the
    engine between calls; with ISR_ENGINE_PROCESS=0 the worker itself does.
    Either way the outputs are the layout-1 round trip's, and a retried batch
    (its first attempt's row lost) rebuilds from the row."""
    from isr.stream import engineproc
    from isr.stream.operator import make_state_function, processor_config

    statelog._CACHE.clear()
    monkeypatch.setenv(engineproc.ENV, engine_process)
    monkeypatch.setenv(engineproc.IDLE_ENV, "60")
    log = tmp_path / "cache.log"
    monkeypatch.setenv("ISR_STATE_CACHE_LOG", str(log))  # the engine process's
    monkeypatch.setattr(statelog, "_LOG", str(log))  # this process's (read at import)
    events = event_streams_example()
    batches = batches_of(events, [len(events) // 3, 2 * len(events) // 3])
    fn = make_state_function(processor_config(MONITOR), [0], identity=str(tmp_path))
    state, out, first = State(), [], 0
    engineproc.stop((0, 1))
    try:
        for values in batches:
            if retry:
                before = state.row
                list(fn((0,), iter(rows(values, first)), state))
                state.row = before
            frames = list(fn((0,), iter(rows(values, first)), state))
            out.append([tuple(r) for f in frames for r in f.itertuples(index=False)])
            first += len(values)
    finally:
        assert engineproc.stop((0, 1)) == (engine_process == "1")
        statelog._CACHE.clear()
    expected = [[tuple(r) for r in b] for b in layout1_run(batches)]
    assert out == expected
    kinds = [line.split()[2] for line in log.read_text().splitlines()]
    assert len({line.split()[0] for line in log.read_text().splitlines()}) == 1  # one process
    if retry:  # each first attempt hits, each retry finds another version: rebuilt
        assert kinds == ["miss", "miss", "hit", "miss", "hit", "miss"]
    else:
        assert kinds == ["miss", "hit", "hit"]


def event_streams_example() -> list:
    """A small stream with shrinks and expands: the first scenario test's."""
    from helpers import append, fetch, leader
    out = [leader(0)]
    for i in range(1, 40):
        out.append(append(1000 * i, i))
        out.append(fetch(1000 * i + 10, 2, i if i < 10 or i > 25 else 9, i))
        out.append(fetch(1000 * i + 20, 3, i, i))
    return out


def test_an_engine_process_ends_with_the_process_that_forked_the_workers(tmp_path):
    """A bucket's engine process outlives no executor: when its owner
    (PySpark's daemon) is gone it leaves within seconds, and takes its
    socket with it, so a stopped job leaves no process behind. At its start
    it sweeps the files that gone owners' engine processes left."""
    import subprocess
    import sys
    import time

    from isr.stream import engineproc

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    owner = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    stale = [engineproc.address((0, 2), gone.pid) + ".lock", engineproc.address((1, 2), gone.pid)]
    kept = engineproc.address((1, 2), owner.pid) + ".lock"  # its owner's next worker's
    for name in (*stale, kept):
        open(name, "w").close()
    path = engineproc.address((0, 1), owner.pid)
    engine = subprocess.Popen([sys.executable, "-m", "isr.stream.engineproc", path,
                               str(owner.pid)])
    try:
        deadline = time.monotonic() + 30
        while not os.path.exists(path) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert os.path.exists(path), "the engine process never listened"
        assert [os.path.exists(name) for name in (*stale, kept)] == [False, False, True]
        owner.kill()
        owner.wait()
        assert engine.wait(timeout=10) == 0
        assert not os.path.exists(path)
    finally:
        owner.kill()
        engine.kill()
        for name in (*stale, kept):
            if os.path.exists(name):
                os.unlink(name)


class _Engine:
    """What statelog._compacts reads of an engine: its models and the changed ones."""

    def __init__(self, models: int, changed: int) -> None:
        self.partitions = {"kafka": dict.fromkeys(range(models))}
        self.dirty = dict.fromkeys(range(changed))
        self.unclaimed: dict = {}


@pytest.mark.parametrize("changed, log, compacts", [
    (25, 600, False),  # a quarter changed, the log past half the snapshot: a delta (was: a snapshot)
    (60, 700, False),  # most changed, the log short: a delta (was: a snapshot)
    (25, 1600, True),  # the log past LOG_SHARE snapshots
    (0, 1600, True),
    (85, 0, True),     # nearly all changed: the snapshot costs about what the delta would
])
def test_a_save_compacts_when_nearly_every_model_changed_or_the_log_is_long(changed, log,
                                                                           compacts):
    stored = statelog.Stored(None, b"s" * 1000, [b"d" * log] if log else [])
    assert (statelog.LOG_SHARE, statelog.DIRTY_SHARE) == (1.5, 0.8)
    assert statelog._compacts(stored, _Engine(100, changed)) is compacts
