"""`isr replay` runs without cyclic GC passes (isr/gc_tuning.py): its engine
is freed by reference counting (`LocalEngine.close`), and nothing is owed
to the collector at the end, so a 100 k-partition replay does not spend
seconds walking its models (docs/benchmarks.md, "The start and the end")."""

from __future__ import annotations

import gc
import weakref

import orjson
from helpers import pure_only

from isr.config import MonitorSettings
from isr.contract.decode import decode_many
from isr.engine.local import LocalEngine
from isr.pipeline.listeners import standard_listeners
from isr.pipeline.local import replay
from isr.sim.cluster import Simulator
from isr.sim.scenario import load_scenario


def _session_lines(seconds: int = 5) -> list[bytes]:
    sc = load_scenario("demo", duration_ms=seconds * 1000)
    return [orjson.dumps(ev) for ev in Simulator(sc, grain="session").events()]


def test_a_replay_makes_no_gc_pass_and_leaves_none_due(tmp_path):
    events = tmp_path / "demo.jsonl"
    events.write_bytes(b"\n".join(_session_lines()) + b"\n")
    passes = []

    def heard(phase, info):
        if phase == "start":
            passes.append(info["generation"])

    gc.callbacks.append(heard)
    try:
        result = replay([str(events)], MonitorSettings(policy=["kafka"]))
        count = gc.get_count()[0]
    finally:
        gc.callbacks.remove(heard)
    assert result.stats.accepted > 0 and result.states
    assert passes == []
    assert gc.isenabled()
    assert count < gc.get_threshold()[0]  # what the replay left is not counted as young


@pure_only
def test_a_closed_engine_with_sessions_is_freed_by_reference_counting():
    monitor = MonitorSettings(policy=["kafka", "kip16"])
    engine = LocalEngine(monitor, listeners=standard_listeners(monitor))
    engine.apply_in_order(decode_many(_session_lines()))
    engine.finish()
    assert engine.session_driver.sessions.by_sid  # it holds sessions
    engine.states()
    engine.close()
    gone = weakref.ref(engine)
    enabled = gc.isenabled()
    gc.disable()
    try:
        del engine
        assert gone() is None
    finally:
        if enabled:
            gc.enable()


def test_a_replay_makes_no_cyclic_garbage_even_of_bad_lines(tmp_path):
    """What makes running without GC passes safe: a replay, bad lines and
    alerts included, leaves nothing that only the cyclic collector could
    free (were each event or dead letter to make a cycle, a long replay
    would grow with it)."""
    lines = _session_lines() + [b'{"type":"fetch","ts":"x"}', b"not json",
                                b'{"type":"bogus","ts":1}'] * 2000
    events = tmp_path / "mixed.jsonl"
    events.write_bytes(b"\n".join(lines) + b"\n")
    gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    try:
        result = replay([str(events)], MonitorSettings(policy=["kafka", "kip16"]))
        assert len(result.dead_letters) >= 6000 and result.states
        del result
        found = gc.collect()
    finally:
        if enabled:
            gc.enable()
    assert found < 100, found


def _cycle():
    a: list = []
    a.append(a)
    return a


class _Node:
    pass


def test_a_call_leaves_its_objects_unwalked_and_its_cycles_to_a_periodic_full_pass(monkeypatch):
    """A bucket's call (no_gc_passes_in_call) ends without a pass over what
    it left (at 50 k partitions a young pass took 60-150 ms a call), and the
    cyclic garbage of its calls is still collected, by the full pass every
    FULL_PASS_EVERY calls: a long-lived engine process does not grow with it."""
    from isr import gc_tuning

    monkeypatch.setattr(gc_tuning, "FULL_PASS_EVERY", 3)
    monkeypatch.setattr(gc_tuning, "_calls", 0)
    gc.collect()
    passes: list[int] = []

    def heard(phase, info):
        if phase == "start":
            passes.append(info["generation"])

    gc.callbacks.append(heard)
    try:
        garbage = []
        for call in range(3):
            with gc_tuning.no_gc_passes_in_call():
                node = _Node()
                node.me = node  # a cycle only the collector frees
                garbage.append(weakref.ref(node))
                kept = [_cycle() for _ in range(10)]  # young objects the call leaves
                del node
            if call < 2:
                assert passes == [], passes  # nothing walked at the end of the call
                assert gc.get_count()[0] < 50  # and nothing left counted as young
                assert all(g() is not None for g in garbage)  # the cycles wait
            del kept
        assert passes == [2]  # the third call's end: one full pass
        assert all(g() is None for g in garbage)
    finally:
        gc.callbacks.remove(heard)
    assert gc.isenabled()
