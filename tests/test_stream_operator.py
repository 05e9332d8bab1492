"""The Spark job's Python stages without Spark: packing (decode, judge, route,
summarise) and one bucket's processing (the watermark from the batch's
summaries, lateness, the state round trip, the end of input)."""

from __future__ import annotations

import json
import os
import pickle
import zlib
from collections import Counter
from itertools import count

import msgspec

import pytest
from helpers import T0, append, broker, fetch, leader
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import event_streams, session_streams

from isr.config import MonitorSettings
from isr.contract import DECISION_TYPES, decode, validate
from isr.contract.decisions import PartitionState
from isr.contract.records import metrics_states, to_record
from isr.contract.fast import encode
from isr.contract.policies import POLICIES
from isr.engine import snapshot
from isr.engine.local import LocalEngine
from isr.engine.summary import model_stats
from isr.pipeline.listeners import local_engine
from isr.stream.operator import BucketProcessor, compress_state, decompress_state
from isr.stream.throttle import StateThrottle, next_instant, phase_of
from isr.stream.packing import (END_OF_INPUT, END_OF_RUN, Packer, bucket_of, hold_of,
                                session_home, session_shares, unpack)

MONITOR = MonitorSettings(allowed_lateness_ms=1000)


def values_of(events) -> list[bytes]:
    return [e if isinstance(e, bytes) or e is None else encode(e) for e in events]


def pack(events, first_offset=0, topic="in", partition=0, buckets=1, clock=None,
         end_ts=None, behind=False):
    """The packing stage's rows for one input task: [(label, pack, summary)]."""
    values = values_of(events)
    # A file's rows carry their line number as the key.
    keys = [str(first_offset + i + 1).encode() if partition < 0 else None
            for i in range(len(values))]
    if end_ts is not None:
        values.append(END_OF_INPUT)
        keys.append(str(end_ts).encode())
    offsets = list(range(first_offset, first_offset + len(values)))
    packer = Packer(list(range(buckets)), MONITOR.max_future_ms)
    return packer.pack(keys, values, [topic] * len(values), [partition] * len(values),
                       offsets, clock, [behind] * len(values))


def process(p, bucket, tasks, bucket_id=0):
    """What the stateful function does with one batch's rows for one bucket."""
    mine = [row for task in tasks for row in task if row[0] == bucket_id]
    return p.process(bucket_id, bucket, unpack([r[1] for r in mine]),
                     hold_of([r[2] for r in mine]))


def of_kind(out, kind):
    return [json.loads(r.value) for r in out if r.kind == kind]


def test_events_wait_for_the_watermark_then_decide_across_a_state_round_trip():
    p = BucketProcessor(MONITOR)
    bucket = p.restore(None)
    events = [leader(0, replicas=[1, 2], isr=[1, 2]), append(10, 10)]
    assert of_kind(process(p, bucket, [pack(events)]), "isr_change") == []
    bucket = p.restore(p.save(bucket))
    out = process(p, bucket, [pack([append(60000, 10)], first_offset=2)])
    (change,) = of_kind(out, "isr_change")
    assert (change["ts"] - T0, change["action"], change["replicas"]) == (45000, "shrink", [2])
    assert len(of_kind(out, "partition_state")) == 1  # one per changed partition per batch


def test_a_batch_applies_what_lies_below_its_own_watermark_and_keeps_only_the_rest():
    p = BucketProcessor(MONITOR)
    bucket = p.restore(None)
    events = [leader(0, replicas=[1, 2], isr=[1, 2]), append(10, 10), append(50000, 11),
              append(59500, 12), append(60000, 13)]
    (change,) = of_kind(process(p, bucket, [pack(events)]), "isr_change")
    assert (change["ts"] - T0, change["action"]) == (45000, "shrink")
    # Queued: only what is above the watermark 60000 - 1000.
    assert [q[0] - T0 for q in bucket.engine.sequencer.queued] == [59500, 60000]
    out = process(p, bucket, [pack([append(58000, 14)], first_offset=9)])
    assert [d["reason_class"] for d in of_kind(out, "dead_letter")] == ["late"]


def test_rejected_rows_are_dead_letters_and_do_not_move_the_watermark():
    p = BucketProcessor(MONITOR)
    bucket = p.restore(None)
    process(p, bucket, [pack([leader(0), append(20000, 5)])])
    wm = bucket.watermark
    gossip = b'{"v":1,"type":"gossip","ts":%d}' % (T0 + 3_600_000)
    bad = b'{"v":1,"type":"append","ts":1800000000100,"topic":"orders","partition":0}'
    out = process(p, bucket, [pack([append(100, 7), bad, b"nope", None, gossip],
                                   first_offset=10)])
    dead = of_kind(out, "dead_letter")
    assert [(d["reason_class"], d["offset"]) for d in dead] == [
        ("late", 10), ("invalid", 11), ("not_json", 12), ("not_json", 13),
        ("unknown_type", 14)]
    assert dead[0]["reason"] == (f"ts {T0 + 100} is before the watermark {wm} "
                                  "(allowed lateness 1000 ms)")
    assert bucket.watermark == wm  # nothing valid came: the watermark stays


def test_events_beyond_the_batch_clock_are_future_and_move_nothing():
    p = BucketProcessor(MONITOR)
    bucket = p.restore(None)
    clock = T0 + 10_000
    out = process(p, bucket, [pack([leader(0), append(10_000 + 3_600_001, 5), append(5000, 5)],
                                   clock=clock)])
    (dead,) = of_kind(out, "dead_letter")
    assert dead["reason_class"] == "future"
    assert dead["reason"] == (f"ts {T0 + 3_610_001} is 3600001 ms ahead of the batch's clock "
                              f"{clock} (monitor.max_future_ms 3600000)")
    assert bucket.watermark == T0 + 5000 - 1000


def test_a_source_partition_behind_holds_the_watermark_back():
    """A backlog read in slices: source partition 1 reached 20 s, partition 0
    only 5 s and holds more. The watermark stops at 5 s - lateness, so
    partition 0's next events are not late."""
    p = BucketProcessor(MONITOR)
    bucket = p.restore(None)
    tasks = [pack([leader(0), append(5000, 1)], partition=0, behind=True),
             pack([leader(0, partition=1), append(20000, 1, partition=1)], partition=1)]
    process(p, bucket, tasks)
    assert bucket.watermark == T0 + 4000
    out = process(p, bucket, [pack([append(6000, 2)], partition=0, first_offset=2)])
    assert of_kind(out, "dead_letter") == []


def test_a_source_partition_read_to_its_end_holds_nothing_back():
    """Its last event is old, but nothing more is there: the watermark follows
    the others (an idle source never stalls the job)."""
    p = BucketProcessor(MONITOR)
    bucket = p.restore(None)
    tasks = [pack([leader(0), append(5000, 1)], partition=0),
             pack([leader(0, partition=1), append(20000, 1, partition=1)], partition=1)]
    process(p, bucket, tasks)
    assert bucket.watermark == T0 + 19000


def test_the_hold_is_the_largest_time_unless_a_source_behind_is_lower():
    assert hold_of([b'{"in/0": [5, false]}', b'{"in/0": [9, false], "in/1": [7, false]}']) == 9
    assert hold_of([b'{"in/0": [5, true]}', b'{"in/0": [9, false], "in/1": [7, false]}']) == 9
    assert hold_of([b'{"in/0": [5, true]}', b'{"in/1": [7, false]}']) == 5
    assert hold_of([b"{}"]) is None


