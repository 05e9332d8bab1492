"""A bucket call's fullest moments (issue 23, docs/benchmarks.md, branch
`enginerss`): the bucket's save and the reply come after the batch's
records are applied, so what the call still holds then is what its peak
memory is made of. The snapshot is written without every model's row as
Python lists at once, and the engine process holds no packs by then."""

from __future__ import annotations

import tracemalloc

import orjson
from helpers import append, fetch, leader

from isr.config import MonitorSettings
from isr.engine import snapshot
from isr.engine.local import LocalEngine
from isr.pipeline.listeners import standard_listeners

MONITOR = MonitorSettings(policy=["kafka", "kip16"], replica_lag_time_max_ms=10000)


def _engine(partitions: int) -> LocalEngine:
    engine = LocalEngine(MONITOR, listeners=standard_listeners(MONITOR),
                         on_reject=lambda _origin, _reason: None)
    for p in range(partitions):
        for seq, ev in enumerate([leader(0, partition=p), append(1000, 5, partition=p),
                                  fetch(1010, 2, 5, 5, partition=p)]):
            engine.submit(ev, 3 * p + seq, None)
    engine.finish()
    engine.take_decisions()
    return engine


def _one_dump(engine: LocalEngine) -> bytes:
    """The snapshot as one orjson.dumps of the whole (how it was written)."""
    seq = engine.sequencer
    return orjson.dumps({
        "v": snapshot.VERSION, "policies": engine.policies,
        "partitions": {p: [m.to_list() for m in parts.values()]
                       for p, parts in engine.partitions.items()},
        "brokers": {c: b.to_list() for c, b in engine.brokers.items()},
        "sequencer": [seq.max_ts, [], seq.external_watermark],
        "max_ts": engine.max_ts, "ignored": dict(engine.ignored),
        "listeners": {l.name: l.to_state() for l in engine.listeners if l.name},
        "sessions": engine.session_driver.to_list(),
    })


def test_a_snapshot_takes_little_more_memory_than_its_bytes_and_is_the_same_bytes():
    engine = _engine(6000)  # two policies: 12,000 models, six pieces of rows
    data, peak = _peak(lambda: snapshot.snapshot(engine, with_queue=False))
    whole, whole_peak = _peak(lambda: _one_dump(engine))
    # here 3.7x the bytes written against 5.7x (the listeners' state, a
    # third of these bytes, is still built whole)
    assert peak < 0.8 * whole_peak, (peak, whole_peak, len(data))
    assert data == whole


def _peak(make) -> tuple:
    tracemalloc.start()
    try:
        made = make()
        return made, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_delta_is_the_same_bytes_as_one_dump_of_the_changed_models(monkeypatch):
    engine = _engine(50)
    snapshot.clear_changes(engine)
    for p in range(0, 50, 3):  # some models change
        engine.submit(append(2000, 9, partition=p), 1000 + p, None)
    engine.finish()
    engine.take_decisions()
    dirty = {}
    for m in engine.dirty.values():
        dirty.setdefault(m.rules.policy, []).append(m.to_list())
    monkeypatch.setattr(snapshot, "ROWS_PER_PIECE", 4)  # several pieces per policy
    data = orjson.loads(snapshot.delta(engine))
    # (compared as JSON: to_list holds tuples where the JSON read back has lists)
    assert (orjson.dumps(data["partitions"]) == orjson.dumps(dirty)
            and sum(map(len, dirty.values())) > 8)


def _worker_end(conn, frames: list):
    """The worker's end of a call's reply, read in a thread (the engine's
    side blocks once the socket's buffer is full): each frame's status and
    its rows (or the rest of the frame)."""
    import threading

    from isr.stream import engineproc

    def read():
        while True:
            try:
                status, *result = engineproc._recv(conn)
            except EOFError:
                return
            frames.append((status, result[0] if status == "rows" else result))
            if status != "rows":
                return

    t = threading.Thread(target=read)
    t.start()
    return t


def _call_in_pieces(request: list, frames: list) -> tuple:
    """engineproc._handle on `request` with a worker reading its reply into
    `frames`: _handle's last frame."""
    import socket

    from isr.stream import engineproc

    engine_end, worker_end = socket.socketpair()
    reader = _worker_end(worker_end, frames)
    try:
        last = engineproc._handle(engine_end, request)
        engineproc._send(engine_end, last)
    finally:
        reader.join()
        engine_end.close()
        worker_end.close()
    return last


def _settings_json(state_interval_ms: int = 0) -> str:
    from isr.stream.operator import processor_config

    return processor_config(MONITOR, state_interval_ms)


def test_the_engine_process_holds_no_packs_once_the_records_are_applied(monkeypatch):
    """Its request's packs (30-40 MB a bucket at 100 k partitions) are let
    go of as the call reads them: none is left when the bucket is saved."""
    from test_statelog import event_streams_example, rows

    from isr.contract.fast import encode
    from isr.stream import statelog

    values = [encode(e) for e in event_streams_example()]
    ((packed, summary),) = [(r["pack"].values[0], r["summary"].values[0])
                            for r in rows(values, 0)]
    packs = [packed]
    held_at_save = []
    save = statelog.save
    monkeypatch.setattr(statelog, "save",
                        lambda *a: (held_at_save.append(list(packs)), save(*a))[1])
    request = [_settings_json(), (0, 1), ("test-q",), None, packs, [summary]]
    frames: list = []
    status, row = _call_in_pieces(request, frames)
    statelog._CACHE.clear()
    assert status == "ok" and frames[0][0] == "rows" and row
    assert held_at_save == [[]] and request == []


