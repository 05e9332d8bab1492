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
    assert data["partitions"] == dirty and sum(map(len, dirty.values())) > 8


def test_the_engine_process_holds_no_packs_once_the_records_are_applied(monkeypatch):
    """Its request's packs (30-40 MB a bucket at 100 k partitions) are let
    go of as the call reads them: none is left when the bucket is saved."""
    from test_statelog import event_streams_example, rows

    from isr.contract.fast import encode
    from isr.stream import engineproc, operator, statelog

    settings_json = operator.make_state_function.__globals__["json"].dumps(
        [MONITOR.model_dump_json(), 0, False, None])
    values = [encode(e) for e in event_streams_example()]
    ((packed, summary),) = [(r["pack"].values[0], r["summary"].values[0])
                            for r in rows(values, 0)]
    packs = [packed]
    held_at_save = []
    save = statelog.save
    monkeypatch.setattr(statelog, "save",
                        lambda *a: (held_at_save.append(list(packs)), save(*a))[1])
    request = [settings_json, (0, 1), ("test-q",), None, packs, [summary]]
    status, out, row = engineproc._handle(request)
    statelog._CACHE.clear()
    assert status == "ok" and out and row
    assert held_at_save == [[]] and request == []
