"""Fetch sessions (isr/engine/sessions.py): a `fetch_session` event decides
exactly what its expansion into per-partition fetches decides, under every
policy, whatever the batches and restarts; and session anomalies are handled
as Kafka's leader does."""

from __future__ import annotations

import copy
import json
import os
from collections import Counter
from contextlib import contextmanager

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from helpers import T0, pure_only
from strategies import session_streams

from isr.alerts.listener import AlertListener
from isr.config import MonitorSettings
from isr.contract import Rejection, validate
from isr.contract.fast import STRUCTS
from isr.contract.policies import POLICIES
from isr.engine import snapshot
from isr.engine.local import LocalEngine, tie_rank
from isr.engine.sessions import SessionDriver
from isr.pipeline.listeners import local_engine

FETCH = STRUCTS["fetch"]


def _monitor() -> MonitorSettings:
    return MonitorSettings(policy=POLICIES, replica_lag_time_max_ms=10000, propagation="zk")


class Expanding:
    """The reference: today's model fed with one per-partition fetch for every
    partition of the session at every session fetch (KIP-227: the leader
    evaluates each cached partition), written out plainly."""

    def __init__(self, monitor: MonitorSettings) -> None:
        self.engine = LocalEngine(monitor)
        self.sessions: dict[tuple, dict] = {}  # (leader, replica, id) -> {"epoch", "cached"}
        self.anomalies: Counter = Counter()

    def apply(self, ev) -> None:
        if ev.type != "fetch_session":
            self.engine.apply(ev)
            return
        self.engine.max_ts = max(self.engine.max_ts, ev.ts)  # the stream's time, too
        key = (ev.leader, ev.replica, ev.session_id)
        s = self.sessions.get(key)
        if ev.full:
            self.sessions.pop(key, None)
            s = None
        elif s is None:
            opened = self.sessions.get((ev.leader, ev.replica, 0))
            if opened is not None and opened["epoch"] == ev.session_epoch:
                s = self.sessions[key] = self.sessions.pop((ev.leader, ev.replica, 0))
            else:
                self.anomalies["unknown_session"] += 1
        elif s["epoch"] != ev.session_epoch:
            self.anomalies["session_epoch_skipped"] += 1
            s = None
        if s is None and ev.session_epoch != -1:
            s = self.sessions[key] = {"epoch": 0, "cached": {}}
        if s is not None:
            s["epoch"] = ev.session_epoch + 1
            for f in ev.forgotten:
                s["cached"].pop((f.topic, f.partition), None)
        listed = set()
        for p in ev.partitions:
            listed.add((p.topic, p.partition))
            if s is not None:
                s["cached"][(p.topic, p.partition)] = (p.leader_epoch, p.fetch_offset)
            self._fetch(ev, p.topic, p.partition, p.leader_epoch, p.fetch_offset, p.leader_leo)
        if s is not None:
            for (topic, partition), (epoch, offset) in s["cached"].items():
                if (topic, partition) not in listed:
                    self._fetch(ev, topic, partition, epoch, offset, None)

    def _fetch(self, ev, topic, partition, epoch, offset, leader_leo) -> None:
        engine = self.engine
        if leader_leo is None:
            m = engine.partitions[engine.policies[0]].get((ev.cluster, topic, partition))
            leader_leo = max(offset, -1 if m is None else m.leader_leo)
        outcome = engine.apply(FETCH(
            v=1, cluster=ev.cluster, ts=ev.ts, topic=topic, partition=partition,
            leader=ev.leader, leader_epoch=epoch, replica=ev.replica, fetch_offset=offset,
            leader_leo=leader_leo, received_ts=ev.received_ts, broker_epoch=ev.broker_epoch))
        if outcome.status == "rejected":
            engine.ignored["session_partition_rejected"] += 1


def _outputs(engine: LocalEngine, decisions: list) -> tuple:
    return (sorted(d.model_dump_json() for d in decisions),
            [s.model_dump_json() for s in engine.states()],
            {k: v for k, v in engine.ignored.items() if v})


