"""What the engine shares between partitions to save memory (issue 23):
replica lists and ISRs, names, the alert watches' empty mappings. Sharing
must never let one partition's change reach another, and state that starts
shared and becomes a partition's own must be saved and restored."""

from __future__ import annotations

import copy
import pickle

from isr.alerts.watch import EMPTY, Watch
from isr.config import MonitorSettings
from isr.engine import snapshot
from isr.model.health import FlapWindow
from isr.pipeline.listeners import local_engine, standard_listeners

from helpers import T0, Result, append, event, fetch, fetch_start, leader, pure_only, run


def applied(events, **monitor) -> Result:
    """The engine right after `events`, applied in this order."""
    engine = local_engine(MonitorSettings(policy=["kafka"], **monitor))
    engine.apply_in_order(events)
    return Result(engine)


def test_partitions_with_the_same_replicas_share_their_lists_and_an_isr_change_stays_theirs():
    events = [leader(0, partition=0), leader(0, partition=1),
              append(100, 50, partition=0), append(100, 50, partition=1),
              fetch(200, 2, 50, 50, partition=0), fetch(200, 3, 50, 50, partition=0),
              fetch(200, 2, 50, 50, partition=1), fetch(200, 3, 50, 50, partition=1),
              # partition 0's follower 3 falls behind and is shrunk; partition 1's does not
              append(1000, 80, partition=0), fetch(1000, 2, 80, 80, partition=0),
              append(1000, 80, partition=1), fetch(1000, 2, 80, 80, partition=1),
              fetch(1000, 3, 80, 80, partition=1)]
    r = applied(events[:8])
    a, b = r.model(partition=0), r.model(partition=1)
    assert a.replicas is b.replicas and a.isr is b.isr  # shared
    r = run(events + [fetch(60_000, 2, 80, 80, partition=0),
                      fetch(60_000, 2, 80, 80, partition=1), fetch(60_000, 3, 80, 80, partition=1)],
            replica_lag_time_max_ms=10_000)
    a, b = r.model(partition=0), r.model(partition=1)
    assert a.isr == [1, 2] and b.isr == [1, 2, 3]
    assert a.replicas == b.replicas == [1, 2, 3]


def test_a_bootstrapped_partition_grows_its_own_lists_not_the_shared_ones():
    # Before any leader event, followers met are appended to the model's
    # replicas and ISR in place: those lists must be its own, also once restored.
    events = [leader(0, replicas=(1, 2), partition=1),  # [1, 2] now shared
              append(0, 10, partition=0), fetch(10, 2, 10, 10, partition=0)]
    r = applied(events)
    shared = r.model(partition=1)
    assert r.model(partition=0).replicas == [1, 2] and shared.replicas == [1, 2]
    monitor = MonitorSettings(policy=["kafka"])
    engine = snapshot.restore(monitor, snapshot.snapshot(r.engine))
    boot = engine.partitions["kafka"][("default", "orders", 0)]
    assert boot.bootstrap
    engine.apply(fetch(20, 3, 10, 10, partition=0))  # a third follower met
    assert boot.replicas == [1, 2, 3] and boot.isr == [1, 2, 3]
    other = engine.partitions["kafka"][("default", "orders", 1)]
    assert other.replicas == [1, 2] and other.isr == [1, 2]
    assert shared.replicas == [1, 2] and shared.isr == [1, 2]


def test_names_are_shared_by_a_topic_s_partitions_and_its_session_cache():
    r = applied([leader(0, partition=p) for p in range(3)])
    a, b = r.model(partition=0), r.model(partition=2)
    assert a.topic is b.topic and a.cluster is b.cluster
    key = next(k for k in r.engine.partitions["kafka"] if k[2] == 1)
    assert key[1] is a.topic
    session = event("fetch_session", 100, leader=1, replica=2, session_id=7, session_epoch=0,
                    full=True, partitions=[{"topic": "orders", "partition": p, "leader_epoch": 1,
                                            "fetch_offset": 0, "leader_leo": 0}
                                           for p in range(3)])
    r.engine.apply(session)
    (s,) = r.engine.session_driver.sessions.by_sid.values()
    assert all(t is a.topic for t, _p in s.cached)
    assert [p for _t, p in s.cached] == [0, 1, 2]


