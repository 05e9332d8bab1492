"""The seed documents' scenarios and kafka-reference.md §9's edge cases.

§9 cases 11-14 are about AlterPartition round trips (pending expand/shrink,
rejected or fenced requests); the monitor commits ISR changes at once
(docs/rules.md), so the event contract cannot express them.
"""

from pathlib import Path

from helpers import T0, append, apply_now, broker, fetch, fetch_start, leader, run

from isr.config import MonitorSettings
from isr.pipeline.local import replay

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _one_batch_behind(seconds: int = 120, produce_every: int = 100, fetch_every: int = 200):
    """KAFKA-4485: many tiny produces; each fetch asks for what the leader had
    at the follower's previous fetch, so it is always one batch behind."""
    events = [leader(0, replicas=[1, 2], isr=[1, 2], leader_epoch=3)]
    previous_leo = 0
    for t in range(produce_every, seconds * 1000 + 1, produce_every):
        leo = t // produce_every
        events.append(append(t, leo, leader_epoch=3))
        if t % fetch_every == 0:
            events.append(fetch(t + 1, 2, previous_leo, leo, leader_epoch=3))
            previous_leo = leo
    return events


# ---------------------------------------------------------------- KAFKA-4485
def test_kafka_4485_follower_one_batch_behind_stays_in_the_isr_under_kafka():
    assert run(_one_batch_behind(), "kafka").changes == []


def test_kafka_4485_same_follower_flaps_out_under_kip16():
    r = run(_one_batch_behind(), "kip16")
    # Never "caught up" by KIP-16's rule: out at the first check after 30 s.
    assert r.summary()[0][:4] == (60000, "shrink", [2], [1])


def test_kafka_4485_shipped_example_file():
    result = replay([str(EXAMPLES / "kafka-4485-small-produces.jsonl")],
                    MonitorSettings(policy=["kafka", "kip16"]))
    shrinks = {s.policy: s.shrinks for s in result.summary}
    assert shrinks == {"kafka": 0, "kip16": 1}


# ---------------------------------------------------------------- KIP-501
def test_kip501_example_kafka_shrinks_kip501_does_not():
    # replica.lag.time.max.ms = 10 s; at tx the follower fetches 950 with the
    # leader LEO at 1002; at ty it fetches 1002 with LEO 1100 and the leader
    # takes 25 s to serve it.
    result = replay([str(EXAMPLES / "kip501-slow-leader.jsonl")],
                    MonitorSettings(policy=["kafka", "kip501"], replica_lag_time_max_ms=10000))
    changes = [d for d in result.decisions if d.type == "isr_change"]
    kafka = [(d.ts - 1_700_000_000_000, d.action, d.replicas, d.isr_after, d.hw)
             for d in changes if d.policy == "kafka"]
    assert kafka[0] == (15000, "shrink", [1002, 1003], [1001], 950)
    assert kafka[0][0] > 3000 + 10000  # "any check after tx + 10 s"
    assert [d for d in changes if d.policy == "kip501"] == []
    states = {s.policy: s for s in result.states}
    assert states["kip501"].isr == [1001, 1002, 1003]
    # "Once the fetch request is served, lastCaughtUpTime is set as ty + 25 s"
    assert states["kip501"].followers[0].last_caught_up_ts == 1_700_000_030_500


def test_kip501_follower_pending_read_is_in_sync_during_the_slow_fetch():
    events = [leader(0, replicas=[1001, 1002], isr=[1001, 1002], leader=1001),
              append(10, 1002, leader=1001),
              fetch(1000, 1002, 950, 1002, leader=1001),
              append(2000, 1100, leader=1001),
              fetch_start(3000, 1002, 1002, 1100, leader=1001),
              fetch(28000, 1002, 1002, 1100, received=3000, leader=1001)]
    r = run(events, ["kafka", "kip501"], replica_lag_time_max_ms=10000)
    assert r.summary("kafka")[0][:3] == (15000, "shrink", [1002])
    assert r.summary("kip501") == []


# ---------------------------------------------------------------- HW article
def test_hw_advances_only_on_the_second_fetch_round():
    base = [leader(0, replicas=[1, 2], isr=[1, 2]), fetch(10, 2, 0, 0)]
    produce = base + [append(100, 1)]
    assert apply_now(produce).model().hw == 0
    round_1 = produce + [fetch(200, 2, 0, 1)]  # follower had not written it yet
    assert apply_now(round_1).model().hw == 0
    round_2 = round_1 + [fetch(300, 2, 1, 1)]
    assert apply_now(round_2).model().hw == 1


# ---------------------------------------------------------------- §9 edge cases
def test_edge_1_one_batch_behind_every_200ms_is_never_removed():
    assert run(_one_batch_behind(seconds=300), "kafka").changes == []


def test_edge_2_follower_behind_by_more_than_one_fetch_is_removed_while_fetching():
    events = [leader(0, replicas=[1, 2], isr=[1, 2])]
    for i in range(1, 300):
        events.append(append(200 * i, 10 * i))
        events.append(fetch(200 * i + 1, 2, max(0, 10 * i - 25), 10 * i))
    r = run(events)
    assert r.summary()[0][:3] == (45000, "shrink", [2])


def test_edge_3_stuck_follower_removed_between_lag_and_1_5_lag():
    events = [leader(0, replicas=[1, 2], isr=[1, 2]), append(500, 10), fetch(1000, 2, 10, 10),
              append(2000, 20), append(60000, 30)]
    (change,) = run(events).changes
    assert change.ts - T0 == 45000 and 31000 < 45000 <= 1000 + 45000