@settings(max_examples=int(os.environ.get("ISR_SESSION_EXAMPLES", "150")), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(session_streams(), st.lists(st.integers(0, 50), max_size=4))
def test_session_fetches_decide_as_their_expansion_across_batches_and_restarts(events, cuts):
    _decide_as_expansion(events, cuts)


@contextmanager
def _log_cut(factor: int, slack: int):
    """Session logs cut at `factor` x cached + `slack` fetches (the
    SessionDriver's class setting, so restored engines take it too)."""
    saved = SessionDriver.cut_factor, SessionDriver.cut_slack
    SessionDriver.cut_factor, SessionDriver.cut_slack = factor, slack
    try:
        yield
    finally:
        SessionDriver.cut_factor, SessionDriver.cut_slack = saved


@settings(max_examples=int(os.environ.get("ISR_SESSION_EXAMPLES", "150")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(session_streams(), st.lists(st.integers(0, 50), max_size=4), st.integers(0, 1),
       st.integers(0, 4))
def test_a_session_log_cut_anywhere_decides_as_the_expansion(events, cuts, factor, slack):
    """Where a session's log is cut (its partitions caught up, its fetches
    dropped) changes no decision: cut after every fetch or every few (the
    streams are too short to reach the default cut), as the expansion
    decides, and the deadline index's output records, batches and order
    are as visiting every model's."""
    with _log_cut(factor, slack):
        _decide_as_expansion(events, cuts)
        assert _batches(events, cuts, True) == _batches(events, cuts, False)


def _decide_as_expansion(events, cuts) -> None:
    monitor = _monitor()
    ref = Expanding(monitor)
    # in the contract's order of same-ts events (docs/contract.md, "Order of
    # events"), as the engine's sequencer releases them
    for ev in sorted(events, key=lambda e: (e.ts, tie_rank(e))):
        ref.apply(ev)
    ref.engine.finish()

    engine = LocalEngine(monitor)
    decisions: list = []
    start = 0
    for end in sorted({min(c, len(events)) for c in cuts}) + [len(events)]:
        for seq in range(start, end):
            engine.submit(events[seq], seq)
        engine.advance_watermark()
        decisions += engine.take_decisions()
        blob = snapshot.snapshot(engine)
        engine = snapshot.restore(monitor, blob)
        assert snapshot.snapshot(engine) == blob  # sessions and positions round-trip
        start = end
    engine.finish()
    decisions += engine.take_decisions()

    assert _outputs(engine, decisions) == _outputs(ref.engine, ref.engine.decisions)
    assert engine.session_driver.sessions.anomalies == ref.anomalies


# ---------------------------------------------------------------- examples
def session(t: int, session_id: int, epoch: int, parts: dict, replica: int = 2,
            forgotten=(), **kw):
    """A fetch_session at T0 + t from `replica` to leader 1; parts: {partition: offset}."""
    ev = validate({"v": 1, "type": "fetch_session", "ts": T0 + t, "leader": 1,
                   "replica": replica, "session_id": session_id, "session_epoch": epoch,
                   "full": epoch in (0, -1),
                   "partitions": [{"topic": "orders", "partition": p, "leader_epoch": 1,
                                   "fetch_offset": o} for p, o in parts.items()],
                   "forgotten": [{"topic": "orders", "partition": p} for p in forgotten], **kw})
    assert not isinstance(ev, Rejection), ev.reason
    return ev


def _leaders(*partitions):
    return [validate({"v": 1, "type": "leader", "ts": T0, "topic": "orders", "partition": p,
                      "leader": 1, "leader_epoch": 1, "replicas": [1, 2],
                      "isr": [1, 2], "leader_epoch_start_offset": 0}) for p in partitions]


def _engine(events) -> LocalEngine:
    # kip16: a follower at the leader's LEO stays in sync only by fetching
    # (lastCaughtUpTime is the last fetch that reached it), checks every 10 s.
    engine = LocalEngine(MonitorSettings(policy=["kip16"], replica_lag_time_max_ms=10000))
    engine.apply_in_order(_leaders(0, 1) + events)
    engine.finish()
    return engine


def _shrinks(engine) -> dict[int, int]:
    return {d.partition: d.ts - T0 for d in engine.decisions
            if getattr(d, "action", None) == "shrink"}


def test_a_partition_the_requests_stop_listing_is_still_fetched_by_its_session():
    # Full request for 0 and 1, then incremental ones listing nothing: the
    # leader evaluates both at every fetch (KIP-227), so neither falls behind.
    events = [session(0, 0, 0, {0: 0, 1: 0})]
    events += [session(t, 7, e, {}) for e, t in enumerate(range(500, 60000, 500), start=1)]
    engine = _engine(events)
    assert _shrinks(engine) == {}
    assert engine.session_driver.sessions.anomalies == {}
    (state,) = [s for s in engine.states() if s.partition == 1]
    assert state.followers[0].last_fetch_ts == T0 + 59500  # the last session fetch
    # ... without applying each of the 119 fetches to each partition
    assert engine.session_driver.exact_fetches < 30


def test_a_request_that_arrived_before_its_sessions_previous_one_takes_no_caught_up_time_back():
    # The session's next request arrived (received_ts) before the previous
    # one, as when the leader's clock steps back. Applied one by one, the
    # fetches leave lastCaughtUpTimeMs at the largest time credited (T0 + 1);
    # skipping to the session's last fetch had set it back to T0.
    events = [session(0, 0, 0, {0: 0}, replica=3), session(1, 101, 1, {}, replica=3),
              session(1, 101, 2, {}, replica=3, received_ts=T0 - 9)]
    _decide_as_expansion(events, [])
    engine = LocalEngine(MonitorSettings(policy=["kafka"], replica_lag_time_max_ms=10000))
    engine.apply_in_order(events)
    engine.finish()
    (state,) = engine.states()
    assert (state.followers[0].last_caught_up_ts, state.followers[0].last_fetch_ts) == (
        T0 + 1, T0 - 9)


def test_a_forgotten_partition_is_no_longer_fetched_and_shrinks():
    events = [session(0, 7, 0, {0: 0, 1: 0}), session(500, 7, 1, {}, forgotten=[1])]
    events += [session(t, 7, e, {}) for e, t in enumerate(range(1000, 60000, 500), start=2)]
    assert _shrinks(_engine(events)) == {1: 20000}  # last fetched at 0


def test_an_unknown_session_starts_a_new_one_with_what_it_lists_and_is_counted():
    # The monitor missed the full request: the incremental one of session 9
    # is taken as a new session caching partition 0 only (Kafka's leader
    # answers FETCH_SESSION_ID_NOT_FOUND and the follower opens a new one).
    events = [session(0, 9, 5, {0: 0})]
    events += [session(t, 9, e, {}) for e, t in enumerate(range(500, 60000, 500), start=6)]
    events.append(validate({"v": 1, "type": "fetch", "ts": T0, "topic": "orders",
                            "partition": 1, "leader": 1, "leader_epoch": 1, "replica": 2,
                            "fetch_offset": 0, "leader_leo": 0}))
    events.sort(key=lambda e: e.ts)
    engine = _engine(events)
    assert engine.session_driver.sessions.anomalies == {"unknown_session": 1}
    assert _shrinks(engine) == {1: 20000}  # not in the session: its only fetch was at 0


def test_a_skipped_session_epoch_restarts_the_session_from_what_it_lists():
    events = [session(0, 7, 0, {0: 0, 1: 0}), session(500, 7, 1, {}),
              session(1000, 7, 3, {0: 0})]  # epoch 2 never seen
    events += [session(t, 7, e, {}) for e, t in enumerate(range(1500, 60000, 500), start=4)]
    engine = _engine(events)
    assert engine.session_driver.sessions.anomalies == {"session_epoch_skipped": 1}
    assert _shrinks(engine) == {1: 20000}  # last fetched at 500 by the old session


def test_a_full_request_with_session_id_0_is_bound_to_the_id_its_next_request_carries():
    events = [session(0, 0, 0, {0: 0}), session(500, 42, 1, {1: 0})]  # adds partition 1
    events += [session(t, 42, e, {}) for e, t in enumerate(range(1000, 60000, 500), start=2)]
    engine = _engine(events)
    assert engine.session_driver.sessions.anomalies == {}
    assert _shrinks(engine) == {}


def test_a_sessionless_request_fetches_only_what_it_lists():
    engine = _engine([session(0, 0, -1, {0: 0}), session(500, 0, 1, {})])
    assert engine.session_driver.sessions.anomalies == {"unknown_session": 1}


def test_sessions_and_their_pending_fetches_survive_a_restart():
    monitor = MonitorSettings(policy=["kip16"], replica_lag_time_max_ms=10000)
    engine = LocalEngine(monitor)
    engine.apply_in_order(_leaders(0, 1) + [session(0, 7, 0, {0: 0, 1: 0})] +
                          [session(t, 7, e, {}) for e, t in enumerate(range(500, 5000, 500), 1)])
    engine = snapshot.restore(monitor, snapshot.snapshot(engine))
    engine.apply_in_order([session(t, 7, e, {}) for e, t in enumerate(range(5000, 30000, 500),
                                                                       10)])
    engine.finish()
    assert _shrinks(engine) == {}
    assert engine.session_driver.sessions.anomalies == {}


def test_isr_replay_applies_session_events_and_reports_their_anomalies():
    from helpers import cli
    from isr.contract.fast import encode

    events = _leaders(0, 1) + [session(0, 0, 0, {0: 0, 1: 0}), session(500, 7, 1, {}),
                               session(1000, 8, 4, {1: 0})]  # 8: never opened
    r = cli("replay", "-", "--policy", "kip16", "--set", "monitor.replica_lag_time_max_ms=10000",
            stdin="\n".join(encode(e).decode() for e in events) + "\n")
    assert r.returncode == 0, r.stderr
    assert "5 events read, 5 accepted" in r.stderr
    assert "fetch session anomalies: unknown_session 1" in r.stderr
    states = [json.loads(line) for line in r.stdout.splitlines()]
    assert [f["last_fetch_ts"] - T0 for s in states for f in s["followers"]] == [500, 1000]


# ---------------------------------------------------------------- the deadline index
def _streamed(events, policy: str, deadline_index: bool = True) -> LocalEngine:
    """`events` as a stream applies them: a watermark move after each one."""
    engine = LocalEngine(MonitorSettings(policy=[policy], replica_lag_time_max_ms=10000),
                         deadline_index=deadline_index)
    for seq, ev in enumerate(_leaders(0, 1) + events):
        engine.submit(ev, seq)
        engine.advance_watermark()
    engine.finish()
    return engine


def _live_session(parts: dict, seconds: int = 60) -> list:
    return [session(0, 7, 0, parts)] + [
        session(t, 7, e, {}) for e, t in enumerate(range(500, seconds * 1000, 500), start=1)]


def test_a_caught_up_partition_of_a_live_session_is_not_visited_by_checks():
    # Both partitions caught up, their session fetching every 500 ms without
    # listing them: 120 checks, none of which can shrink either.
    events = _live_session({0: 0, 1: 0})
    engine = _streamed(events, "kafka")
    assert engine.visits == 0
    assert _shrinks(engine) == {}
    # ... and their state is still exact when asked for
    assert [f.last_fetch_ts - T0 for s in engine.states() for f in s.followers] == [59500] * 2
    # Visiting every model at every check (before the index): 2 per check.
    every = _streamed(events, "kafka", deadline_index=False)
    assert every.visits > 200 and _shrinks(every) == {}


def test_a_partition_at_risk_is_visited_at_its_deadline_and_shrinks_on_time():
    # Partition 1 gets an append its follower never fetches (its session
    # keeps fetching offset 0): out of sync 10 s after its last catch-up.
    # kip16 keeps a deadline for caught-up partitions too (the last fetch
    # that reached the leader's LEO + 10 s): partition 0 is visited about
    # once per 10 s, not at each of the 120 checks.
    append = validate({"v": 1, "type": "append", "ts": T0 + 1200, "topic": "orders",
                       "partition": 1, "leader": 1, "leader_epoch": 1, "leader_leo": 5})
    events = sorted(_live_session({0: 0, 1: 0}) + [append], key=lambda e: e.ts)
    for policy, shrink_at in (("kafka", 15000), ("kip16", 20000)):
        engine = _streamed(events, policy)
        every = _streamed(events, policy, deadline_index=False)
        assert _shrinks(engine) == _shrinks(every) == {1: shrink_at}, policy
        assert engine.take_decisions() == every.take_decisions()
        assert engine.visits <= 12, (policy, engine.visits)
        assert every.visits > 200


def _batches(events, cuts, deadline_index: bool) -> tuple:
    """Events in batches (a watermark move and a restart after each), with
    the alert rules and ZooKeeper propagation listening: every batch's
    output records in order, then the states, the anomalies and what was
    ignored."""
    from isr.pipeline.listeners import standard_listeners
    monitor = _monitor()
    engine = LocalEngine(monitor, listeners=standard_listeners(monitor),
                         deadline_index=deadline_index)
    batches, start = [], 0
    for end in sorted({min(c, len(events)) for c in cuts}) + [len(events)]:
        for seq in range(start, end):
            engine.submit(events[seq], seq)
        engine.advance_watermark()
        batches.append([d.model_dump_json() for d in engine.take_decisions()])
        engine = snapshot.restore(monitor, snapshot.snapshot(engine),
                                  listeners=standard_listeners(monitor),
                                  deadline_index=deadline_index)
        start = end
    engine.finish()
    batches.append([d.model_dump_json() for d in engine.take_decisions()])
    return (batches, [s.model_dump_json() for s in engine.states()],
            engine.session_driver.sessions.anomalies, {k: v for k, v in engine.ignored.items() if v})


@settings(max_examples=int(os.environ.get("ISR_SESSION_EXAMPLES", "150")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(session_streams(), st.lists(st.integers(0, 50), max_size=4))
def test_checks_that_visit_only_models_due_output_what_visiting_every_model_does(events, cuts):
    """The deadline index changes no output record, nor its batch, nor its
    order: alerts and propagation included, across restarts."""
    assert _batches(events, cuts, True) == _batches(events, cuts, False)


# ---------------------------------------------------------------- the time-only fetch
def _bookkeeping(engine: LocalEngine) -> tuple:
    """What a fetch's application leaves behind, by value: every model's
    state and alert watch, the decisions, the changed models (in order),
    the deadline index's pending touches, the listeners' states."""
    models = [(p, m.to_list(), m.due_dirty, None if m.watch is None else m.watch.to_list())
              for p, parts in engine.partitions.items() for m in parts.values()]
    alerts = engine.listener(AlertListener)
    return (models, [d.model_dump_json() for d in engine.decisions],
            [(m.rules.policy, m.key) for m in engine.dirty.values()],
            [(m.rules.policy, m.key) for m in engine.deadlines.dirty],
            [l.to_state() for l in engine.listeners],
            None if alerts is None else [w.to_list() for w in alerts.dirty],
            dict(engine.ignored))


@pure_only
@settings(max_examples=int(os.environ.get("ISR_SESSION_EXAMPLES", "150")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(session_streams(), st.booleans())
def test_a_fetch_applied_as_moving_only_times_is_what_apply_fetch_does(events, alerts):
    """The session catch-up applies most fetches through
    LocalEngine.apply_times_fetch (PartitionModel.apply_times_fetch). Each
    one it takes is applied again by the general apply_fetch to a copy of
    the engine as it stood: both leave the same models, watches, decisions
    and bookkeeping. One it declines leaves the model as the general path's
    first step (the settle) would."""
    monitor = MonitorSettings(policy=POLICIES, replica_lag_time_max_ms=10000, propagation="zk",
                              alerts={"enabled": alerts})
    engine = local_engine(monitor)
    fast = engine.apply_times_fetch
    taken = Counter()

    def checked(model, *values):
        twin, twin_model, twin_values = copy.deepcopy((engine, model, values))
        twin.dirty = {id(m): m for m in twin.dirty.values()}  # (keyed by identity)
        took = fast(model, *values)
        taken[took] += 1
        if took:
            assert twin.apply_fetch(twin_model, *twin_values, False) is None
        elif values[3] <= twin.reached:  # ts
            twin._settle(twin_model)
        assert _bookkeeping(engine) == _bookkeeping(twin)
        return took

    engine.apply_times_fetch = checked
    _submit_all(engine, events)


@pure_only
@settings(max_examples=int(os.environ.get("ISR_SESSION_EXAMPLES", "150")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(session_streams(), st.booleans())
def test_a_folded_fetch_applied_on_its_own_tests_is_what_apply_fetch_does(events, alerts):
    """The catch-up's common course (SessionDriver._fold_all) applies each
    folded stream's last fetch through LocalEngine.apply_folded_fetch, which
    tests only what `_folds` did not, and tells the listeners through
    on_folded_fetch (the alerts': one test). Each one it takes is applied
    again, to a copy of the engine as it stood, as _apply_entry's general
    path would (the skipped fetches' activity, then apply_fetch): both leave
    the same models, watches, decisions and bookkeeping. One it declines
    changes nothing."""
    monitor = MonitorSettings(policy=POLICIES, replica_lag_time_max_ms=10000, propagation="zk",
                              alerts={"enabled": alerts})
    engine = local_engine(monitor)
    _check_folded_fetches(engine)
    _submit_all(engine, events)


@pure_only
def test_the_steady_followers_of_unlisted_partitions_are_caught_up_as_folded_fetches():
    """Two followers fetch four partitions through sessions whose requests
    list only partition 0 (appended to now and then): the others are caught
    up lazily (at the log's cuts, at the end), each follower's run of
    fetches folded and its last applied by apply_folded_fetch, alerts on,
    as the general path would (the random streams above rarely fold)."""
    engine = local_engine(MonitorSettings(policy=["kafka"], replica_lag_time_max_ms=10000,
                                          alerts={"enabled": True}))
    taken = _check_folded_fetches(engine)
    events = [validate({"v": 1, "type": "leader", "ts": T0, "topic": "orders", "partition": p,
                        "leader": 1, "leader_epoch": 1, "replicas": [1, 2, 3], "isr": [1, 2, 3],
                        "leader_epoch_start_offset": 0}) for p in range(4)]
    for r in (2, 3):
        events.append(session(0, 0, 0, {p: 0 for p in range(4)}, replica=r))
    for e, t in enumerate(range(500, 60000, 500), start=1):
        leo = t // 5000
        if t % 5000 == 0:
            events.append(validate({"v": 1, "type": "append", "ts": T0 + t, "topic": "orders",
                                    "partition": 0, "leader": 1, "leader_epoch": 1,
                                    "leader_leo": leo}))
        for r in (2, 3):
            events.append(session(t + r, 10 + r, e, {0: leo}, replica=r))
    _submit_all(engine, events)
    assert engine.decisions == [] or all(getattr(d, "action", None) is None
                                         for d in engine.decisions)  # no ISR change
    assert taken[True] > 0


def _check_folded_fetches(engine: LocalEngine) -> Counter:
    """engine.apply_folded_fetch checked against the general path (above)
    at every call; the count of the fetches it took and declined."""
    fast, taken = engine.apply_folded_fetch, Counter()

    def checked(model, f, replica, ts, fetch_ts, broker_epoch, skipped_ts):
        twin, twin_model = copy.deepcopy((engine, model))
        twin.dirty = {id(m): m for m in twin.dirty.values()}  # (keyed by identity)
        took = fast(model, f, replica, ts, fetch_ts, broker_epoch, skipped_ts)
        taken[took] += 1
        if took:
            leader, epoch, leo = twin_model.leader, twin_model.leader_epoch, twin_model.leader_leo
            if skipped_ts >= 0:
                twin_model.note_skipped_activity(leader, epoch, skipped_ts)
            assert twin.apply_fetch(twin_model, replica, leader, epoch, ts, fetch_ts, leo, leo,
                                    broker_epoch, twin.brokers[twin_model.cluster]) is None
        assert _bookkeeping(engine) == _bookkeeping(twin)
        return took

    engine.apply_folded_fetch = checked
    return taken


def _submit_all(engine: LocalEngine, events) -> None:
    for seq, ev in enumerate(events):
        engine.submit(ev, seq)
    engine.finish()
