"""The leader model (isr/model), docs/rules.md "On leader", "Eligibility", "Controller removal",
"ZooKeeper-era propagation", "A partition seen before its leader event"."""

from helpers import T0, append, apply_now, broker, fetch, leader, run

from isr.config import MonitorSettings
from isr.pipeline.local import replay
from isr.contract.fast import encode


def _with_fetches():
    return [leader(0, start=0), append(10, 100), fetch(20, 2, 100, 100, broker_epoch=5),
            fetch(30, 3, 60, 100, broker_epoch=6)]


# ---------------------------------------------------------------- On leader
def test_older_leader_epoch_is_ignored():
    r = apply_now([leader(0, leader_epoch=2), leader(10, leader_epoch=1, isr=[1])])
    assert r.model().isr == [1, 2, 3]
    assert r.engine.ignored["stale_epoch"] == 1


def test_new_leader_broker_resets_every_follower():
    r = apply_now(_with_fetches() + [
        leader(1000, leader=2, leader_epoch=2, isr=[2, 3], start=100)])
    m = r.model()
    assert (m.leader, m.leader_epoch, m.leader_leo, m.leader_epoch_start_offset) == (2, 2, 100, 100)
    assert m.hw == 60  # min(old HW 60, new leader_leo 100): no hw on the event
    f1, f3 = m.followers[1], m.followers[3]
    assert (f1.leo, f1.last_fetch_leader_leo, f1.last_fetch_ts, f1.last_caught_up_ts) == (-1, -1, 0, 0)
    assert (f3.leo, f3.last_fetch_leader_leo, f3.last_fetch_ts, f3.last_caught_up_ts) == (
        -1, -1, 0, T0 + 1000)
    assert f3.broker_epoch == -1


def test_same_leader_higher_epoch_keeps_leo_and_broker_epoch():
    r = apply_now(_with_fetches() + [leader(1000, leader_epoch=2, isr=[1, 2], start=100, hw=60)])
    f2, f3 = r.model().followers[2], r.model().followers[3]
    assert (f2.leo, f2.broker_epoch, f2.last_fetch_leader_leo) == (100, 5, 100)
    assert (f2.last_fetch_ts, f2.last_caught_up_ts) == (T0 + 1000, T0 + 1000)
    assert (f3.leo, f3.broker_epoch, f3.last_fetch_ts, f3.last_caught_up_ts) == (60, 6, 0, 0)


def test_same_epoch_assignment_change_keeps_state_and_offsets():
    r = apply_now(_with_fetches() + [leader(1000, replicas=[1, 2, 4], isr=[1, 2], start=999)])
    m = r.model()
    assert sorted(m.followers) == [2, 4]
    assert m.followers[2].leo == 100 and m.followers[2].last_caught_up_ts == T0 + 20
    assert m.followers[4].leo == -1 and m.followers[4].last_caught_up_ts == 0
    # epoch start offset, leader LEO and HW are not taken from a same-epoch event
    assert (m.leader_epoch_start_offset, m.leader_leo, m.hw) == (0, 100, 100)


def test_leader_event_hw_is_taken_when_given_else_min_of_old_hw_and_leo():
    r = apply_now([leader(0, start=100, hw=80)])
    assert r.model().hw == 80
    r = apply_now([leader(0, start=100, hw=80), leader(10, leader=2, leader_epoch=2, start=50)])
    assert r.model().hw == 50


def test_leader_is_always_in_the_isr():
    assert apply_now([leader(0, isr=[2, 3])]).model().isr == [1, 2, 3]


def test_leader_change_without_higher_epoch_is_rejected(tmp_path):
    path = tmp_path / "e.jsonl"
    path.write_bytes(encode(leader(0)) + b"\n" + encode(leader(10, leader=2)))
    result = replay([str(path)], MonitorSettings())
    (dl,) = result.dead_letters
    assert (dl.offset, dl.reason_class) == (2, "model")
    assert dl.reason == "leader changed from 1 to 2 without a higher leader_epoch than 1"


def test_min_insync_replicas_on_the_leader_event_overrides_config():
    r = apply_now([leader(0, isr=[1, 2], min_insync_replicas=3)], min_insync_replicas=1)
    assert r.state().under_min_isr and r.state().min_insync_replicas == 3


def test_per_topic_min_insync_replicas_from_config():
    r = apply_now([leader(0, isr=[1])], topics={"orders": {"min_insync_replicas": 2}})
    assert r.state().under_min_isr


# ---------------------------------------------------------------- eligibility
def test_fenced_broker_cannot_join_the_isr_under_modern_policies():
    events = [broker(0, 3, "fenced"), leader(0, isr=[1, 2]), fetch(10, 3, 0, 0)]
    assert run(events, "kafka").changes == []
    assert run(events, "kip16").summary() == [(10, "expand", [3], [1, 2, 3], 0)]