def test_broadcast_rows_reach_every_bucket_and_rejected_ones_are_reported_once():
    p = BucketProcessor(MONITOR)
    bad_broker = b'{"v":1,"type":"broker","ts":1800000000100,"broker":3,"state":"gone"}'
    task = pack([leader(0), leader(0, partition=1), leader(0, partition=2), bad_broker,
                 broker(500, 3, "fenced")], buckets=3)
    reports, removals = [], []
    for bucket_id in range(3):
        bucket = p.restore(None)
        out = process(p, bucket, [task], bucket_id)
        out += process(p, bucket, [pack([append(5000, 1), append(5000, 1, partition=1),
                                          append(5000, 1, partition=2)], buckets=3,
                                         first_offset=5)], bucket_id)
        reports += of_kind(out, "dead_letter")
        removals += [c["partition"] for c in of_kind(out, "isr_change")
                     if c["cause"] == "controller"]
    assert len(reports) == 1 and reports[0]["reason_class"] == "invalid"
    assert sorted(removals) == [0, 1, 2]  # each bucket fenced broker 3 in its partitions


def test_end_of_input_flushes_and_reports_every_partition_and_a_summary():
    p = BucketProcessor(MONITOR)
    bucket = p.restore(None)
    events = [leader(0, replicas=[1, 2], isr=[1, 2]), append(10, 10), fetch(20, 2, 10, 10)]
    out = process(p, bucket, [pack(events, topic="e.jsonl", partition=-1, end_ts=T0 + 100_000)])
    (state,) = of_kind(out, "partition_state")
    assert state["hw"] == 10 and state["isr"] == [1, 2]
    (summary,) = [json.loads(r.value) for r in out if r.kind == "summary"]
    assert summary == {"models": {"kafka": [1, 0, 0]}, "session_anomalies": {}}


def test_a_checkpoint_of_another_bucket_layout_stops_with_a_clear_error():
    """State keys are bucket labels (partitioning.py); a checkpoint written with
    other keys (another state_buckets, or keys 0..n-1 of earlier versions)
    must not be mixed into the new layout silently."""
    from isr.stream.operator import make_state_function, processor_config
    from isr.stream.partitioning import bucket_labels

    labels = bucket_labels(4)
    assert sorted(labels) == [0, 2, 6, 12]
    clear = "another bucket layout.*new stream.checkpoint_location"
    with pytest.raises(ValueError, match=clear):  # a key that is no label
        next(make_state_function(processor_config(MONITOR), labels)((1,), iter([]), None))
    p = BucketProcessor(MONITOR)
    bucket = p.restore(None, (1, 4))
    process(p, bucket, [pack([leader(0), append(60000, 1)], buckets=1)], 0)
    saved = p.save(bucket)
    assert snapshot.snapshot(p.restore(saved, (1, 4)).engine) == snapshot.snapshot(bucket.engine)
    assert bucket.engine.partitions["kafka"]  # the leader event was applied and saved
    with pytest.raises(ValueError, match=clear):  # a label that is a bucket of another layout
        p.restore(saved, (1, 8))
    before_labels = compress_state(pickle.dumps(pickle.loads(decompress_state(saved))[1:]))
    with pytest.raises(ValueError, match=clear):  # state of a version before labels
        p.restore(before_labels, (1, 4))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.none(), st.binary(max_size=300),
                          st.just(END_OF_INPUT),
                          st.builds(lambda ts: b'{"v":1,"type":"append","ts":%d,"topic":"t",'
                                               b'"partition":0,"leader":1,"leader_epoch":0,'
                                               b'"leader_leo":5}' % ts,
                                    st.integers(-2**70, 2**70))), max_size=20),
       st.one_of(st.none(), st.integers(0, 2**50)))
def test_packing_and_a_bucket_take_any_bytes_without_raising(values, clock):
    """Every Kafka record comes out: as an event, a rejection or a dead letter
    (even one that carries a file source's end-of-input marker)."""
    p = BucketProcessor(MONITOR)
    bucket = p.restore(None)
    tasks = [Packer([0, 1], MONITOR.max_future_ms).pack(
        [None] * len(values), values, ["t"] * len(values), [0] * len(values),
        list(range(len(values))), clock, [False] * len(values))]
    seen = 0
    for bucket_id in (0, 1):
        out = process(p, p.restore(None), tasks, bucket_id)
        seen += len(of_kind(out, "dead_letter"))
        table = unpack([r[1] for r in tasks[0] if r[0] == bucket_id])
        seen += sum(1 for ts in table.column("ts").to_pylist() if ts is not None)
    assert seen == len(values)
    assert bucket.watermark == -1


def test_a_state_saved_with_its_queue_inside_the_snapshot_still_restores():
    """States saved before the queue was kept apart (layout, snapshot) hold
    their queued events as JSON in the snapshot, and were compressed with
    zlib: they restore to the same decisions as the new layout (layout,
    snapshot, raw queue), compressed with zstd."""
    p = BucketProcessor(MONITOR)
    bucket = p.restore(None)
    process(p, bucket, [pack([leader(0, replicas=[1, 2], isr=[1, 2]), append(10, 10)])])
    assert bucket.engine.sequencer.queued  # both events wait for the watermark
    old = zlib.compress(pickle.dumps((None, snapshot.snapshot(bucket.engine))))
    outs = []
    new = p.save(bucket)
    assert new[:2] != old[:2]  # zstd and zlib: both readers are exercised
    for blob in (old, new):
        out = process(p, p.restore(blob), [pack([append(60000, 10)], first_offset=2)])
        outs.append([(r.kind, r.value) for r in out])
    (change,) = [json.loads(v) for k, v in outs[0] if k == "isr_change"]
    assert change["action"] == "shrink"
    assert outs[0] == outs[1]


def end_of_run():
    """The Python Kafka source's record for the last batch of --available-now."""
    return Packer([0], MONITOR.max_future_ms).pack(
        [None], [END_OF_RUN], ["isr:end-of-run"], [-1], [0], None, [False])


def test_partition_state_is_throttled_but_membership_changes_and_the_end_of_run_go_out():
    """output.state_interval_ms = 10 s: a partition's state goes out when first
    seen, then at most once per 10 s of watermark, at its own instant of the
    interval (14.409 s: phase_of), at once on an ISR change, and every
    pending one on the run's last batch. The metrics' record has every
    touched partition of every batch."""
    p = BucketProcessor(MONITOR, state_interval_ms=10_000, partition_metrics=True)
    bucket = p.restore(None)
    batches = [
        [leader(0, replicas=[1, 2], isr=[1, 2]), append(1000, 10), fetch(1500, 2, 10, 10),
         append(3000, 20)],                                   # wm 2 s: first seen
        [fetch(3500, 2, 20, 20), append(6000, 30)],          # wm 5 s: pending
        [fetch(6500, 2, 30, 30), append(13000, 40)],         # wm 12 s: 10 s since 2 s
        [append(15000, 45)],                                 # wm 14 s: its instant not yet
        [append(16000, 47)],                                 # wm 15 s: past 14.409 s
        [append(50000, 50)],                                 # wm 49 s: shrink at 45 s
        [append(52000, 60)],                                 # wm 51 s: pending
    ]
    sent, metrics, offset = [], [], 0
    for events in batches:
        out = process(p, bucket, [pack(events, first_offset=offset)])
        offset += len(events)
        bucket = p.restore(p.save(bucket))  # the throttle's state survives a restart
        sent.append([(s["ts"] - T0, s["isr"]) for s in of_kind(out, "partition_state")])
        metrics.append([(s["ts"] - T0, s["isr"]) for s in metrics_states(out)])
    assert sent == [[(1500, [1, 2])], [], [], [], [(13000, [1, 2])], [(45000, [1])], []]
    assert metrics == [[(1500, [1, 2])], [(3500, [1, 2])], [(6500, [1, 2])], [(13000, [1, 2])],
                       [], [(45000, [1])], [(50000, [1])]]
    out = process(p, bucket, [end_of_run()])
    assert [(s["ts"] - T0, s["isr"]) for s in of_kind(out, "partition_state")] == [(50000, [1])]
    assert of_kind(process(p, bucket, [end_of_run()]), "partition_state") == []  # nothing pending


