"""Property-based tests over generated event streams (hypothesis)."""

from __future__ import annotations

import json

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from isr.config import MonitorSettings
from isr.contract import Rejection, decode, validate
from isr.engine import snapshot
from isr.engine.local import LocalEngine
from isr.model import PartitionModel
from isr.contract.fast import encode

T0 = 1_800_000_000_000
BROKERS = [1, 2, 3, 4]
POLICIES = ["kafka", "kip16", "legacy", "kip501"]


@st.composite
def event_streams(draw, max_events: int = 60, jitter_ms: int = 0):
    """A plausible stream for two partitions and four brokers: leader changes,
    reassignments, appends, fetches (caught up, behind, truncated), KIP-501
    fetch starts, broker lifecycle. Valid by the contract; not always sensible
    to the model (stale epochs, unknown replicas), which is the point."""
    n = draw(st.integers(1, max_events))
    t = 0
    epoch = {0: 1, 1: 1}
    lead = {0: 1, 1: 2}
    replicas = {0: [1, 2, 3], 1: [2, 3, 4]}
    leo = {0: 0, 1: 0}
    events = []
    for p in (0, 1):
        if draw(st.booleans()):  # otherwise bootstrapped from its first event
            events.append(dict(type="leader", ts=T0, topic="t", partition=p, leader=lead[p],
                               leader_epoch=epoch[p], replicas=replicas[p],
                               isr=replicas[p], leader_epoch_start_offset=0))
    for _ in range(n):
        t += draw(st.sampled_from([0, 1, 100, 500, 2000, 7000, 16000, 31000]))
        ts = T0 + t + draw(st.integers(0, jitter_ms))
        p = draw(st.sampled_from([0, 1]))
        kind = draw(st.sampled_from(
            ["fetch"] * 6 + ["append"] * 3 + ["fetch_start", "leader", "reassign", "broker",
                                              "isr", "stale"]))
        base = dict(ts=ts, topic="t", partition=p, leader=lead[p], leader_epoch=epoch[p])
        followers = [r for r in replicas[p] if r != lead[p]]
        if kind == "append":
            leo[p] += draw(st.integers(0, 50))
            events.append(dict(base, type="append", leader_leo=leo[p]))
        elif kind in ("fetch", "fetch_start") and followers:
            offset = draw(st.integers(0, leo[p]))
            extra = {}
            if kind == "fetch":
                extra["received_ts"] = ts - draw(st.sampled_from([0, 0, 10, 3000]))
                extra["broker_epoch"] = draw(st.sampled_from([None, -1, 5, 6]))
            events.append(dict(base, type=kind, replica=draw(st.sampled_from(followers)),
                               fetch_offset=offset, leader_leo=leo[p], **extra))
        elif kind == "leader":
            epoch[p] += 1
            lead[p] = draw(st.sampled_from(replicas[p]))
            isr = [r for r in replicas[p] if r == lead[p] or draw(st.booleans())]
            start = leo[p] = max(0, leo[p] - draw(st.integers(0, 20)))
            hw = draw(st.one_of(st.none(), st.integers(0, start)))
            events.append(dict(base, type="leader", leader=lead[p], leader_epoch=epoch[p],
                               replicas=replicas[p], isr=isr, leader_epoch_start_offset=start,
                               hw=hw, min_insync_replicas=draw(st.sampled_from([None, 1, 2, 3]))))
        elif kind == "reassign":
            others = [b for b in BROKERS if b != lead[p]]
            replicas[p] = [lead[p]] + draw(st.lists(st.sampled_from(others), min_size=1,
                                                    max_size=3, unique=True))
            isr = [r for r in replicas[p] if r == lead[p] or draw(st.booleans())]
            events.append(dict(base, type="leader", replicas=replicas[p], isr=isr,
                               leader_epoch_start_offset=leo[p]))
        elif kind == "broker":
            events.append(dict(type="broker", ts=ts, broker=draw(st.sampled_from(BROKERS)),
                               broker_epoch=draw(st.sampled_from([5, 6, -1])),
                               state=draw(st.sampled_from(["registered", "fenced", "unfenced",
                                                           "controlled_shutdown"]))))
        elif kind == "isr":
            events.append(dict(base, type="isr", isr=[lead[p]]))
        elif kind == "stale":
            events.append(dict(base, type="append", leader_epoch=max(0, epoch[p] - 1),
                               leader_leo=leo[p]))
    parsed = []
    for e in events:
        e["v"] = 1
        ev = validate(e)
        assert not isinstance(ev, Rejection), (ev.reason, e)
        parsed.append(ev)
    return parsed


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
    engine = LocalEngine(_settings())
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
    one = LocalEngine(monitor)
    for seq, ev in enumerate(events):
        one.submit(ev, seq)
    one.finish()

    decisions: list = []
    engine = LocalEngine(monitor)
    bounds = sorted({min(c, len(events)) for c in cuts}) + [len(events)]
    start = 0
    for end in bounds:
        for seq in range(start, end):
            engine.submit(events[seq], seq)
        engine.advance_watermark()
        decisions += engine.take_decisions()
        blob = snapshot.snapshot(engine)
        engine = snapshot.restore(monitor, blob)
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
    engine = LocalEngine(_settings())
    engine.apply_in_order(events)
    for policy, parts in engine.partitions.items():
        for m in parts.values():
            blob = orjson.dumps(m.to_list())
            again = PartitionModel.from_list(engine.rules[policy], orjson.loads(blob))
            assert again == m
            assert again.view() == m.view()


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8),
                                                                      children, max_size=6),
    max_leaves=20)


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=200))
def test_arbitrary_bytes_never_raise(raw):
    assert decode(raw) is not None


@settings(max_examples=500, deadline=None)
@given(JSON)
def test_arbitrary_json_never_raises(value):
    result = decode(json.dumps(value))  # stdlib: also integers beyond 64 bits
    assert isinstance(result, Rejection)  # nothing random is a valid event


FIELDS = ["v", "type", "ts", "topic", "partition", "leader", "leader_epoch", "replica",
          "fetch_offset", "leader_leo", "received_ts", "broker_epoch", "replicas", "isr",
          "leader_epoch_start_offset", "hw", "min_insync_replicas", "broker", "state"]


@settings(max_examples=500, deadline=None)
@given(event_streams(max_events=5), st.sampled_from(FIELDS), JSON)
def test_mutated_valid_events_give_an_event_or_a_one_line_rejection(events, name, value):
    data = orjson.loads(encode(events[-1]))
    data[name] = value
    result = decode(json.dumps(data))
    if isinstance(result, Rejection):
        assert result.reason and "\n" not in result.reason
    else:
        engine = LocalEngine(_settings())
        engine.apply_in_order(events[:-1] + [result])  # and the model takes it
