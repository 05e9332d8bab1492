"""Events of the same `ts` under different routing keys (docs/contract.md,
"Order"): Kafka keeps each key's events in order, nothing more, so an input
topic of several partitions hands such ties over in any interleaving. The
decisions must not depend on it, in `isr replay` and in `isr run` alike."""

from __future__ import annotations

import json
import os
import random
from collections import defaultdict

from helpers import T0
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import event_streams, session_streams
from test_stream_operator import _bucket_decisions, _bucket_outputs, _replay

from isr.config import MonitorSettings
from isr.contract import Rejection, validate
from isr.contract.decisions import output_order
from isr.contract.events import BROKER, LEADER, SCOPE, routing_key
from isr.contract.policies import POLICIES
from isr.engine.local import LocalEngine, in_tie_order, tie_rank
from isr.pipeline.listeners import local_engine

EXAMPLES = int(os.environ.get("ISR_TIE_EXAMPLES", "200"))


def _ev(data: dict):
    ev = validate({"v": 1, **data})
    assert not isinstance(ev, Rejection), ev.reason
    return ev


def _session(t: int, replica: int, session_epoch: int, listed: dict, session_id: int = 0):
    """A fetch_session of `replica` to leader 1 at T0 + t; listed: {partition: offset}."""
    return _ev({"type": "fetch_session", "ts": T0 + t, "leader": 1, "replica": replica,
                "session_id": session_id or 100 + replica, "session_epoch": session_epoch,
                "full": session_epoch == 0,
                "partitions": [{"topic": "orders", "partition": p, "leader_epoch": 1,
                                "fetch_offset": o} for p, o in listed.items()],
                "forgotten": []})


def _append(t: int, leo: int):
    return _ev({"type": "append", "ts": T0 + t, "topic": "orders", "partition": 0,
                "leader": 1, "leader_epoch": 1, "leader_leo": leo})


def _stalled_leader(append_first: bool) -> list:
    """Leader 1 of orders/0, followers 2 and 3 fetching through sessions every
    500 ms at its LEO 100; then the leader is stopped 12 s (lag 10 s) and
    resumes at +14 s with an append (LEO 200, the produce requests queued
    meanwhile) and its followers' session fetches, all in that millisecond.
    `append_first`: the append before the fetch sessions, or after them."""
    events = [_ev({"type": "leader", "ts": T0, "topic": "orders", "partition": 0, "leader": 1,
                   "leader_epoch": 1, "replicas": [1, 2, 3], "isr": [1, 2, 3],
                   "leader_epoch_start_offset": 0})]
    events += [_append(0, 100)]
    for i, t in enumerate(range(0, 2001, 500)):
        events += [_session(t, 2, i, {0: 100} if i == 0 else {}),
                   _session(t, 3, i, {0: 100} if i == 0 else {})]
    resume = [_session(14000, 2, 5, {}), _session(14000, 3, 5, {})]
    events += [_append(14000, 200)] + resume if append_first else resume + [_append(14000, 200)]
    events += [_session(14500, 2, 6, {0: 200}), _session(14500, 3, 6, {0: 200})]
    return events


def _decide(events, monitor: MonitorSettings, alerts: bool = True) -> tuple:
    """The decisions of `events` (in this arrival order) through the engine:
    every output record in the canonical output order, the final states, the
    counts."""
    engine = local_engine(monitor) if alerts else LocalEngine(monitor)
    for seq, ev in enumerate(events):
        assert engine.submit(ev, seq).status != "late"
    engine.finish()
    records = sorted(engine.decisions, key=output_order)
    return ([r.model_dump_json() for r in records],
            [s.model_dump_json() for s in engine.states()],
            {k: v for k, v in engine.ignored.items() if v})


def test_a_stalled_leaders_resume_decides_the_same_whichever_same_ts_event_comes_first():
    # The reproduction of the realistic run's missing shrinks (docs/benchmarks.md,
    # "The realistic cluster through `isr run`"): the append (key orders/0)
    # and the fetch sessions (key leader/1) of the resume instant reach the
    # job in either order. Both orders: the overdue check sees the append.
    monitor = MonitorSettings(policy=["kafka"], replica_lag_time_max_ms=10000)
    first = _decide(_stalled_leader(append_first=True), monitor)
    second = _decide(_stalled_leader(append_first=False), monitor)
    assert first == second
    shrinks = [r for r in first[0] if '"action":"shrink"' in r]
    assert len(shrinks) == 1 and "leader 1 resumed after 12000 ms" in shrinks[0]


