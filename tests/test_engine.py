"""The engine (isr/engine): ordering, fan-out, listeners, snapshots, and the
properties that must hold on any event stream (hypothesis)."""

from __future__ import annotations

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from helpers import T0, append, leader, pure_only
from strategies import event_streams

from isr.config import MonitorSettings
from isr.contract.policies import POLICIES
from isr.engine import snapshot
from isr.engine.listeners import Listener
from isr.engine.local import LocalEngine
from isr.pipeline.listeners import local_engine, standard_listeners
from isr.engine.sequencer import Sequencer
from isr.model import PartitionModel



def _settings(**kw) -> MonitorSettings:
    return MonitorSettings(policy=POLICIES, replica_lag_time_max_ms=10000, **kw)


def _check_invariants(engine: LocalEngine, hw_seen: dict) -> None:
    for policy, parts in engine.partitions.items():
        for key, m in parts.items():
            assert m.hw <= m.leader_leo, (policy, key, m.hw, m.leader_leo)
            if m.leader >= 0:
                assert m.leader in m.isr, (policy, key, m.leader, m.isr)
            assert set(m.isr) <= set(m.replicas), (policy, key, m.isr, m.replicas)
            assert len(set(m.isr)) == len(m.isr)
            previous = hw_seen.get((policy, key))
            if previous is not None and previous[0] == m.leader_epoch:
                assert m.hw >= previous[1], (policy, key, "HW went back within an epoch")
            hw_seen[(policy, key)] = (m.leader_epoch, m.hw)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(event_streams())
def test_hw_monotonic_and_bounded_leader_in_isr_isr_within_assignment(events):
    engine = local_engine(_settings())
    hw_seen: dict = {}
    for ev in events:
        engine.apply_in_order([ev])
        _check_invariants(engine, hw_seen)
        engine.advance_all(ev.ts, inclusive=True)  # checks too
        _check_invariants(engine, hw_seen)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(event_streams(jitter_ms=3000), st.lists(st.integers(0, 80), max_size=4))
def test_decisions_identical_when_split_and_state_restored(events, cuts):
    monitor = _settings(allowed_lateness_ms=5000, propagation="zk")
    one = local_engine(monitor)
    for seq, ev in enumerate(events):
        one.submit(ev, seq)
    one.finish()

    decisions: list = []
    engine = local_engine(monitor)
    bounds = sorted({min(c, len(events)) for c in cuts}) + [len(events)]
    start = 0
    for end in bounds:
        for seq in range(start, end):
            engine.submit(events[seq], seq)
        engine.advance_watermark()
        decisions += engine.take_decisions()
        blob = snapshot.snapshot(engine)
        engine = snapshot.restore(monitor, blob, listeners=standard_listeners(monitor))
        assert snapshot.snapshot(engine) == blob  # exact round trip
        start = end
    engine.finish()
    decisions += engine.take_decisions()

    key = lambda d: d.model_dump_json()  # noqa: E731
    assert sorted(map(key, decisions)) == sorted(map(key, one.decisions))
    assert [s.model_dump_json() for s in engine.states()] == [
        s.model_dump_json() for s in one.states()]


@settings(max_examples=200, deadline=None)
@given(event_streams())
def test_partition_state_round_trips_exactly(events):
    engine = local_engine(_settings())
    engine.apply_in_order(events)
    for policy, parts in engine.partitions.items():
        for m in parts.values():
            blob = orjson.dumps(m.to_list())
            again = PartitionModel.from_list(engine.rules[policy], orjson.loads(blob))
            assert again == m
            assert again.view() == m.view()


# ---------------------------------------------------------------- listeners
class Recorder(Listener):
    """Records the hooks the engine calls, in order."""

    name = "recorder"

    def __init__(self) -> None:
        self.calls: list[tuple] = []
        self.state = 0

    def on_advance(self, model, until, inclusive, out):
        self.calls.append(("advance", until - T0, inclusive))

    def on_change(self, model, change, out):
        self.calls.append(("change", change.ts - T0, change.action))
        out.append(f"note {change.action}")  # a listener may add output records

    def on_event(self, model, event, outcome, out):
        self.calls.append(("event", event.ts - T0, outcome))

    def on_time(self, until, inclusive, out):
        self.calls.append(("time", until - T0, inclusive))

    def to_state(self):
        return self.state

    def from_state(self, state):
        self.state = state