def test_broker_epoch_mismatch_makes_a_follower_ineligible():
    events = [broker(0, 3, "registered", epoch=7), leader(0, isr=[1, 2]),
              fetch(10, 3, 0, 0, broker_epoch=8)]
    assert run(events).changes == []
    events[-1] = fetch(10, 3, 0, 0, broker_epoch=7)
    assert run(events).summary() == [(10, "expand", [3], [1, 2, 3], 0)]


def test_unknown_epochs_and_no_broker_events_are_eligible():
    assert run([leader(0, isr=[1, 2]), fetch(10, 3, 0, 0, broker_epoch=8)]).changes
    events = [broker(0, 3, "registered", epoch=-1), leader(0, isr=[1, 2]),
              fetch(10, 3, 0, 0, broker_epoch=8)]
    assert run(events).changes


# ---------------------------------------------------------------- controller removal
def test_fenced_follower_is_removed_from_every_isr_at_once():
    events = [leader(0), leader(0, partition=1), append(5, 10), append(5, 10, partition=1),
              fetch(6, 2, 10, 10), fetch(6, 3, 10, 10), fetch(6, 2, 10, 10, partition=1),
              fetch(6, 3, 10, 10, partition=1), broker(1000, 3, "fenced", epoch=4)]
    r = run(events)
    assert [(c.partition, c.ts - T0, c.cause, c.replicas, c.isr_after) for c in r.changes] == [
        (0, 1000, "controller", [3], [1, 2]), (1, 1000, "controller", [3], [1, 2])]
    assert r.changes[0].reason == "controller removed broker 3 from the ISR: broker fenced (broker_epoch 4)"


def test_controlled_shutdown_and_unregistered_also_remove():
    for state in ("controlled_shutdown", "unregistered"):
        r = run([leader(0), broker(10, 2, state)])
        assert r.summary() == [(10, "shrink", [2], [1, 3], 0)]


def test_no_controller_removal_under_historic_policies():
    events = [leader(0), broker(10, 2, "fenced")]
    assert run(events, "kip16").changes == [] and run(events, "legacy").changes == []


def test_fenced_leader_leaves_the_partition_leaderless_until_next_leader_event():
    events = [leader(0), broker(10, 1, "fenced"), fetch(20, 2, 0, 0), append(30, 5)]
    r = apply_now(events)
    assert r.state().leader == -1
    assert r.engine.ignored["no_leader"] == 2
    r = apply_now(events + [leader(40, leader=2, leader_epoch=2, isr=[2, 3], start=0)])
    assert r.state().leader == 2


def test_unfenced_broker_rejoins_on_a_fetch_with_unchanged_leo():
    # Edge case 16: a fetch that leaves the LEO unchanged may still expand.
    events = [leader(0), append(5, 10), fetch(6, 2, 10, 10), fetch(6, 3, 10, 10),
              broker(100, 3, "fenced", epoch=4), fetch(200, 3, 10, 10),
              broker(300, 3, "unfenced", epoch=4), fetch(400, 3, 10, 10)]
    assert run(events).summary() == [(100, "shrink", [3], [1, 2], 10),
                                     (400, "expand", [3], [1, 2, 3], 10)]


# ---------------------------------------------------------------- propagation
def _expand_at(t: int, partition: int):
    return [leader(0, replicas=[1, 2], isr=[1], partition=partition),
            fetch(t, 2, 0, 0, partition=partition)]


def test_zk_propagation_batches_after_5s_quiet_or_60s():
    events = sorted(_expand_at(45000, 0) + _expand_at(46000, 1) + _expand_at(50000, 2)
                    + [append(70000, 0, partition=0)], key=lambda e: e.ts)
    r = run(events, propagation="zk")
    # The first change goes out at once (nothing sent for 60 s); the next two
    # wait for 5 s without changes: 50000 + 5000 < T on the 2.5 s grid.
    assert [(p.ts - T0, [x.partition for x in p.partitions]) for p in r.propagations] == [
        (45000, [0]), (57500, [1, 2])]
    assert run(events).propagations == []  # kraft mode: none


def test_zk_propagation_never_waits_more_than_60s():
    events = [leader(0, replicas=[1, 2], isr=[1], partition=p) for p in range(40)]
    events += [fetch(1000 + 4000 * p, 2, 0, 0, partition=p) for p in range(40)]
    r = run(events, propagation="zk")
    times = [p.ts - T0 for p in r.propagations]
    assert times[0] == 2500  # first change at 1000, nothing propagated before
    assert times[1] == 65000  # changes every 4 s never leave 5 s of quiet: 2500 + 60000 < T
    assert sum(len(p.partitions) for p in r.propagations) <= 40


# ---------------------------------------------------------------- bootstrap
def test_partition_seen_before_its_leader_event_is_bootstrapped():
    events = [fetch(100, 2, 5, 10), fetch(100, 3, 10, 10), append(200, 10),
              append(60000, 10)]
    r = run(events)
    m = r.model()
    assert (m.replicas, m.leader, m.leader_epoch) == ([1, 2, 3], 1, 1)
    (change,) = r.changes
    assert (change.ts - T0, change.replicas, change.bootstrap) == (45000, [2], True)
    r = run(events + [leader(60001, isr=[1, 3])])
    assert r.model().bootstrap is False and r.state().bootstrap is False


