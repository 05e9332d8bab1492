"""The leader model (isr/model), docs/rules.md "On fetch", "On append", "HW recomputation": one test per rule."""

from helpers import T0, append, apply_now, broker, fetch, leader, run


# ---------------------------------------------------------------- step 1
def test_fetch_with_stale_leader_epoch_is_ignored_and_counted():
    r = apply_now([leader(0), fetch(100, 2, 5, 5, leader_epoch=0)])
    assert r.follower(2).leo == -1
    assert r.engine.ignored["stale_epoch"] == 1


def test_fetch_with_older_broker_epoch_than_known_is_ignored():
    r = apply_now([leader(0), broker(50, 2, "registered", epoch=7),
                   fetch(100, 2, 5, 5, broker_epoch=6)])
    assert r.follower(2).leo == -1
    assert r.engine.ignored["stale_broker_epoch"] == 1
    r = apply_now([leader(0), broker(50, 2, "registered", epoch=7),
                   fetch(100, 2, 5, 5, broker_epoch=7)])
    assert r.follower(2).leo == 5


# ---------------------------------------------------------------- step 2 (kafka)
def test_caught_up_branch_1_fetch_reaching_leader_leo_sets_fetch_time():
    r = apply_now([leader(0), fetch(1000, 2, 10, 10, received=900)])
    assert r.follower(2).last_caught_up_ts == T0 + 900


def test_caught_up_branch_2_credits_the_previous_fetch_time():
    # Second fetch is below the current leader LEO (20) but at the LEO of the
    # previous fetch (10): credited with the previous fetch time, 1000.
    r = apply_now([leader(0), fetch(1000, 2, 5, 10), fetch(2000, 2, 10, 20)])
    assert r.follower(2).last_caught_up_ts == T0 + 1000


def test_caught_up_unchanged_when_below_previous_fetch_leader_leo():
    r = apply_now([leader(0), fetch(1000, 2, 10, 10), fetch(2000, 2, 10, 30),
                   fetch(3000, 2, 20, 40)])
    # 3rd fetch: 20 < 40 and 20 < 30 (previous leader LEO): unchanged.
    assert r.follower(2).last_caught_up_ts == T0 + 1000


def test_caught_up_time_never_decreases():
    # received_ts older than the stored caught-up time does not lower it.
    r = apply_now([leader(0), fetch(5000, 2, 10, 10), fetch(6000, 2, 10, 10, received=100)])
    assert r.follower(2).last_caught_up_ts == T0 + 5000


def test_caught_up_compares_with_old_stored_values():
    # Branch 2 uses the old last_fetch_leader_leo (10), not the max with 20.
    r = apply_now([leader(0), fetch(1000, 2, 10, 10), fetch(2000, 2, 15, 20)])
    assert r.follower(2).last_caught_up_ts == T0 + 1000
    r = apply_now([leader(0), fetch(1000, 2, 10, 12), fetch(2000, 2, 11, 20)])
    assert r.follower(2).last_caught_up_ts == T0  # the leader event's grace, unchanged


# ---------------------------------------------------------------- step 3
def test_fetch_sets_leo_even_downwards_after_truncation():
    r = apply_now([leader(0), fetch(1000, 2, 50, 50), fetch(2000, 2, 30, 50)])
    assert r.follower(2).leo == 30


def test_last_fetch_leader_leo_is_a_running_max_and_fetch_ts_overwrites():
    r = apply_now([leader(0), fetch(1000, 2, 5, 40), fetch(2000, 2, 5, 30, received=500)])
    f = r.follower(2)
    assert f.last_fetch_leader_leo == 40
    assert f.last_fetch_ts == T0 + 500


def test_partition_leader_leo_is_max_of_fetch_leader_leo():
    r = apply_now([leader(0), fetch(1000, 2, 5, 40), fetch(2000, 3, 5, 30)])
    assert r.model().leader_leo == 40


# ---------------------------------------------------------------- step 4
def test_expand_when_leo_reaches_hw_and_epoch_start():
    r = run([leader(0, isr=[1, 2], start=100, hw=100), fetch(1000, 3, 100, 100)])
    assert r.summary() == [(1000, "expand", [3], [1, 2, 3], 100)]