def test_edge_4_follower_at_leader_leo_with_no_fetches_is_not_shrunk():
    events = [leader(0, replicas=[1, 2], isr=[1, 2]), append(500, 10), fetch(1000, 2, 10, 10),
              leader(3_600_000, replicas=[1, 2], isr=[1, 2])]  # same epoch: time passes
    assert run(events).changes == []


def test_edge_5_idle_partition_then_one_produce_removes_dead_follower_at_next_tick():
    events = [leader(0, replicas=[1, 2], isr=[1, 2]), append(500, 10), fetch(1000, 2, 10, 10),
              append(100000, 11), append(120000, 11)]
    # Equality held for 99 s; after the produce the old caught-up time counts.
    assert run(events).summary() == [(105000, "shrink", [2], [1], 11)]


def test_edge_6_slow_leader_can_push_the_isr_under_min_isr():
    events = [leader(0, isr=[1, 2, 3], min_insync_replicas=2), append(10, 100),
              fetch(20, 2, 100, 100), fetch(20, 3, 100, 100), append(1000, 200),
              fetch_start(1100, 2, 100, 200), fetch_start(1100, 3, 100, 200),
              append(40000, 300), fetch(50000, 2, 200, 300, received=1100),
              fetch(50000, 3, 200, 300, received=1100)]
    r = run(events, ["kafka", "kip501"])
    assert r.summary("kafka")[0][:4] == (45000, "shrink", [2, 3], [1])
    shrink = r.changes[0]
    assert (shrink.hw, shrink.leader_leo) == (100, 300)  # under min ISR: HW frozen
    assert r.summary("kip501") == []


def test_edge_7_follower_pause_past_session_timeout_is_fenced_first():
    events = [leader(0, replicas=[1, 2], isr=[1, 2]), append(500, 10), fetch(1000, 2, 10, 10),
              append(2000, 20), broker(19000, 2, "fenced"), append(60000, 30)]
    assert [(c.ts - T0, c.cause) for c in run(events).changes] == [(19000, "controller")]


def test_edge_8_restart_with_truncation_new_broker_epoch():
    events = [broker(0, 2, "registered", epoch=10), leader(0, replicas=[1, 2], isr=[1, 2]),
              append(10, 100), fetch(20, 2, 100, 100, broker_epoch=10),
              broker(1000, 2, "registered", epoch=11)]
    # a zombie fetch from the old incarnation is fenced
    r = apply_now(events + [fetch(1100, 2, 100, 100, broker_epoch=10)])
    assert r.engine.ignored["stale_broker_epoch"] == 1
    # the restarted broker truncated to 80: the LEO goes down, caught-up time does not
    r = apply_now(events + [fetch(1200, 2, 80, 100, broker_epoch=11)])
    assert r.follower(2).leo == 80 and r.follower(2).last_caught_up_ts == T0 + 20
    # an epoch newer than the metadata's: applied, but ineligible and not an HW holder
    shrunk = [leader(0, replicas=[1, 2], isr=[1]), append(10, 100),
              fetch(20, 2, 50, 100, broker_epoch=12), broker(0, 2, "registered", epoch=11)]
    shrunk.sort(key=lambda e: e.ts)
    r = run(shrunk + [fetch(30, 2, 100, 100, broker_epoch=12), append(40, 120)])
    assert r.changes == [] and r.model().hw == 120


def test_edge_9_failover_with_the_hw_behind():
    new = {"leader": 2, "leader_epoch": 2}
    events = [leader(0, isr=[1, 2, 3], start=0), append(10, 100), fetch(20, 2, 100, 100),
              fetch(20, 3, 90, 100),
              leader(1000, isr=[2, 3], start=100, hw=80, **new), append(1100, 150, **new)]
    m = apply_now(events).model()
    assert m.hw == 80  # the new leader's own, older HW; frozen: 3's LEO is unknown
    m = apply_now(events + [fetch(1200, 3, 150, 150, **new)]).model()
    assert m.hw == 150
    # replica 1 (old leader) rejoins only at LEO >= max(HW, epoch start)
    r = run(events + [fetch(1200, 3, 150, 150, **new), fetch(1300, 1, 120, 150, **new)])
    assert r.changes == []
    r = run(events + [fetch(1200, 3, 150, 150, **new), fetch(1300, 1, 150, 150, **new)])
    assert r.summary() == [(1300, "expand", [1], [2, 3, 1], 150)]
    # ISR members get the full lag as grace from the election (1000 + 30000 < 45000)
    r = run(events + [append(46000, 150, **new)])
    assert r.summary()[0][:3] == (45000, "shrink", [3])


def test_edge_10_same_leader_epoch_bump_resets_non_isr_timing():
    events = [leader(0, isr=[1, 2]), append(10, 100), fetch(20, 3, 50, 100),
              leader(1000, leader_epoch=2, isr=[1, 2], start=100),
              fetch(2000, 3, 100, 120)]
    f3 = apply_now(events).follower(3)
    # branch 2 credits the reset time 0 (non-ISR), not the fetch before the bump
    assert f3.last_caught_up_ts == 0


def test_edge_17_out_of_order_fetches_only_fetch_time_goes_back():
    r = apply_now([leader(0, replicas=[1, 2]), fetch(2000, 2, 10, 10, received=1900),
                   fetch(2001, 2, 10, 12, received=1500)])
    f = r.follower(2)
    assert (f.last_fetch_ts, f.last_caught_up_ts, f.last_fetch_leader_leo) == (
        T0 + 1500, T0 + 1900, 12)


def test_edge_18_min_isr_above_replication_factor_is_capped():
    r = apply_now([leader(0, replicas=[1, 2], isr=[1, 2], min_insync_replicas=5)])
    assert not r.state().under_min_isr and r.state().at_min_isr