def test_a_partition_in_both_outputs_of_a_batch_shows_the_same_state_and_every_change():
    """With every touched partition sent to both (no throttle, metrics
    refresh 0), a batch's partition_state records and its partition_metrics
    show each partition once, the same fields (made once for both), and
    each batch's own: the leader's LEO, the HW and the follower's offset
    the batch's events moved, the shrink and the expand."""
    p = BucketProcessor(MONITOR, partition_metrics=True)
    bucket = p.restore(None)
    batches = [
        [leader(0, replicas=[1, 2], isr=[1, 2]), leader(0, partition=1, replicas=[1, 2]),
         append(1000, 10), fetch(1500, 2, 10, 10), append(3000, 20)],
        [fetch(3500, 2, 20, 20), append(6000, 30), append(6000, 5, partition=1)],
        [append(50000, 50)],                       # 0 shrinks at 45 s
        [fetch(52000, 2, 50, 50), append(54000, 60), fetch(54500, 2, 5, 5, partition=1)],
    ]
    shown, offset = [], 0
    for events in batches:
        out = process(p, bucket, [pack(events, first_offset=offset)])
        offset += len(events)
        states = of_kind(out, "partition_state")
        assert list(metrics_states(out)) == states
        # each state's JSON once in the bucket's result: the metrics list
        # the partition_state records' ids
        assert [json.loads(r.value) for r in out if r.kind == "partition_metrics"] == [
            [r.id for r in out if r.kind == "partition_state"]]
        shown.append([(s["partition"], s["leader_leo"], s["hw"], s["isr"],
                       [f["leo"] for f in s["followers"]]) for s in states])
    assert shown == [[(0, 10, 10, [1, 2], [10]), (1, 0, 0, [1, 2], [-1])],
                     [(0, 20, 20, [1, 2], [20])],                   # (wm 5 s)
                     [(0, 30, 30, [1], [20]), (1, 5, 5, [1], [-1])],  # both shrink
                     [(0, 50, 50, [1, 2], [50])]]                  # 0 expands