def test_no_expand_below_hw():
    r = run([leader(0, isr=[1, 2], start=100, hw=100), fetch(1000, 3, 99, 100)])
    assert r.changes == []


def test_no_expand_below_leader_epoch_start_offset():
    # HW 50 is reached but not the epoch start offset 100 (KAFKA-7128).
    r = run([leader(0, isr=[1, 2], start=100, hw=50), fetch(1000, 3, 60, 100)])
    assert r.changes == []


# ---------------------------------------------------------------- step 5
def test_hw_recomputed_when_follower_leo_changes():
    r = apply_now([leader(0, isr=[1, 2], replicas=[1, 2]), append(10, 10),
                   fetch(20, 2, 10, 10)])
    assert r.model().hw == 10


def _pseudo_isr_events():
    """Replica 3 is outside the ISR, behind the HW, but caught up by branch 2:
    KAFKA-4485's pseudo-ISR member that stops the HW from rising."""
    return [leader(0, isr=[1, 2], start=50, hw=50),
            fetch(1000, 3, 10, 50),            # below HW: no expand
            append(1500, 100), fetch(1600, 2, 100, 100),
            fetch(2000, 3, 50, 100),           # >= previous fetch's leader LEO: caught up (1000)
            append(2500, 200), fetch(2600, 2, 200, 200)]


def test_hw_not_recomputed_by_fetch_with_unchanged_leo():
    # Replica 3 ages out of "caught up" after 31000, but only an append or a
    # LEO-changing fetch recomputes the HW, never a timer or a same-LEO fetch.
    events = _pseudo_isr_events() + [fetch(40000, 2, 200, 200)]
    assert apply_now(events).model().hw == 100
    assert apply_now(events + [append(41000, 200)]).model().hw == 200


# ---------------------------------------------------------------- append
def test_append_raises_leader_leo_and_recomputes_hw():
    r = apply_now([leader(0, replicas=[1], isr=[1]), append(10, 7)])
    assert (r.model().leader_leo, r.model().hw) == (7, 7)
    r = apply_now([leader(0, replicas=[1], isr=[1]), append(10, 7), append(20, 3)])
    assert r.model().leader_leo == 7


# ---------------------------------------------------------------- HW recomputation
def test_hw_is_min_leo_of_holders_and_only_moves_forward():
    r = apply_now([leader(0, isr=[1, 2, 3]), append(10, 100), fetch(20, 2, 80, 100),
                   fetch(30, 3, 60, 100)])
    assert r.model().hw == 60
    r = apply_now([leader(0, isr=[1, 2, 3]), append(10, 100), fetch(20, 2, 80, 100),
                   fetch(30, 3, 60, 100), fetch(40, 3, 20, 100)])  # truncation
    assert r.model().hw == 60


def test_isr_holder_with_unknown_leo_keeps_hw():
    r = apply_now([leader(0, isr=[1, 2, 3]), append(10, 100), fetch(20, 2, 100, 100)])
    assert r.model().hw == 0  # replica 3 never fetched: leo -1


def test_hw_frozen_while_under_strict_min_isr_kafka():
    events = [leader(0, replicas=[1, 2, 3], isr=[1], min_insync_replicas=2), append(10, 100)]
    assert apply_now(events, "kafka").model().hw == 0
    assert apply_now(events, "kip501").model().hw == 0
    # Before KAFKA-15583 the HW advanced with a lone leader.
    assert apply_now(events, "kip16").model().hw == 100
    assert apply_now(events, "legacy").model().hw == 100


def test_effective_min_isr_is_capped_at_replication_factor():
    r = apply_now([leader(0, replicas=[1, 2], isr=[1, 2], min_insync_replicas=3),
                   append(10, 100), fetch(20, 2, 100, 100)])
    assert r.model().min_isr == 2
    assert r.model().hw == 100


def test_caught_up_non_isr_follower_holds_hw_kafka_only():
    events = _pseudo_isr_events()
    assert apply_now(events, "kafka").model().hw == 100
    assert apply_now(events, "kafka").model().isr == [1, 2]
    assert apply_now(events, "kip16").model().hw == 200


def test_ineligible_non_isr_follower_does_not_hold_hw():
    events = [broker(0, 3, "controlled_shutdown")] + _pseudo_isr_events()
    assert apply_now(events, "kafka").model().hw == 200