def test_a_watch_shares_the_empty_mappings_until_it_needs_its_own_and_saves_them():
    events = [leader(0, partition=0), leader(0, partition=1),
              fetch_start(100, 2, 0, 0, partition=0)]
    r = applied(events)
    alerts = next(l for l in r.engine.listeners if l.name == "alerts")
    w0 = r.model(partition=0).watch
    w1 = r.model(partition=1).watch
    assert w0.unserved == {2: T0 + 100} and w0.unserved is not EMPTY
    assert w1.unserved is EMPTY and w1.served_ms is EMPTY and w1.alerts is EMPTY
    # saved and restored as it was; the restored empty ones are shared again
    monitor = MonitorSettings(policy=["kafka"])
    second = snapshot.restore(monitor, snapshot.snapshot(r.engine),
                              listeners=standard_listeners(monitor))
    kept = next(l for l in second.listeners if l.name == "alerts")
    assert {k: w.to_list() for k, w in kept.watches.items()} == \
        {k: w.to_list() for k, w in alerts.watches.items()}
    k0 = kept.watches[("kafka", "default", "orders", 0)]
    assert k0.unserved == {2: T0 + 100}
    assert k0.served_ms is EMPTY and kept.watches[("kafka", "default", "orders", 1)].unserved is EMPTY


def test_the_shared_empty_mapping_refuses_changes():
    w = Watch("default", "orders", 0, "kafka")
    for change in (lambda d: d.__setitem__(1, 2), lambda d: d.setdefault(1, 2),
                   lambda d: d.update({1: 2}), lambda d: d.pop(1, None), lambda d: d.clear()):
        try:
            change(w.served_ms)
        except TypeError:
            pass
        else:
            raise AssertionError("EMPTY took a change")
    assert EMPTY == {} and not EMPTY


@pure_only
def test_the_shared_empty_mapping_stays_shared_through_copies():
    w = Watch("default", "orders", 0, "kafka")
    for clone in (copy.deepcopy(w), pickle.loads(pickle.dumps(w))):
        assert clone.served_ms is EMPTY and clone.unserved is EMPTY and clone.alerts is EMPTY


def test_an_alert_that_fires_and_resolves_gives_its_watch_back_the_shared_mapping():
    # Follower 3 never fetches: FollowerLagging fires; once it catches up it
    # resolves, and the watch's alerts are the shared empty mapping again.
    events = [leader(0), append(100, 10), fetch(200, 2, 10, 10)]
    events += [fetch(200 + k * 1000, 2, 10, 10) for k in range(1, 40)]
    r = applied(events)
    r.engine.advance_all(T0 + 40_000, inclusive=True)
    w = r.model().watch
    assert ("FollowerLagging", 3) in w.alerts and w.alerts is not EMPTY
    r.engine.apply_in_order([fetch(40_500, 3, 10, 10), fetch(40_600, 2, 10, 10)])
    r.engine.advance_all(T0 + 41_000, inclusive=True)
    assert ("FollowerLagging", 3) not in w.alerts
    assert w.alerts is EMPTY, w.alerts


def test_a_flap_window_starts_shared_and_empty_and_saves_as_a_list():
    f = FlapWindow()
    assert f.times == () and not f.times
    f.add(T0, 60_000)
    f.add(T0 + 1, 60_000)
    assert f.times == [T0, T0 + 1]
    g = FlapWindow()
    assert g.times == ()  # the first's additions are its own
    w = Watch("default", "orders", 0, "kafka")
    assert w.to_list()[13] == [] and Watch.from_list(w.to_list()).to_list() == w.to_list()
    w.flaps = f
    assert Watch.from_list(w.to_list()).flaps.times == [T0, T0 + 1]


def test_replay_forgets_what_changed_but_a_delta_after_a_restore_still_has_it():
    # LocalEngine.forget_changes (isr replay) drops the change records; the
    # Spark job never calls it, and its deltas carry every change.
    monitor = MonitorSettings(policy=["kafka"])
    engine = local_engine(monitor)
    engine.apply(leader(0))
    assert engine.dirty
    engine.forget_changes()
    assert not engine.dirty and not engine.session_driver.dirty
    alerts = next(l for l in engine.listeners if l.name == "alerts")
    assert not alerts.dirty
    engine.apply(append(100, 5))
    assert len(engine.take_dirty()) == 1
