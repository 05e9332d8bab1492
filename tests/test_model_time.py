"""The leader model (isr/model), docs/rules.md "Time and order", "Policies", "At a check instant T"."""

from helpers import T0, append, event, fetch, fetch_start, leader, run

from isr.config import MonitorSettings
from isr.pipeline.local import replay
from isr.contract.fast import encode


def _stalled_follower(until: int, **kw):
    """Replica 2 is in the ISR and never fetches; the leader LEO is 10."""
    return [leader(0, replicas=[1, 2], isr=[1, 2], **kw), append(10, 10), append(until, 10)]


# ---------------------------------------------------------------- time and order
def test_check_instants_are_multiples_of_the_interval_kafka_half_lag():
    # Out of sync once T - 0 > 30000; first multiple of 15000 after that: 45000.
    r = run(_stalled_follower(50000))
    assert r.summary() == [(45000, "shrink", [2], [1], 10)]


def test_check_interval_is_the_lag_for_kip16_and_legacy():
    assert run(_stalled_follower(70000), "kip16").summary() == [(60000, "shrink", [2], [1], 10)]
    assert run(_stalled_follower(70000), "legacy").summary() == [(60000, "shrink", [2], [1], 10)]


def test_isr_expiration_interval_override():
    r = run(_stalled_follower(50000), isr_expiration_interval_ms=1000)
    assert r.summary() == [(31000, "shrink", [2], [1], 10)]


def test_check_at_t_sees_events_with_ts_equal_to_t():
    r = run(_stalled_follower(50000) + [fetch(45000, 2, 10, 10)])
    assert r.changes == []
    # One millisecond later is too late: shrink at 45000, back in at 45001.
    r = run(_stalled_follower(50000) + [fetch(45001, 2, 10, 10)])
    assert r.summary() == [(45000, "shrink", [2], [1], 10), (45001, "expand", [2], [1, 2], 10)]


def test_bounded_replay_runs_checks_up_to_the_largest_ts():
    assert run(_stalled_follower(44999)).changes == []
    assert run(_stalled_follower(45000)).summary() == [(45000, "shrink", [2], [1], 10)]


def test_idle_partition_is_still_checked():
    # Partition 0 gets no event after t=10; partition 1 carries time forward.
    other = [leader(0, replicas=[1], isr=[1], partition=1), append(100000, 5, partition=1)]
    r = run(_stalled_follower(10) + other)
    assert [(c.partition, c.ts - T0, c.action) for c in r.changes] == [(0, 45000, "shrink")]


def test_events_are_applied_in_ts_then_arrival_order():
    ordered = [leader(0, replicas=[1, 2], isr=[1, 2]), append(10, 10), fetch(20, 2, 10, 10),
               append(30, 20), fetch(30, 2, 20, 20), append(50000, 20)]
    shuffled = [ordered[0], ordered[3], ordered[1], ordered[2], ordered[4], ordered[5]]
    a, b = run(ordered), run(shuffled)
    assert a.model().to_list() == b.model().to_list()
    assert a.changes == b.changes
    # Same ts: arrival order decides (the append at 30 came before the fetch at 30).
    assert a.model().hw == 20


def test_late_events_are_dead_lettered_never_applied(tmp_path):
    lines = [leader(0, replicas=[1, 2], isr=[1, 2]), append(10000, 10), fetch(1000, 2, 10, 10)]
    path = tmp_path / "events.jsonl"
    path.write_bytes(b"".join(encode(e) + b"\n" for e in lines))
    result = replay([str(path)], MonitorSettings(allowed_lateness_ms=5000))
    assert [(d.reason_class, d.offset) for d in result.dead_letters] == [("late", 3)]
    assert "before the watermark" in result.dead_letters[0].reason
    assert result.states[0].followers[0].leo == -1  # the late fetch was not applied


# ---------------------------------------------------------------- policies
def test_legacy_removes_a_stuck_follower_by_last_fetch_time():
    events = [leader(0, replicas=[1, 2], isr=[1, 2]), fetch(1000, 2, 0, 0), append(2000, 5),
              append(60000, 5)]
    # T - 1000 > 30000 first holds at the check instant 60000 (interval = lag).
    assert run(events, "legacy").summary() == [(60000, "shrink", [2], [1], 5)]


