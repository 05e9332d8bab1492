"""The Spark stateful glue without Spark: one bucket's processing, its state
round trip, broadcast rows and the end-of-input row."""

from __future__ import annotations

import json
import pickle
import zlib

import pyarrow as pa
import pytest
from helpers import T0, append, broker, fetch, leader

from isr.config import MonitorSettings
from isr.engine import snapshot
from isr.stream.operator import END_OF_INPUT, BucketProcessor, event_schema
from isr.contract.fast import encode


def rows(events, first_seq: int = 0, broadcast=False, topic="in", partition=0, end_ts=None):
    """An Arrow table as the operator receives it from the packed stage."""
    values = [e if isinstance(e, bytes) else encode(e) for e in events]
    n = len(values)
    ts = [json.loads(v)["ts"] if v.startswith(b"{") else None for v in values]
    return pa.table({"ts": ts, "seq": list(range(first_seq, first_seq + n)), "key": [None] * n,
                     "value": values, "topic": [topic] * n, "partition": [partition] * n,
                     "offset": list(range(first_seq, first_seq + n)),
                     "broadcast": [broadcast] * n, "end_ts": [end_ts] * n},
                    schema=event_schema())


def kinds(out):
    return [r[0] for r in out]


MONITOR = MonitorSettings(allowed_lateness_ms=1000)


def test_events_wait_for_the_watermark_then_decide_across_a_state_round_trip():
    p = BucketProcessor(MONITOR)
    bucket = p.restore(None)
    events = [leader(0, replicas=[1, 2], isr=[1, 2]), append(10, 10), append(50000, 10)]
    assert p.process(0, bucket, rows(events), watermark=0) == []  # nothing released yet
    bucket = p.restore(p.save(bucket))
    out = p.process(0, bucket, rows([]), watermark=T0 + 60000)
    (change,) = [json.loads(r[4]) for r in out if r[0] == "isr_change"]
    assert (change["ts"] - T0, change["action"], change["replicas"]) == (45000, "shrink", [2])
    assert kinds(out).count("partition_state") == 1  # one per changed partition per batch


def test_a_batch_applies_what_lies_below_its_own_watermark_and_keeps_only_the_rest():
    """Spark hands a batch the previous batch's watermark; the batch's largest
    ts (over all buckets) says what the next one will be. Events below it
    are decided in this batch, not one batch later, and only the last
    allowed_lateness_ms of events stays in the state."""
    p = BucketProcessor(MONITOR)
    bucket = p.restore(None)
    events = [leader(0, replicas=[1, 2], isr=[1, 2]), append(10, 10), append(50000, 11),
              append(59500, 12)]
    out = p.process(0, bucket, rows(events), watermark=-1, batch_max_ts=T0 + 60000)
    (change,) = [json.loads(r[4]) for r in out if r[0] == "isr_change"]
    assert (change["ts"] - T0, change["action"]) == (45000, "shrink")
    assert [q[0] - T0 for q in bucket.engine.sequencer.queued] == [59500]  # above 60000 - 1000
    # The next batch judges lateness by that watermark, as Spark will.
    out = p.process(0, bucket, rows([append(58000, 13)], first_seq=9), watermark=T0 + 59000)
    assert [json.loads(r[4])["reason_class"] for r in out if r[0] == "dead_letter"] == ["late"]


def test_late_and_invalid_rows_become_dead_letters_invalid_first():
    p = BucketProcessor(MONITOR)
    bucket = p.restore(None)
    p.process(0, bucket, rows([leader(0), append(20000, 5)]), watermark=0)
    late = append(100, 7)
    bad = b'{"v":1,"type":"append","ts":1800000000100,"topic":"orders","partition":0}'
    out = p.process(0, bucket, rows([late, bad, b"nope"], first_seq=10),
                    watermark=T0 + 19000)
    dead = [json.loads(r[4]) for r in out if r[0] == "dead_letter"]
    assert [(d["reason_class"], d["offset"]) for d in dead] == [
        ("late", 10), ("invalid", 11), ("not_json", 12)]
    assert dead[0]["reason"] == (f"ts {T0 + 100} is before the watermark {T0 + 19000} "
                                 "(allowed lateness 1000 ms)")


