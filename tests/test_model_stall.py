"""A leader that was itself stopped (docs/rules.md, "A leader that was itself
stopped"; isr/model/stall.py): its overdue ISR check runs when it resumes."""

from helpers import T0, append, fetch, leader, run

from isr.config import MonitorSettings
from isr.contract.decisions import IsrChange
from isr.engine.local import LocalEngine
from isr.model.partition import PartitionModel

LAG = 3000  # interval 1500


def _live_until(t_last: int) -> list:
    """Leader 1, followers 2 and 3 fetching at its LEO 10 every 400 ms up to t_last."""
    events = [leader(0), append(100, 10)]
    for t in range(200, t_last + 1, 400):
        events += [fetch(t, 2, 10, 10), fetch(t + 1, 3, 10, 10)]
    return events


def _resume(t: int) -> list:
    """What the leader logs when it runs again at t: a produce queued while it
    was stopped is appended (LEO 11), then its followers fetch."""
    return [append(t, 11), fetch(t, 2, 10, 11), fetch(t + 10, 3, 10, 11),
            fetch(t + 20, 2, 11, 11), fetch(t + 30, 3, 11, 11)]


def test_a_leader_stopped_longer_than_the_lag_shrinks_its_followers_when_it_resumes():
    # Last activity at 1001, then nothing until 9100 (not a check instant): 8.1 s > 3 s.
    events = _live_until(1000) + _resume(9100)
    for policy in ("kafka", "kip501"):
        r = run(events, policy, replica_lag_time_max_ms=LAG)
        assert r.summary(policy) == [
            # at the resume, after the append and before the fetches at 9000;
            # alone in the ISR (min ISR 1) the leader's HW goes to its LEO 11
            (9100, "shrink", [2, 3], [1], 11),
            (9120, "expand", [2], [1, 2], 11),
            (9130, "expand", [3], [1, 2, 3], 11),
        ], policy
        assert r.changes[0].reason.startswith("leader 1 resumed after 8099 ms without activity: ")


def test_the_resume_check_comes_before_a_fetch_at_the_same_instant():
    # Follower 2's fetch at the resume reaches the new LEO: Kafka read it after
    # the overdue check, so it is removed and taken back, not kept.
    events = _live_until(1000) + [append(9100, 11), fetch(9100, 2, 11, 11),
                                  fetch(9110, 3, 11, 11)]
    assert run(events, replica_lag_time_max_ms=LAG).summary() == [
        (9100, "shrink", [2, 3], [1], 11), (9100, "expand", [2], [1, 2], 11),
        (9110, "expand", [3], [1, 2, 3], 11)]


def test_the_same_fetches_from_a_live_leader_change_nothing():
    # Follower 3 keeps fetching (the leader runs) while follower 2 is silent.
    events = _live_until(1000)
    events += [fetch(t, 3, 10, 10) for t in range(1400, 9100, 400)]
    events += _resume(9100)
    assert run(events, replica_lag_time_max_ms=LAG).changes == []


def test_a_stall_shorter_than_the_lag_is_not_one():
    events = _live_until(1000) + _resume(3990)  # 2989 ms without activity
    assert run(events, replica_lag_time_max_ms=LAG).changes == []


def test_a_resume_without_a_queued_produce_finds_its_followers_at_its_leo():
    # Kafka 2.1+ (KAFKA-7152): a follower at the leader's LEO is in sync however old its fetch.
    events = _live_until(1000) + [fetch(9100, 2, 10, 10), fetch(9110, 3, 10, 10)]
    assert run(events, replica_lag_time_max_ms=LAG).changes == []
    # kip16 (0.9-2.0) judges the last catch-up alone: out at the first check
    # (every lag) after 4001, during the stall - which a stopped leader cannot
    # do (docs/rules.md: not modelled, the monitor learns of a stall at its end).
    assert run(events, "kip16", replica_lag_time_max_ms=LAG).summary() == [
        (6000, "shrink", [2, 3], [1], 10), (9100, "expand", [2], [1, 2], 10),
        (9110, "expand", [3], [1, 2, 3], 10)]


def test_a_new_leaders_first_activity_is_no_resume():
    # Broker 2 becomes leader at 5000; its first activity (8200) comes 7.2 s
    # after broker 1's last, but nothing of broker 2 was seen before it: no
    # evidence of a stall. Its followers catch up at 8300, before the check at
    # 9000 that would find them out of sync (lastCaughtUp 5000, the election).
    by2 = {"leader": 2, "leader_epoch": 2}
    events = _live_until(1000) + [
        leader(5000, start=10, **by2), append(8200, 11, **by2),
        fetch(8300, 1, 11, 11, **by2), fetch(8300, 3, 11, 11, **by2)]
    assert run(events, replica_lag_time_max_ms=LAG).changes == []


def test_the_pending_resume_check_survives_a_saved_state_and_small_batches():
    events = _live_until(1000) + _resume(9100)
    whole = run(events, replica_lag_time_max_ms=LAG).summary()
    cut = len(events) - 4  # right after the append at the resume: the check is pending
    settings = MonitorSettings(policy=["kafka"], replica_lag_time_max_ms=LAG)
    first = LocalEngine(settings)
    first.apply_in_order(events[:cut])
    second = LocalEngine(settings)
    for key, model in first.partitions["kafka"].items():
        restored = PartitionModel.from_list(model.rules, model.to_list())
        assert restored.stall_check_at == T0 + 9100
        second.partitions["kafka"][key] = restored
    second.brokers = first.brokers
    second.apply_in_order(events[cut:])
    second.finish()
    got = [(c.ts - T0, c.action, c.replicas, c.isr_after, c.hw)
           for c in first.decisions + second.decisions if isinstance(c, IsrChange)]
    assert got == whole


def test_a_version_1_state_reads_with_no_stall_pending():
    r = run(_live_until(1000), replica_lag_time_max_ms=LAG)
    values = r.model().to_list()
    values[0] = 1
    values[4] = values[4][:-3]
    m = PartitionModel.from_list(r.model().rules, values)
    assert (m.leader_active_ts, m.stall_check_at) == (-1, -1)


def test_a_silent_leader_whose_follower_never_fetches_again_is_left_to_the_regular_checks():
    # Follower 2 dies after its fetch at 1000 and nothing is produced until
    # 9100: the same silence, but no fetch confirms it by the check at 10500,
    # so the regular check there removes it (kafka-reference.md §9, edge 5).
    events = [leader(0, replicas=[1, 2], isr=[1, 2]), append(100, 10),
              fetch(1000, 2, 10, 10), append(9100, 11), append(12000, 11)]
    assert run(events, replica_lag_time_max_ms=LAG).summary() == [
        (10500, "shrink", [2], [1], 11)]