def test_tie_rank_orders_broker_then_partition_then_session_events():
    broker = _ev({"type": "broker", "ts": T0, "broker": 2, "broker_epoch": 5, "state": "fenced"})
    assert tie_rank(broker) < tie_rank(_append(0, 1)) < tie_rank(_session(0, 2, 0, {}))


@settings(max_examples=EXAMPLES, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 1), st.integers(0, 4)), max_size=40))
def test_a_release_is_applied_by_ts_then_tie_rank_then_arrival(steps):
    """in_tie_order sorts only the runs of one ts that are out of rank
    order: the result is still the whole release sorted by (ts, tie_rank),
    stably."""
    def broker(t: int, broker_id: int):
        return _ev({"type": "broker", "ts": T0 + t, "broker": broker_id, "broker_epoch": 5,
                    "state": "fenced"})

    kinds = [lambda t: _append(t, 1), lambda t: _session(t, 2, 0, {}),
             lambda t: _session(t, 3, 0, {}), lambda t: broker(t, 2), lambda t: broker(t, 1)]
    t, release = 0, []
    for seq, (later, kind) in enumerate(steps):
        t += later
        ev = kinds[kind](t)
        release.append((ev.ts, seq, ev, None))
    assert in_tie_order(release) == sorted(release, key=lambda e: (e[0], tie_rank(e[2])))


# ---------------------------------------------------------------- property
def _key(ev) -> bytes:
    """The routing key (isr.contract.events.routing_key) of a validated event."""
    scope = SCOPE[ev.type]
    return routing_key({"type": ev.type, **({"broker": ev.broker} if scope == BROKER else
                                            {"leader": ev.leader} if scope == LEADER else
                                            {"topic": ev.topic, "partition": ev.partition})})


def interleave(events: list, rnd: random.Random) -> list:
    """Another arrival order Kafka may give: within each ts, the events of
    different routing keys interleaved at random, each key's own in order."""
    out: list = []
    i = 0
    while i < len(events):
        j = i
        while j < len(events) and events[j].ts == events[i].ts:
            j += 1
        queues: dict[bytes, list] = defaultdict(list)
        for ev in events[i:j]:
            queues[_key(ev)].append(ev)
        lanes = [list(reversed(q)) for q in queues.values()]
        while lanes:
            lane = rnd.choice(lanes)
            out.append(lane.pop())
            if not lane:
                lanes.remove(lane)
        i = j
    return out


def _same_decisions_in_any_tie_order(events, rnd, monitor) -> None:
    assert all(a.ts <= b.ts for a, b in zip(events, events[1:]))
    expected = _decide(events, monitor)
    for _ in range(3):
        assert _decide(interleave(events, rnd), monitor) == expected


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(session_streams(), st.randoms(use_true_random=False))
def test_session_streams_decide_the_same_in_any_tie_order_across_keys(events, rnd):
    _same_decisions_in_any_tie_order(
        events, rnd, MonitorSettings(policy=POLICIES, replica_lag_time_max_ms=10000))


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(event_streams(max_events=80), st.randoms(use_true_random=False))
def test_partition_streams_decide_the_same_in_any_tie_order_across_keys(events, rnd):
    _same_decisions_in_any_tie_order(
        events, rnd, MonitorSettings(policy=POLICIES, replica_lag_time_max_ms=10000))


@settings(max_examples=EXAMPLES // 2, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(session_streams(), st.randoms(use_true_random=False), st.integers(1, 3),
       st.lists(st.integers(0, 50), max_size=3))
def test_the_jobs_buckets_fed_ties_in_another_order_decide_as_replay(events, rnd, buckets, cuts):
    """The Spark job's stages without Spark (test_stream_operator's
    `_bucket_outputs`: packing, buckets, state round trips between batches)
    fed the ties across keys in another interleaving decide what one engine
    decides on the input's order (`isr replay`)."""
    monitor = MonitorSettings(policy=POLICIES, replica_lag_time_max_ms=10000,
                              allowed_lateness_ms=1000)
    out = _bucket_outputs(monitor, interleave(events, rnd), buckets, cuts)
    assert _bucket_decisions(out) == _replay(monitor, events)[1]