def test_listeners_hear_the_checks_changes_then_time_then_the_event():
    """A stuck follower is removed at the check of 45 s, which runs when the
    append at 50 s arrives; the engine says so in that order."""
    rec = Recorder()
    engine = LocalEngine(MonitorSettings(), listeners=[rec])
    engine.apply_in_order([leader(0, replicas=[1, 2], isr=[1, 2]), append(50000, 10)])
    assert rec.calls == [("advance", 0, False), ("event", 0, None),
                         ("change", 45000, "shrink"), ("advance", 50000, False),
                         ("event", 50000, None)]
    assert engine.take_decisions()[1:] == ["note shrink"]  # after the change itself
    engine.finish()
    assert rec.calls[-1] == ("time", 50000, True)


def test_an_ignored_event_reaches_listeners_with_its_outcome():
    rec = Recorder()
    engine = LocalEngine(MonitorSettings(), listeners=[rec])
    engine.apply_in_order([leader(0), append(10, 5, leader_epoch=0)])
    assert rec.calls[-1] == ("event", 10, ("ignored", "stale_epoch"))
    assert engine.ignored == {"stale_epoch": 1}


def test_only_the_hooks_a_listener_overrides_are_called():
    class OnlyChanges(Listener):
        def on_change(self, model, change, out):
            pass

    engine = LocalEngine(MonitorSettings(), listeners=[OnlyChanges()])
    assert len(engine._on_change) == 1
    assert engine._on_event == engine._on_advance == engine._on_time == []


def test_a_snapshot_keeps_each_listeners_state_by_name():
    monitor = MonitorSettings()
    rec = Recorder()
    rec.state = {"seen": 3}
    engine = LocalEngine(monitor, listeners=[rec])
    engine.submit(leader(0), 0)
    again = Recorder()
    snapshot.restore(monitor, snapshot.snapshot(engine), listeners=[again])
    assert again.state == {"seen": 3}


# ---------------------------------------------------------------- sequencer
def test_the_sequencer_releases_in_time_then_arrival_order_and_refuses_late_events():
    seq = Sequencer(allowed_lateness_ms=1000)
    for i, ts in enumerate([3000, 3500, 3000, 4500]):
        assert seq.offer(ts, i, f"e{i}") is None
    assert seq.offer(3499, 9, "late") == "late"  # below 4500 - 1000
    assert [e for _ts, _s, e, _o in seq.release()] == ["e0", "e2"]  # ts < 3500
    assert [e for _ts, _s, e, _o in seq.drain()] == ["e1", "e3"]


def test_an_event_far_ahead_of_the_stream_is_future_and_moves_nothing():
    seq = Sequencer(allowed_lateness_ms=1000, max_future_ms=60_000)
    assert seq.offer(T0, 0, "first") is None  # the first event sets the stream's time
    assert seq.offer(T0 + 60_001, 1, "far") == "future"
    assert seq.refusal("future", T0 + 60_001) == (
        f"ts {T0 + 60_001} is 60001 ms ahead of the stream's time {T0} "
        "(monitor.max_future_ms 60000)")
    assert seq.watermark == T0 - 1000  # unmoved
    assert seq.offer(T0 + 60_000, 2, "near") is None


def test_the_engine_reports_a_future_event_without_applying_it():
    engine = local_engine(MonitorSettings(max_future_ms=10_000))
    assert engine.submit(leader(0), 0).status == "applied"
    outcome = engine.submit(append(86_400_000, 5), 1)
    assert outcome.status == "future" and "ahead of the stream's time" in outcome.reason
    engine.finish()
    assert engine.max_ts == T0


def test_a_closed_engine_closes_twice():
    engine = local_engine(_settings())
    engine.apply_in_order([leader(T0), append(T0 + 1, 10)])
    engine.close()
    engine.close()  # a second close must not raise (it raised AttributeError)


@pure_only  # (a weak reference to a compiled class)
def test_a_closed_engine_is_freed_without_the_cyclic_gc_and_closes_twice():
    import gc
    import weakref

    engine = local_engine(_settings())
    engine.apply_in_order([leader(T0), append(T0 + 1, 10)])
    gone = weakref.ref(engine)
    was = gc.isenabled()
    gc.disable()
    try:
        engine.close()
        engine.close()  # a second close must not raise
        del engine
        assert gone() is None  # reference counting freed it: no cycle left
    finally:
        if was:
            gc.enable()