def test_legacy_removes_a_slow_follower_by_messages():
    events = [leader(0, replicas=[1, 2], isr=[1, 2]), append(500, 500)]
    events += [fetch(1000 * i, 2, 500 * i - 200, 500 * i) for i in range(1, 40)]
    events += [append(1000 * i - 1, 500 * i) for i in range(2, 40)]
    events.sort(key=lambda e: e.ts)
    r = run(events, "legacy", replica_lag_max_messages=100)
    first = r.changes[0]
    assert (first.ts - T0, first.action, first.replicas) == (30000, "shrink", [2])
    assert first.reason == "replica 2: 200 messages behind > 100 (leo 14800, leader_leo 15000)"
    # Fetching every second from the previous fetch's leader LEO, it is in
    # sync by time (KAFKA-4485's branch 2).
    assert run(events, "kafka").changes == []


def test_legacy_follower_with_unknown_leo_is_not_slow():
    events = [leader(0, replicas=[1, 2], isr=[1, 2]), append(10, 10000), append(29000, 10000)]
    assert run(events, "legacy", replica_lag_max_messages=100).changes == []


def test_kip16_catches_up_only_when_the_fetch_reaches_the_leader_leo():
    events = [leader(0, replicas=[1, 2], isr=[1, 2]), fetch(1000, 2, 5, 10),
              fetch(2000, 2, 10, 20)]
    r = run(events, ["kafka", "kip16"], finish=False)
    r.engine.finish()
    assert r.follower(2, "kip16").last_caught_up_ts == T0  # grace from the leader event
    assert r.follower(2, "kafka").last_caught_up_ts == T0 + 1000  # branch 2
    r = run([leader(0, replicas=[1, 2]), fetch(1000, 2, 10, 10, received=900)], "kip16")
    assert r.follower(2).last_caught_up_ts == T0 + 900


def test_kafka_follower_at_the_leader_leo_is_never_out_of_sync():
    events = [leader(0, replicas=[1, 2, 3]), append(10, 10), fetch(1000, 2, 10, 10),
              fetch(1000, 3, 10, 10)]
    events += [fetch(t, 3, 10, 10) for t in range(10000, 600001, 10000)]
    assert run(events, "kafka").changes == []
    # KIP-16 had no LEO-equality rule: the idle follower 2 is dropped.
    assert run(events, "kip16").summary() == [(60000, "shrink", [2], [1, 3], 10)]


def test_kip501_pending_fetch_from_previous_leader_leo_keeps_follower_in_sync():
    events = [leader(0, replicas=[1, 2], isr=[1, 2]), append(10, 10), fetch(1000, 2, 10, 10),
              append(2000, 20), fetch_start(3000, 2, 10, 20), append(100000, 20)]
    assert run(events, "kip501").changes == []
    assert run(events, "kafka").summary()[0][:3] == (45000, "shrink", [2])


def test_kip501_pending_fetch_below_previous_leader_leo_does_not_protect():
    events = [leader(0, replicas=[1, 2], isr=[1, 2]), append(10, 10), fetch(1000, 2, 5, 10),
              append(2000, 20), fetch_start(3000, 2, 8, 20), append(100000, 20)]
    assert run(events, "kip501").summary()[0][:3] == (45000, "shrink", [2])


def test_kip501_caught_up_time_is_the_completion_time():
    events = [leader(0, replicas=[1, 2]), fetch(5000, 2, 10, 10, received=1000)]
    r = run(events, ["kafka", "kip501"])
    assert r.follower(2, "kafka").last_caught_up_ts == T0 + 1000
    assert r.follower(2, "kip501").last_caught_up_ts == T0 + 5000


# ---------------------------------------------------------------- check instant
def test_all_out_of_sync_followers_removed_together_then_hw_recomputed():
    events = [leader(0, replicas=[1, 2, 3]), append(10, 10), fetch(20, 2, 4, 10),
              fetch(20, 3, 6, 10), append(50000, 10)]
    r = run(events)
    (change,) = r.changes
    assert (change.ts - T0, change.action, change.replicas, change.isr_after) == (
        45000, "shrink", [2, 3], [1])
    assert change.isr_before == [1, 2, 3]
    assert change.hw == 10  # was 4; the leader alone holds it now
    assert change.reason == ("replica 2: lag 45000 ms > 30000 ms; leo 4 != leader_leo 10; "
                             "replica 3: lag 45000 ms > 30000 ms; leo 6 != leader_leo 10")
    assert [(d.replica, d.leo, d.lag_ms) for d in change.details] == [(2, 4, 45000), (3, 6, 45000)]


def test_the_leader_is_never_removed():
    r = run([leader(0, replicas=[1, 2]), append(10, 10), append(1_000_000, 10)])
    assert all(1 in c.isr_after for c in r.changes)
    assert r.model().isr == [1]


def test_isr_events_are_compared_not_applied():
    events = [leader(0), event("isr", 10, isr=[1], partition_epoch=4)]
    assert run(events).model().isr == [1, 2, 3]