def _many_states_request(partitions: int) -> list:
    """A bucket call whose batch sends `partitions` partition_state records
    per policy (state_interval_ms 0: every changed partition's)."""
    from test_statelog import rows

    from isr.contract.fast import encode

    events = []
    for p in range(partitions):
        events += [leader(0, partition=p), append(1000, 5, partition=p),
                   fetch(1010, 2, 5, 5, partition=p)]
    events.append(append(10**6, 6, partition=0))  # the watermark passes the others
    ((packed, summary),) = [(r["pack"].values[0], r["summary"].values[0])
                            for r in rows([encode(e) for e in events], 0)]
    return [_settings_json(), (0, 1), ("test-q",), None, [packed], [summary]]


def test_a_calls_outputs_go_to_the_worker_in_pieces_before_the_bucket_is_saved(monkeypatch):
    """The batch that sends every partition's state (~50,000 records a
    bucket at 100 k partitions): its outputs are written to the worker a
    piece at a time once the records are applied, and none is held by the
    engine process when the bucket is saved; the worker gets every record,
    in order, as the call in the worker itself gives them."""
    from isr.stream import engineproc, operator, statelog

    monkeypatch.setattr(engineproc, "REPLY_ROWS", 300)
    seen_at_save = []
    save = statelog.save
    frames: list = []
    monkeypatch.setattr(statelog, "save",
                        lambda *a: (seen_at_save.append(len(frames)), save(*a))[1])
    status, row = _call_in_pieces(_many_states_request(1000), frames)
    statelog._CACHE.clear()
    assert status == "ok" and row
    sizes = [len(rows) for s, rows in frames if s == "rows"]
    # 2,000 states (two policies) and the watermark's record, 300 at a time
    assert sum(sizes) > 2000 and max(sizes) == 300 and len(sizes) == -(-sum(sizes) // 300)
    # every piece was written before the save began (the reader may lag: the
    # engine's side wrote them all, so the socket holds what it has not read)
    assert seen_at_save and seen_at_save[0] <= len(sizes)

    request = _many_states_request(1000)
    here, _row = operator._call_rows(operator._processor(_settings_json()), (0, 1), None,
                                     request[4], request[5], ("test-q2",))
    statelog._CACHE.clear()
    assert [tuple(r) for r in here] == [r for s, rows in frames if s == "rows" for r in rows]


def test_the_engine_process_hands_a_calls_outputs_over_as_it_makes_them(monkeypatch):
    """The engine process does not hold a call's outputs (~40 MB of state
    records a bucket at 100 k partitions when every state goes out): it
    writes them to the worker REPLY_ROWS at a time as it makes them, so
    fewer than that are left when the records' phase ends (written before
    the bucket is saved)."""
    from isr.stream import engineproc, operator, statelog

    request = _many_states_request(3000)
    seen = {}
    process = operator.BucketProcessor.process

    def processed(*a):
        rows = process(*a)
        seen["left"] = len(rows)
        return rows

    monkeypatch.setattr(operator.BucketProcessor, "process", processed)
    frames: list = []
    try:
        status, _row = _call_in_pieces(request, frames)
    finally:
        statelog._CACHE.clear()
    written = sum(len(rows) for s, rows in frames if s == "rows")
    assert status == "ok" and written > 6000  # two policies' states and the watermark
    assert seen["left"] < engineproc.REPLY_ROWS, seen


def _live_fields_at_each_state_record(monkeypatch, settings_json: str, request_of) -> list:
    """Run bucket calls (request_of(n): the n-th call's packs and summaries,
    None: no more) and return, at each partition_state record written, how
    many models' state_fields were alive then."""
    from isr.model.partition import PartitionModel
    from isr.stream import operator, statelog

    live = [0]
    seen: list = []

    class Fields(dict):
        def __del__(self):
            live[0] -= 1

    fields_of = PartitionModel.state_fields

    def counted(self):
        live[0] += 1
        return Fields(fields_of(self))

    record = operator.state_record
    monkeypatch.setattr(PartitionModel, "state_fields", counted)
    monkeypatch.setattr(operator, "state_record",
                        lambda fields, several: (seen.append(live[0]), record(fields, several))[1])
    blob, n = None, 0
    while (batch := request_of(n)) is not None:
        _rows, blob = operator._call_rows(operator._processor(settings_json), (0, 1), blob,
                                          batch[0], batch[1], ("test-fields",))
        n += 1
    statelog._CACHE.clear()
    return seen


def test_a_batchs_state_records_are_made_one_at_a_time(monkeypatch):
    """The batches that send every partition's state (~50,000 a bucket at
    100 k partitions): each state's fields (~1.3 KB) are let go of once its
    record is written, not all held until the last record is made (the
    records ~0.8 KB each): throttled states (`due`) and the end of the input
    (every model's state)."""
    from test_statelog import rows

    from isr.contract.fast import encode
    from isr.stream.packing import END_OF_INPUT, Packer

    request = _many_states_request(500)

    def due_states(n):  # state_interval_ms 0: every changed partition's state
        return None if n else (request[4], request[5])

    seen = _live_fields_at_each_state_record(monkeypatch, _settings_json(0), due_states)
    assert len(seen) == 1000 and max(seen) <= 2, max(seen)

    end = Packer([0], MONITOR.max_future_ms).pack(
        [str(10**6)], [END_OF_INPUT], ["in"], [-1], [0], None)
    first = _many_states_request(500)

    def then_the_end(n):  # a long interval: only the end sends them
        return [(first[4], first[5]), ([end[0][1]], [end[0][2]]), None][n]

    seen = _live_fields_at_each_state_record(monkeypatch, _settings_json(10**9), then_the_end)
    assert len(seen) >= 1000 and max(seen) <= 2, max(seen)