def test_broadcast_rows_reach_every_bucket_but_are_reported_once():
    p = BucketProcessor(MONITOR)
    bad_broker = b'{"v":1,"type":"broker","ts":1800000000100,"broker":3,"state":"gone"}'
    reports = []
    for bucket_id in range(3):
        bucket = p.restore(None)
        out = p.process(bucket_id, bucket, rows([bad_broker], broadcast=True), watermark=0)
        out += p.process(bucket_id, bucket, rows([]), watermark=T0 + 10_000)
        reports += [r for r in out if r.kind == "dead_letter"]
    assert len(reports) == 1


def test_fenced_broker_removes_from_the_partitions_of_this_bucket():
    p = BucketProcessor(MONITOR)
    bucket = p.restore(None)
    p.process(1, bucket, rows([leader(0), leader(0, partition=1)]), watermark=0)
    p.process(1, bucket, rows([broker(500, 3, "fenced")], first_seq=5, broadcast=True),
              watermark=T0 + 100)
    out = p.process(1, bucket, rows([]), watermark=T0 + 1000)
    changes = [json.loads(r[4]) for r in out if r[0] == "isr_change"]
    assert [(c["partition"], c["cause"]) for c in changes] == [(0, "controller"),
                                                             (1, "controller")]


def test_end_of_input_flushes_and_reports_every_partition_and_a_summary():
    p = BucketProcessor(MONITOR)
    bucket = p.restore(None)
    data = rows([leader(0, replicas=[1, 2], isr=[1, 2]), append(10, 10), fetch(20, 2, 10, 10)])
    end = rows([END_OF_INPUT], first_seq=3, end_ts=T0 + 100_000)
    out = p.process(0, bucket, pa.concat_tables([data, end]), watermark=0)
    assert kinds(out).count("partition_state") == 1 and "summary" in kinds(out)
    state = json.loads(next(r[4] for r in out if r[0] == "partition_state"))
    assert state["hw"] == 10 and state["isr"] == [1, 2]
    summary = json.loads(next(r[4] for r in out if r[0] == "summary"))
    assert summary == {"kafka": [1, 0, 0]}


def test_a_checkpoint_of_another_bucket_layout_stops_with_a_clear_error():
    """State keys are bucket labels (partitioning.py); a checkpoint written with
    other keys (another state_buckets, or keys 0..n-1 of earlier versions)
    must not be mixed into the new layout silently."""
    from isr.stream.operator import make_state_function
    from isr.stream.partitioning import bucket_labels

    labels = bucket_labels(4)
    assert sorted(labels) == [0, 2, 6, 12]
    clear = "another bucket layout.*new stream.checkpoint_location"
    with pytest.raises(ValueError, match=clear):  # a key that is no label
        next(make_state_function(MONITOR, labels)((1,), iter([]), None))
    p = BucketProcessor(MONITOR)
    bucket = p.restore(None, (1, 4))
    p.process(1, bucket, rows([leader(0)]), watermark=0, batch_max_ts=T0 + 60000)
    saved = p.save(bucket)
    assert snapshot.snapshot(p.restore(saved, (1, 4)).engine) == snapshot.snapshot(bucket.engine)
    assert bucket.engine.partitions["kafka"]  # the leader event was applied and saved
    with pytest.raises(ValueError, match=clear):  # a label that is a bucket of another layout
        p.restore(saved, (1, 8))
    before_labels = zlib.compress(pickle.dumps(pickle.loads(zlib.decompress(saved))[1:]))
    with pytest.raises(ValueError, match=clear):  # state of a version before labels
        p.restore(before_labels, (1, 4))