# ---------------------------------------------------------------- lags stated
def _stated_lags(decisions) -> list[tuple[int, int]]:
    """(decision ts, lag) for every lag a decision states: a shrink's reason
    ("lag N ms"), its details' lag_ms, an alert's numbers."""
    import re

    out = []
    for d in decisions:
        text = d.model_dump_json()
        out += [(d.ts, int(n)) for n in re.findall(r"lag (\d+) ms", text)]
        out += [(d.ts, int(n)) for n in re.findall(r'"lag_ms":(\d+)', text)]
    return out


def _assert_lags_within_the_epoch(events, epoch_seen_at: int):
    """No decision states a lag longer than the time since the monitor first
    saw the partition's current leader epoch (a lastCaughtUpTimeMs of 0 is
    not a time: it once showed as "lag 1795663462000 ms" in `isr demo`)."""
    results = {}
    for policy in ("legacy", "kip16", "kafka", "kip501"):
        r = results[policy] = run(events, policy=policy, replica_lag_time_max_ms=3000)
        lags = _stated_lags(r.engine.decisions)
        assert lags, policy
        assert all(lag <= ts - epoch_seen_at for ts, lag in lags), (policy, lags)
    return results["kafka"]


def test_the_first_leader_event_of_a_bootstrapped_epoch_keeps_its_followers_fetches():
    """The demo's taps: follower fetches before the metadata poller's first
    view, which comes while broker 3 is paused (ISR [1, 2], same leader
    epoch). No epoch began there: replica 3's fetch at +10 ms stands, so when
    it comes back behind the leader and is shrunk again its lag is the time
    since then, not since 1970."""
    events = [append(0, 30), fetch(10, 2, 30, 30), fetch(10, 3, 30, 30),
              leader(1000, isr=[1, 2]), append(1500, 50), fetch(1600, 2, 40, 50),
              fetch(1700, 3, 40, 50), fetch(1800, 2, 50, 50), append(9000, 60)]
    r = _assert_lags_within_the_epoch(events, T0)
    assert r.model().followers[3].last_caught_up_ts == T0 + 10
    shrink = [c for c in r.changes if c.action == "shrink" and 3 in c.replicas][0]
    assert f"replica 3: lag {shrink.ts - (T0 + 10)} ms > 3000 ms" in shrink.reason


def test_a_follower_never_caught_up_in_its_leader_epoch_says_so():
    """A new leader's follower outside the ISR (lastCaughtUpTimeMs 0, as
    Kafka's resetReplicaState sets it) joins on a fetch behind the leader's
    LEO and is out of sync at the next check, as in Kafka; its reason says
    it never caught up instead of a lag counted from 1970."""
    new = {"leader": 2, "leader_epoch": 2}
    events = [leader(0), append(100, 30),
              leader(1000, isr=[2, 1], start=30, **new), append(1500, 50, **new),
              fetch(1600, 1, 40, 50, **new), fetch(1700, 3, 40, 50, **new),
              fetch(1800, 1, 50, 50, **new), append(9000, 60, **new)]
    r = _assert_lags_within_the_epoch(events, T0 + 1000)
    shrink = [c for c in r.changes if c.action == "shrink" and 3 in c.replicas][0]
    assert shrink.reason.startswith("replica 3: never caught up in this leader epoch")


# ---------------------------------------------------------------- Stale broker epochs
def _stale_by_the_table(states: dict, broker_id: int, fetch_epoch: int) -> bool:
    """The rule as the table states it (KAFKA-15221), without newest_epoch."""
    entry = states.get(broker_id)
    return fetch_epoch >= 0 and entry is not None and entry[1] >= 0 and fetch_epoch < entry[1]


def test_a_fetch_at_or_above_the_newest_known_broker_epoch_is_never_stale():
    """The per-fetch callers ask is_stale_fetch only below `newest_epoch`:
    after any broker events (epochs going up and down, unknown ones, a
    restore), no fetch epoch is stale at or above it, and is_stale_fetch
    answers as the table says."""
    import random

    from isr.model.brokers import Brokers

    rnd = random.Random(23)
    for _ in range(300):
        b = Brokers()
        for _ in range(rnd.randrange(12)):
            b.apply(rnd.randrange(4), rnd.choice(["registered", "fenced", "unregistered"]),
                    rnd.randrange(-1, 9))
            if rnd.random() < 0.2:
                b = Brokers.from_list(b.to_list())  # a restore
            for broker_id in range(5):
                for epoch in range(-1, 11):
                    stale = _stale_by_the_table(b.states, broker_id, epoch)
                    assert b.is_stale_fetch(broker_id, epoch) == stale
                    if stale:
                        assert epoch < b.newest_epoch