def test_the_state_throttle_looks_only_at_the_partitions_whose_membership_moved_or_due():
    """output.state_interval_ms = 10 s, 200 partitions pending: a batch
    that appends to 2 of them looks at none (not every pending one, as it
    did every batch, nor the 2 appended to: an append moves no membership),
    a leader change is looked at and goes out at once, and the pending
    ones go out when their interval ends, with no change."""
    throttle = StateThrottle(10_000)
    engine = LocalEngine(MonitorSettings(), listeners=[throttle])
    looked = []

    def models_of(key):  # (a partition pending anew, never sent, is also looked at to index it)
        looked.append(key[2])
        return [parts[key] for parts in engine.partitions.values() if key in parts]

    def batch(events, watermark):
        engine.apply_in_order(events)
        throttle.take_touched()
        looked.clear()
        return sorted({m.partition for m in throttle.due(models_of, T0 + watermark)})

    assert batch([leader(0, partition=q) for q in range(200)], 1000) == list(range(200))
    assert batch([append(2000, 5, partition=q) for q in range(200)], 2000) == []
    assert looked == []  # sent, hence indexed at their next instants already
    assert batch([append(3000, 6, partition=0), append(3000, 6, partition=1)], 5000) == []
    assert looked == []
    assert batch([leader(6000, partition=7, leader_epoch=2)], 6000) == [7]  # at once
    assert set(looked) == {7}
    assert batch([append(7000, 7, partition=7, leader_epoch=2)], 10999) == []
    assert looked == []
    # From 11 s (10 s after first seen; 16 s for 7, its leader change) each
    # goes out in the batch that reaches its own instant (phase_of), a batch
    # looking at those only.
    sent: dict = {}
    for watermark in range(11000, 27000, 500):
        out = batch([], watermark)
        assert set(looked) == set(out)
        for q in out:
            sent.setdefault(q, []).append(watermark)
    instant = {q: next_instant(T0 + (6000 if q == 7 else 1000) + 10_000,
                               phase_of(("default", "orders", q), 10_000), 10_000) - T0
               for q in range(200)}
    assert sent == {q: [-(-instant[q] // 500) * 500] for q in range(200)}


def _states_sent(throttle: StateThrottle, events: list, cuts: list, restores: list,
                 every_pending: bool = False) -> list:
    """Per batch (cut at `cuts`, each up to its last event's ts), the
    partition states `throttle` sends (policy, key, the watermark its
    interval counts from), its models caught up as in the operator; its
    state saved and restored after the batches in `restores`.
    `every_pending`: the reference `due`, every pending partition looked at
    in each batch, as after a restore (set on the instance, not by a
    subclass: a compiled StateThrottle has none, scripts/build-native)."""
    engine = LocalEngine(MonitorSettings(policy=POLICIES, replica_lag_time_max_ms=10000),
                         listeners=[throttle])

    def models_of(key):
        return [parts[key] for parts in engine.partitions.values() if key in parts]

    out, start, since = [], 0, T0
    for i, end in enumerate(sorted({*cuts, len(events)})):
        batch = events[start:end]
        start = end
        if not batch:
            continue
        watermark = batch[-1].ts
        throttle.begin(since)
        engine.apply_in_order(batch)
        engine.advance_all(watermark, False)
        throttle.take_touched()
        if every_pending:
            throttle._indexed = False
        sent = throttle.due(models_of, watermark, current=engine.current)
        out.append([(m.rules.policy, m.key, throttle.sent[(m.rules.policy, *m.key)][0])
                    for m in sent])
        if i in restores:
            throttle.from_state(json.loads(json.dumps(throttle.to_state())))
        since = watermark
    return out


@settings(max_examples=int(os.environ.get("ISR_SESSION_EXAMPLES", "60")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(event_streams(), session_streams()), st.sampled_from([500, 7000, 30_000]),
       st.lists(st.integers(0, 60), max_size=12), st.lists(st.integers(0, 12), max_size=2))
def test_the_state_throttle_sends_what_a_walk_of_every_pending_partition_sends(
        events, interval, cuts, restores):
    """`due` looks only at the partitions due and those whose membership may
    have moved (an ISR change, a broker event, an event the model's
    membership_may_move names: a leader event, a bootstrapped model's
    follower events, which add followers to its replicas and ISR), and
    keeps a partition sent indexed: batch by batch it sends what looking at
    every pending partition sends, over streams with leader changes,
    bootstrapped partitions, broker events, shrinks and fetch sessions."""
    expected = _states_sent(StateThrottle(interval), events, cuts, [], every_pending=True)
    assert _states_sent(StateThrottle(interval), events, cuts, restores) == expected


def _throttled(step: int, restore_every: int = 0, parts: int = 60, until: int = 61_000) -> dict:
    """output.state_interval_ms = 10 s over `parts` partitions first seen
    together (at 1 s), each fetched in every batch (pending all the time),
    partition 3's leader changing at 17.5 s; batches `step` ms of watermark
    apart, the throttle saved and restored every `restore_every` batches.
    Per partition, the watermarks of the batches its records went out in."""
    throttle = StateThrottle(10_000)
    engine = LocalEngine(MonitorSettings(), listeners=[throttle])

    def models_of(key):
        return [parts_[key] for parts_ in engine.partitions.values() if key in parts_]

    sent: dict = {}
    events = [leader(0, partition=q) for q in range(parts)]
    watermark, changed, batches = 1000, False, 0
    while watermark <= until:
        throttle.begin(T0 + watermark - step)
        engine.apply_in_order(events)
        throttle.take_touched()
        for m in throttle.due(models_of, T0 + watermark):
            sent.setdefault(m.partition, []).append(watermark)
        batches += 1
        if restore_every and batches % restore_every == 0:
            throttle.from_state(json.loads(json.dumps(throttle.to_state())))
        watermark += step
        events = []
        if watermark >= 17_500 and not changed:
            events, changed = [leader(17_500, partition=3, leader_epoch=2)], True
        events += [fetch(watermark, r, 0, 0, partition=q, leader_epoch=2 if changed and q == 3
                         else 1) for q in range(parts) for r in (2, 3)]
    return sent


def test_partition_states_due_together_are_spread_over_the_interval_one_per_interval_each():
    """Partitions first seen together (a job's start): their later records
    go out spread over the batches of an interval, each partition's in the
    batch that reaches its own instant (phase_of), not all in one batch
    every 10 s (issue 23, branch statespread). A partition that stays
    pending gets one record per interval, never two less than an interval
    apart (the batches 1 s apart: a whole number of them per interval); a
    leader change goes out at once; and the instants are the same whatever
    the batch sizes and across restores."""
    sent = _throttled(1000)
    assert all(sent[q][0] == 1000 for q in range(60))  # first seen
    assert sent[3][1] == 18_000  # the leader change (17.5 s), at once
    # The next records (at the instants from 11 s to 21 s, 10 s after first
    # seen): spread over the batches.
    per_batch = Counter(at for q in range(60) if q != 3 for at in sent[q]
                        if 11_000 <= at <= 21_000)
    assert sum(per_batch.values()) == 59 and len(per_batch) >= 9
    assert max(per_batch.values()) <= 12  # not 59 in one batch
    for q in range(60):
        on_time = sent[q][1:] if q != 3 else sent[q][2:]
        after = 1000 if q != 3 else 18_000
        assert 10_000 <= on_time[0] - after < 21_000  # one to two intervals after
        assert [b - a for a, b in zip(on_time, on_time[1:])] == [10_000] * (len(on_time) - 1)
    # Whatever the batch sizes (and across restores) a partition's records go
    # out at the same instants: each in the first batch that reaches it.
    def instants(sent):  # (those every run's last batch reached)
        return {q: [instant for at in ats[1:] if (instant := at - (
            T0 + at + phase_of(("default", "orders", q), 10_000)) % 10_000) < 57_000]
            for q, ats in sent.items() if q != 3}
    expected = instants(sent)
    for step in (700, 2500, 4000):
        assert instants(_throttled(step)) == expected, step
    assert _throttled(2500, restore_every=1) == _throttled(2500)
    assert _throttled(1000, restore_every=3) == sent


def test_touched_partitions_are_those_with_an_event_or_a_change():
    touched = StateThrottle()
    engine = LocalEngine(MonitorSettings(), listeners=[touched])
    engine.apply_in_order([leader(0), leader(0, partition=1), append(10, 5)])
    assert sorted(touched.take_touched()) == [("default", "orders", 0), ("default", "orders", 1)]
    engine.advance_all(T0 + 60000, inclusive=False)  # partition 0's followers never fetched
    assert sorted(touched.take_touched()) == [("default", "orders", 0), ("default", "orders", 1)]
    assert touched.take_touched() == set()


# ---------------------------------------------------------------- fetch sessions
def session_event(t, session_id, epoch, listed, forgotten=(), leader_id=1, replica=2):
    """A fetch_session at T0 + t; listed: {partition: fetch_offset} of topic orders."""
    return validate({"v": 1, "type": "fetch_session", "ts": T0 + t, "received_ts": T0 + t - 3,
                     "leader": leader_id, "replica": replica, "broker_epoch": 5,
                     "session_id": session_id, "session_epoch": epoch, "full": epoch in (0, -1),
                     "partitions": [{"topic": "orders", "partition": p, "leader_epoch": 1,
                                     "fetch_offset": o} for p, o in listed.items()],
                     "forgotten": [{"topic": "orders", "partition": p} for p in forgotten]})


def test_a_session_fetch_touches_every_partition_it_caches_and_a_late_catch_up_touches_none():
    """The throttle lets the engine catch a session's quiet partitions up
    lazily: a session's fetch touches every partition the session caches,
    listed or not, in the batch that applies it, and catching a partition up
    in a later batch (a view of it) touches nothing."""
    touched = StateThrottle()
    engine = LocalEngine(MonitorSettings(), listeners=[touched], external_watermark=True)
    seq = iter(range(100))

    def batch(events, watermark):
        touched.begin(engine.sequencer.watermark)
        for ev in events:
            engine.submit(ev, next(seq))
        engine.advance_watermark(T0 + watermark)
        return [key[2] for key in sorted(touched.take_touched())]

    parts = [leader(0, replicas=[1, 2], isr=[1, 2], partition=q) for q in range(3)]
    assert batch(parts + [session_event(100, 7, 0, {q: 0 for q in range(3)}),
                          session_event(600, 7, 1, {})], 1000) == [0, 1, 2]
    assert batch([session_event(1100, 7, 2, {0: 0})], 2000) == [0, 1, 2]  # 1, 2 not listed
    m = engine.partitions["kafka"][("default", "orders", 1)]
    ((sid, link),) = m.sessions.items()
    assert link[1] < engine.session_driver.sessions.by_sid[sid].end  # not caught up by the check
    assert m.followers[2].last_fetch_ts == T0 + 97  # its listed fetch only (received_ts)
    touched.begin(engine.sequencer.watermark)
    engine.advance_watermark(T0 + 3000)
    engine.current(m)  # catches it up: fetches of the batch before
    assert m.followers[2].last_fetch_ts == T0 + 1097
    assert touched.take_touched() == set()


def test_the_metrics_get_changed_and_at_risk_partitions_not_quiet_session_fetches():
    """metrics.refresh_interval_ms > 0: a batch whose only news for a
    partition is that its session fetched it (every follower at the leader's
    LEO, in the ISR, fetching) sends it no state; a partition whose follower
    fell behind is sent every batch, its time since caught up growing; and
    the sink's cluster counts and membership, offset and lag series are, after
    every batch, those of the job that sends every touched partition."""
    from isr.config import MetricsSettings
    from isr.sinks.prometheus import Metrics

    quiet = BucketProcessor(MONITOR, partition_metrics=True, metrics_refresh_ms=10**9)
    every = BucketProcessor(MONITOR, partition_metrics=True)  # refresh 0: as before
    runs = [(p, p.restore(None), Metrics(MetricsSettings())) for p in (quiet, every)]

    def fetches(start, epoch, listed=None):
        return [session_event(start + 500 * i, 7, epoch + i, listed if i == 0 and listed else {})
                for i in range(4)]

    batches = [
        [leader(0, replicas=[1, 2], isr=[1, 2], partition=q) for q in range(3)]
        + fetches(100, 0, {q: 0 for q in range(3)}),         # new partitions
        fetches(2000, 4),                                     # only fetched
        [append(4100, 10, partition=1)] + fetches(4000, 8),  # 1: its follower stays at 0
        fetches(6000, 12),                                    # 1 behind, 0 and 2 quiet
        fetches(8000, 16),
        # 1 shrinks (30 s behind); the session's fetch after a 32 s gap is
        # applied at once to each of its partitions (sessions.py), which
        # moves nothing the metrics show of 0 and 2
        fetches(40000, 20),
    ]
    sent, since, offset = [], [], 0
    for events in batches:
        exact = []
        for p, bucket, sink in runs:
            out = process(p, bucket, [pack(events, first_offset=offset)])
            sink.observe_records(out, now=1e9)
            states = list(metrics_states(out))
            if p is quiet:
                sent.append([s["partition"] for s in states])
                since.append([max(0, s["ts"] - f["last_caught_up_ts"]) for s in states
                              if s["partition"] == 1 for f in s["followers"]])
            exact.append(sorted(
                (smp.name, tuple(sorted(smp.labels.items())), smp.value)
                for fam in sink.registry.collect() for smp in fam.samples
                if smp.name.startswith(("isr_partition", "isr_follower", "isr_under",
                                        "isr_at_min", "isr_leader_only", "isr_offline"))
                and fam.name not in ("isr_partition_state_timestamp_seconds",
                                     "isr_follower_time_since_caught_up_seconds")))
        assert exact[0] == exact[1]
        offset += len(events)
    assert sent == [[0, 1, 2], [], [1], [1], [1], [1]]
    assert since[2] < since[3] < since[4] < since[5]
    counts = {smp.name: smp.value for fam in runs[0][2].registry.collect()
              for smp in fam.samples if smp.name == "isr_under_replicated_partitions"}
    assert counts == {"isr_under_replicated_partitions": 1}


def test_a_busy_partition_goes_to_the_metrics_once_per_busy_interval_its_health_at_once():
    """metrics.busy_refresh_interval_ms 10 s, batches of 2 s: partition 1,
    produced to while its follower stays at offset 0 (its lag and time since
    caught up grow every batch), is sent once per 10 s of watermark (every
    batch before) until its follower leaves the ISR, which goes at once;
    after every batch the sink's cluster counts and membership series are
    those of the job that sends every touched partition, and its offsets
    and lags trail them only between two of its sends."""
    from isr.config import MetricsSettings
    from isr.sinks.prometheus import Metrics

    busy = BucketProcessor(MONITOR, partition_metrics=True, metrics_refresh_ms=10**9,
                           metrics_busy_refresh_ms=10_000)
    every = BucketProcessor(MONITOR, partition_metrics=True)  # refresh 0: every batch
    runs = [(p, p.restore(None), Metrics(MetricsSettings())) for p in (busy, every)]

    def fetches(start, epoch, listed=None):
        return [session_event(start + 500 * i, 7, epoch + i, listed if i == 0 and listed else {})
                for i in range(4)]

    batches = [[leader(0, replicas=[1, 2], isr=[1, 2], partition=q) for q in range(3)]
               + fetches(100, 0, {q: 0 for q in range(3)})]
    batches += [[append(2000 * k + 100, 10 * k, partition=1)] + fetches(2000 * k, 4 * k)
                for k in range(1, 25)]  # (the shrink: at the check of 45 s)
    trailing = ("isr_partition_high_watermark", "isr_partition_leader_log_end_offset",
                "isr_follower_lag_seconds", "isr_follower_time_since_caught_up_seconds",
                "isr_partition_state_timestamp_seconds")
    sent_at, shrunk_at, offset = [], None, 0
    for k, events in enumerate(batches):
        series = []
        for p, bucket, sink in runs:
            out = process(p, bucket, [pack(events, first_offset=offset)])
            sink.observe_records(out, now=1e9)
            series.append({(smp.name, tuple(sorted(smp.labels.items()))): smp.value
                           for fam in sink.registry.collect() for smp in fam.samples
                           if smp.name.startswith(("isr_partition", "isr_follower", "isr_under",
                                                   "isr_at_min", "isr_leader_only",
                                                   "isr_offline"))})
            if p is busy:
                wm = bucket.watermark
                states = [s for s in metrics_states(out) if s["partition"] == 1]
                isr_changes = [c for c in of_kind(out, "isr_change") if c["partition"] == 1]
        offset += len(events)
        exact = [{key: v for key, v in run.items() if key[0] not in trailing} for run in series]
        assert exact[0] == exact[1], k  # counts and membership: exact every batch
        if isr_changes:
            assert shrunk_at is None and states  # the shrink goes at once
            shrunk_at = wm
        elif states and k > 0:
            sent_at.append(wm)
        if states or k == 0:
            one = [key for key in series[1] if ("partition", "1") in key[1]
                   and key[0] != "isr_follower_time_since_caught_up_seconds"]
            assert {key: series[0][key] for key in one} == {key: series[1][key] for key in one}
    assert shrunk_at is not None
    # every 10 s of watermark between the first append and the shrink, not every batch
    assert len(sent_at) >= 2 and all(b - a == 10_000 for a, b in zip(sent_at, sent_at[1:]))
    assert sent_at[0] < T0 + 2600 + 10_000


def test_the_metrics_look_only_at_partitions_changed_or_whose_session_lapsed_or_forgot(
        monkeypatch):
    """refresh 10⁹ ms, RF 3, one session per follower: a batch of session
    fetches only looks at no partition's state (it looked at every one
    fetched); a partition one follower's session forgets, and the
    partitions of a session that stops fetching, are sent (that follower no
    longer fetches them), as the job that looks at every one sends them."""
    from isr.stream import throttle

    looked = []

    def counted(m, sessions):
        looked.append(m.partition)
        return throttle_shown(m, sessions)

    throttle_shown = throttle.shown
    monkeypatch.setattr(throttle, "shown", counted)
    p = BucketProcessor(MONITOR, partition_metrics=True, metrics_refresh_ms=10**9)
    bucket = p.restore(None)

    def fetches(start, epoch, replicas=(2, 3), listed=None, forgotten=()):
        return [session_event(start + 500 * i, 5 + r, epoch + i,
                              listed if i == 0 and listed else {},
                              forgotten if i == 0 else (), replica=r)
                for i in range(4) for r in replicas]

    batches = [
        [leader(0, replicas=[1, 2, 3], isr=[1, 2, 3], partition=q) for q in range(3)]
        + fetches(100, 0, listed={q: 0 for q in range(3)}),
        fetches(2000, 4),                    # only fetched
        fetches(4000, 8, forgotten=[0]),     # 2's session forgets 0 (3's still fetches it)
        fetches(6000, 12, replicas=(2,)),    # 3's session lapses: 1 and 2
        fetches(8000, 16, replicas=(2,)),
    ]
    sent, looked_at, offset = [], [], 0
    for events in batches:
        looked.clear()
        out = process(p, bucket, [pack(events, first_offset=offset)])
        offset += len(events)
        sent.append(sorted({s["partition"] for s in metrics_states(out)}))
        looked_at.append(sorted(set(looked)))
    # (a batch's fetches reach the watermark, hence the metrics, a batch later)
    assert sent == [[0, 1, 2], [], [0], [], [1, 2]]
    assert looked_at[1] == []


def metrics_batches(touched: StateThrottle):
    """A function that runs one batch of events through an engine with
    `touched` as its listener, moves the watermark to T0 + its second
    argument and returns the partitions the metrics are sent this batch."""
    engine = LocalEngine(MonitorSettings(), listeners=[touched], external_watermark=True)
    seq = count()

    def models_of(key):
        return [parts[key] for parts in engine.partitions.values() if key in parts]

    def batch(events, watermark):
        touched.begin(engine.sequencer.watermark)
        for ev in events:
            engine.submit(ev, next(seq))
        engine.advance_watermark(T0 + watermark)
        keys = touched.take_touched()
        return [key[2] for key in touched.metrics_keys(
            keys, models_of, T0 + watermark, engine.session_driver.sessions.by_sid)]

    return batch


def test_a_partition_a_session_forgets_goes_to_the_metrics_though_not_changed():
    """RF 3, one session per follower, refresh 10⁹ ms: when follower 2's
    session forgets partition 0 in its first fetch of a batch (its earlier
    fetch of 0, caught up then, is one of the batch before: nothing changed
    in this one), partition 0, still fetched by 3's session, is sent: its
    follower 2 no longer fetches it (on_unlink)."""
    touched = StateThrottle(0, 10**9)
    batch = metrics_batches(touched)

    def fetched(t, epoch, forgotten=(), listed=None):
        return [session_event(t, 5 + r, epoch, listed or {}, forgotten if r == 2 else (),
                              replica=r) for r in (2, 3)]

    parts = [leader(0, replicas=[1, 2, 3], isr=[1, 2, 3], partition=q) for q in range(3)]
    assert batch(parts + fetched(100, 0, listed={q: 0 for q in range(3)})
                 + fetched(600, 1), 1000) == [0, 1, 2]
    assert batch(fetched(1100, 2), 2000) == []
    assert batch(fetched(2100, 3, forgotten=[0]), 3000) == [0]
    assert batch(fetched(3100, 4), 4000) == [0]  # (sent while 2 does not fetch it)


def test_a_busy_partition_left_out_goes_at_its_instant_though_nothing_touches_it_again():
    """busy interval 10 s: partition 1 (follower 3, its own session) is
    produced to in a batch, whose metrics leave it out (its health stands);
    its session then stops fetching and nothing reaches it again, and it
    still goes, once, in the batch whose watermark reaches its instant."""
    touched = StateThrottle(0, 10**9, 10_000)
    batch = metrics_batches(touched)

    def fetched(t, epoch, replicas=(2, 3), listed=False):
        return [session_event(t, 5 + r, epoch, {r - 2: 0} if listed else {}, replica=r)
                for r in replicas]

    parts = [leader(0, replicas=[1, 2], isr=[1, 2], partition=0),
             leader(0, replicas=[1, 3], isr=[1, 3], partition=1)]
    assert batch(parts + fetched(100, 0, listed=True) + fetched(600, 1), 1000) == [0, 1]
    assert batch(fetched(1100, 2), 2000) == []
    assert batch([append(2050, 5, partition=1)] + fetched(2100, 3), 3000) == []  # left out
    sent = [w for w in range(4000, 15000, 1000) if 1 in batch(fetched(w - 900, w // 1000,
                                                                    replicas=(2,)), w)]
    instant = next_instant(T0 + 3001, phase_of(("default", "orders", 1), 10_000), 10_000)
    assert sent == [w for w in range(4000, 15000, 1000) if w - 1000 < instant - T0 <= w]


def test_the_throttles_state_delta_lists_what_became_pending_or_not_not_every_pending_one():
    """A state delta (one per batch in the row's log) lists the partitions
    that became pending and those that stopped being pending since the last
    delta or snapshot, not all 1,000 pending ones; applied in order after
    the snapshot (through JSON, as the row holds them) they give the
    pending set as it stands; a delta of the list form (engine state 4) is
    still read."""
    import orjson

    keys = [("c", "t", q) for q in range(1000)]
    live = StateThrottle(10_000)
    live.pending = set(keys)
    saved = orjson.loads(orjson.dumps(live.to_state()))  # the snapshot
    live.pending.discard(keys[3])
    live.pending.add(("c", "t", 1000))
    first = orjson.loads(orjson.dumps(live.state_delta()))
    assert first["pending_added"] == [["c", "t", 1000]]
    assert first["pending_removed"] == [["c", "t", 3]]
    live.pending -= set(keys[10:20])
    second = orjson.loads(orjson.dumps(live.state_delta()))
    assert second["pending_added"] == [] and len(second["pending_removed"]) == 10
    restored = StateThrottle(10_000)
    restored.from_state(saved)
    restored.apply_state_delta(first)
    restored.apply_state_delta(second)
    assert restored.pending == live.pending
    restored.apply_state_delta([[list(k) for k in keys[:5]], []])  # engine state 4's form
    assert restored.pending == set(keys[:5])


def test_a_quiet_partition_is_refreshed_once_per_interval_spread_over_the_batches():
    throttle = StateThrottle(0, 10_000)
    keys = [("c", "t", q) for q in range(1000)]
    due = [[k for k in keys if throttle.refresh_due(k, w, w + 1000)]
           for w in range(0, 10_000, 1000)]
    assert sorted(k for d in due for k in d) == keys  # each once in 10 s
    assert all(50 < len(d) < 150 for d in due)  # ~a tenth in each second
    assert not throttle.refresh_due(keys[0], 5000, 5000)  # the watermark stood still
    # The phase index finds the same ones, without a look at the others.
    throttle._phased_new = list(keys)
    for began, now in [(0, 1000), (9500, 10400), (12345, 19999), (3, 10003), (7, 900007),
                       (42, 42), (9999, 10000)]:
        throttle.began = began
        assert sorted(throttle._refreshes_due(now)) == [
            k for k in keys if throttle.refresh_due(k, began, now)], (began, now)


def test_a_fetch_session_is_split_into_one_share_per_bucket_each_with_the_whole_header():
    ev = session_event(100, 7, 3, {p: 10 * p for p in range(12)}, forgotten=[12, 13, 14])
    raw = encode(ev)
    buckets = 3
    rows = pack([leader(0), ev], first_offset=40, buckets=buckets)
    home = session_home("default", 1, buckets)
    homes = []
    for b in range(buckets):
        table = unpack([r[1] for r in rows if r[0] == b]).to_pylist()
        (share,) = [r for r in table if r["shared"]]  # one share per bucket, none skipped
        assert (share["ts"], share["source"], share["offset"]) == (T0 + 100, "in/0", 41)
        assert share["seq"] == unpack([rows[0][1]]).to_pylist()[-1]["seq"]  # the arrival order
        got = decode(share["value"])
        # The whole request's header ...
        header = {k: v for k, v in msgspec.structs.asdict(got).items()
                  if k not in ("partitions", "forgotten")}
        assert header == {k: v for k, v in msgspec.structs.asdict(ev).items()
                          if k not in ("partitions", "forgotten")}
        # ... with the partitions this bucket holds, listed or forgotten.
        assert [p.partition for p in got.partitions] == [
            p for p in range(12) if bucket_of("default", "orders", p, buckets) == b]
        assert [p.partition for p in got.forgotten] == [
            p for p in range(12, 15) if bucket_of("default", "orders", p, buckets) == b]
        if share["whole"] is not None:  # the record as it came, in one share only
            assert share["whole"] == raw
            homes.append(b)
    assert homes == [home]
    assert len({bucket_of("default", "orders", p, buckets) for p in range(12)}) == buckets


# Names that look like the spliced keys, with quotes and backslashes.
_NAMES = st.sampled_from(["default", "orders", '"partitions":[]', 'x"forgotten":[]\\',
                          "\\\"", "é ü"]) | st.text(min_size=1, max_size=8)


@st.composite
def session_requests(draw):
    """A valid fetch_session: any names, listed and forgotten partitions apart."""
    cluster, topic = draw(_NAMES), draw(_NAMES)
    parts = draw(st.lists(st.integers(0, 40), unique=True, max_size=12))
    gone = draw(st.integers(0, len(parts)))
    epoch = draw(st.integers(-1, 3))
    full = epoch in (0, -1)
    return validate({
        "v": 1, "type": "fetch_session", "ts": T0, "cluster": cluster, "leader": 1,
        "replica": 2, "received_ts": draw(st.none() | st.just(T0 - 3)),
        "broker_epoch": draw(st.none() | st.just(5)), "session_id": 7,
        "session_epoch": epoch, "full": full,
        "partitions": [{"topic": topic, "partition": p, "leader_epoch": 1, "fetch_offset": 10 * p,
                        "leader_leo": draw(st.none() | st.just(10 * p + 1))}
                       for p in parts[gone:]],
        "forgotten": [] if full else [{"topic": topic, "partition": p} for p in parts[:gone]]})


@settings(max_examples=300, deadline=None)
@given(session_requests(), st.integers(1, 4))
def test_a_sessions_shares_are_the_encoded_requests_with_each_buckets_partitions(ev, buckets):
    """session_shares builds each share's bytes without a struct per share:
    they must be the encoding of the request listing and forgetting that
    bucket's partitions, whatever the names hold."""
    shares = session_shares(ev, buckets)
    for b, share in enumerate(shares):
        mine = [p for p in ev.partitions if bucket_of(ev.cluster, p.topic, p.partition,
                                                      buckets) == b]
        gone = [p for p in ev.forgotten if bucket_of(ev.cluster, p.topic, p.partition,
                                                     buckets) == b]
        assert share == encode(msgspec.structs.replace(ev, partitions=mine, forgotten=gone))
        assert decode(share) == msgspec.structs.replace(ev, partitions=mine, forgotten=gone)


def test_a_session_anomaly_and_a_late_session_record_are_reported_once_by_the_buckets():
    """Every bucket applies its share of a request of an unknown session (a
    new session starts in each), but only the session's home bucket counts
    the anomaly; a late session record is one dead letter naming the record."""
    p = BucketProcessor(MONITOR)
    buckets = 3
    parts = [leader(0, replicas=[1, 2], isr=[1, 2], partition=q) for q in range(6)]
    first = pack(parts + [session_event(100, 9, 4, {q: 0 for q in range(6)}),
                          append(5000, 0)], buckets=buckets, end_ts=None)
    late = session_event(200, 9, 5, {0: 0})
    second = pack([late], first_offset=20, buckets=buckets)
    dead, anomalies = [], Counter()
    for b in range(buckets):
        bucket = p.restore(None, (b, buckets))
        process(p, bucket, [first], b)
        bucket = p.restore(p.save(bucket), (b, buckets))
        dead += of_kind(process(p, bucket, [second], b), "dead_letter")
        anomalies.update(bucket.engine.session_driver.sessions.anomalies)
        assert [s.session_id for s in bucket.engine.session_driver.sessions.by_id.values()] == [9]
    assert anomalies == {"unknown_session": 1}
    (d,) = dead
    assert (d["reason_class"], d["offset"], json.loads(d["raw"])) == (
        "late", 20, json.loads(encode(late)))


def _replay(monitor, events) -> tuple:
    """One engine over all partitions (isr replay) and its decisions, sorted,
    without the final states."""
    ref = local_engine(monitor)
    for seq, ev in enumerate(events):
        ref.submit(ev, seq)
    ref.finish()
    return ref, [json.loads(v) for v in sorted(d.model_dump_json() for d in ref.take_decisions())]


def _bucket_decisions(out) -> list:
    """The decisions among `_bucket_outputs`' records, sorted as above."""
    return [json.loads(v) for v in sorted(r.value for r in out if r.kind in DECISION_TYPES
                                          and r.kind not in ("partition_state", "dead_letter"))]


def _bucket_outputs(monitor, events, buckets, cuts, batches=None):
    """The Spark job's stages without Spark: each batch packed as one file
    task, every bucket processed and its state saved and restored
    (`batches`: a list that gets each batch's records of all buckets)."""
    p = BucketProcessor(monitor)
    states = [None] * buckets
    out = []
    bounds = sorted({min(c, len(events)) for c in cuts} | {len(events)})
    start = 0
    for end in bounds:
        last = end == len(events)
        task = pack(events[start:end], first_offset=start, topic="e.jsonl", partition=-1,
                    buckets=buckets, end_ts=max(e.ts for e in events) if last else None)
        batch = []
        for b in range(buckets):
            bucket = p.restore(states[b], (b, buckets))
            batch += process(p, bucket, [task], b)
            states[b] = p.save(bucket)
        out += batch
        if batches is not None:
            batches.append(batch)
        start = end
    return out


@settings(max_examples=int(os.environ.get("ISR_SESSION_EXAMPLES", "60")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(session_streams(), st.integers(2, 4), st.lists(st.integers(0, 50), max_size=3))
def test_buckets_applying_session_shares_decide_as_one_engine(events, buckets, cuts):
    """Each bucket holds some partitions and every session's header: together
    they decide, end in the states and count the anomalies and model
    statistics that one engine over all partitions does (isr replay)."""
    # (Not propagation "zk": its model is per leader broker across partitions,
    # which buckets split whatever the input; see docs/streaming.md.)
    monitor = MonitorSettings(policy=POLICIES, replica_lag_time_max_ms=10000,
                              allowed_lateness_ms=1000)
    ref, expected = _replay(monitor, events)
    out = _bucket_outputs(monitor, events, buckets, cuts)
    assert _bucket_decisions(out) == expected
    assert not of_kind(out, "dead_letter")
    summaries = [json.loads(r.value) for r in out if r.kind == "summary"]
    assert len(summaries) == buckets
    anomalies = sum((Counter(s["session_anomalies"]) for s in summaries), Counter())
    assert anomalies == ref.session_driver.sessions.anomalies
    totals = {policy: [sum(s["models"][policy][i] for s in summaries) for i in range(3)]
              for policy in monitor.policy}
    assert totals == model_stats(ref)
    final = {}
    for r in out:
        if r.kind == "partition_state":
            st_ = json.loads(r.value)
            final[(st_.get("policy"), st_["topic"], st_["partition"])] = st_
    assert sorted(final.values(), key=lambda s: (POLICIES.index(s["policy"]), s["topic"],
                                                 s["partition"])) == [
        json.loads(s.model_dump_json()) for s in ref.states()]


@settings(max_examples=int(os.environ.get("ISR_SESSION_EXAMPLES", "60")) // 2, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(session_streams(), st.integers(1, 3), st.lists(st.integers(0, 50), max_size=3))
def test_partition_state_records_are_those_the_pydantic_state_gives(events, buckets, cuts):
    """The buckets write their partition_state records from the models'
    fields (records.state_record): each batch's and the end's are the
    records `to_record` gives for the PartitionState they hold, under one
    policy (keys without it) and several."""
    for policies in (["kafka"], POLICIES):
        monitor = MonitorSettings(policy=policies, replica_lag_time_max_ms=10000,
                                  allowed_lateness_ms=1000)
        ref = local_engine(monitor)
        ref.apply_in_order(events)  # in time order
        ref.finish()
        states = [r for r in _bucket_outputs(monitor, events, buckets, cuts)
                  if r.kind == "partition_state"]
        several = len(policies) > 1
        # the end of input reports every partition
        assert {r.key for r in states} == {to_record(s, several).key for s in ref.states()}
        for r in states:
            assert r == to_record(PartitionState.model_validate_json(r.value), several)


def _propagations(monitor, events) -> list[str]:
    """The isr_propagation records of one engine over `events` (isr replay)."""
    ref = local_engine(monitor)
    for seq, ev in enumerate(events):
        ref.submit(ev, seq)
    ref.finish()
    return [d.model_dump_json() for d in ref.take_decisions() if d.type == "isr_propagation"]


def _by_leader(value: str) -> tuple:
    d = json.loads(value)
    return d["ts"], d["policy"], d["broker"]


class _Store:
    """PropagationStage's states in a dict (the job's: the checkpoint)."""

    def __init__(self) -> None:
        self.states: dict[int, str] = {}

    def latest_before(self, batch_id):
        ids = [i for i in self.states if i < batch_id]
        return self.states[max(ids)] if ids else None

    def save(self, batch_id, state):
        self.states[batch_id] = state


@settings(max_examples=int(os.environ.get("ISR_SESSION_EXAMPLES", "60")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(session_streams(), st.integers(2, 4), st.lists(st.integers(0, 50), max_size=3))
def test_propagation_after_the_buckets_is_one_engines(events, buckets, cuts):
    """`monitor.propagation = "zk"`: a leader's partitions lie in several
    buckets; the driver's stage over every bucket's records of each batch
    (stream/propagation.py), restarted from its stored state before each
    batch, writes the isr_propagation records of one engine (isr replay),
    and no bucket writes any."""
    from isr.stream.propagation import PropagationStage

    monitor = MonitorSettings(policy=POLICIES, replica_lag_time_max_ms=10000,
                              allowed_lateness_ms=1000, propagation="zk")
    expected = _propagations(monitor, events)
    batches: list = []
    out = _bucket_outputs(monitor, events, buckets, cuts, batches)
    assert not of_kind(out, "isr_propagation")
    store, written = _Store(), []
    for batch_id, batch in enumerate(batches):
        stage = PropagationStage(store, several_policies=True)  # as after a restart
        written += [r for r in stage.batch(batch_id, batch) if r.kind == "isr_propagation"]
    assert sorted((r.value for r in written), key=_by_leader) == sorted(expected, key=_by_leader)


@settings(max_examples=int(os.environ.get("ISR_SESSION_EXAMPLES", "60")) // 2, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(session_streams(), st.integers(1, 49))
def test_a_row_from_when_the_bucket_ran_propagation_hands_its_state_to_the_driver(events, cut):
    """A checkpoint written when the buckets ran ZooKeeper-era propagation:
    the batch that migrates the row hands the bucket's propagation state to
    the driver's stage (once; the row saved after holds none), so the
    records before and after the upgrade are one engine's."""
    from isr.pipeline.listeners import standard_listeners
    from isr.stream.operator import Bucket
    from isr.stream.propagation import PropagationStage

    monitor = MonitorSettings(policy=POLICIES, replica_lag_time_max_ms=10000,
                              allowed_lateness_ms=1000, propagation="zk")
    expected = _propagations(monitor, events)
    cut = min(cut, len(events) - 1)
    p = BucketProcessor(monitor)
    # Before: the bucket ran the propagation listener itself (one bucket, so
    # its records were one engine's).
    touched = StateThrottle(0)
    old = Bucket(LocalEngine(monitor, listeners=standard_listeners(monitor) + [touched],
                             external_watermark=True), touched, (0, 1))
    first = process(p, old, [pack(events[:cut], topic="e.jsonl", partition=-1)])
    written = [r.value for r in first if r.kind == "isr_propagation"]
    state = p.save(old)
    # After: the buckets do not run it; the driver's stage does.
    stage = PropagationStage(_Store(), several_policies=True)
    rest = [events[cut:cut + 5], events[cut + 5:]] if len(events) > cut + 5 else [events[cut:]]
    start = cut
    for batch_id, part in enumerate(rest, start=1):
        last = part is rest[-1]
        bucket = p.restore(state, (0, 1))
        out = process(p, bucket, [pack(part, first_offset=start, topic="e.jsonl", partition=-1,
                                       end_ts=max(e.ts for e in events) if last else None)])
        handed = [r for r in out if r.kind == "propagation_state"]
        assert len(handed) <= (1 if batch_id == 1 else 0)
        assert not of_kind(out, "isr_propagation")
        written += [r.value for r in stage.batch(batch_id, out) if r.kind == "isr_propagation"]
        state = p.save(bucket)
        assert b'"propagation"' not in decompress_state(state)
        start += len(part)

    assert sorted(written, key=_by_leader) == sorted(expected, key=_by_leader)


def test_buckets_send_an_instants_alerts_once_as_one_engine():
    """An alert that moves several times within one ms (a leader resuming:
    docs/alerts.md, "One instant, one outcome") sends what one engine
    sends, whichever batch cuts the stream around that ms, across the
    buckets' state round trips."""
    from test_alerts import leader_resume, new_epoch_alone

    monitor = MonitorSettings(policy=POLICIES, allowed_lateness_ms=1000)
    for events, at in ((leader_resume(), 70_000), (new_epoch_alone(), 2000)):
        _ref, expected = _replay(monitor, events)
        ids = [d["id"] for d in expected if d["type"] == "alert"]
        assert ids and len(ids) == len(set(ids))
        near = [i for i, e in enumerate(events) if abs(e.ts - (T0 + at)) <= 1000]
        for cut in range(near[0], near[-1] + 2):
            out = _bucket_outputs(monitor, events, 2, [cut])
            assert _bucket_decisions(out) == expected, cut
