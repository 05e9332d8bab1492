"""The Spark stateful glue without Spark: one bucket's processing, its state
round trip, broadcast rows and the end-of-input row."""

from __future__ import annotations

import json

from helpers import T0, append, broker, fetch, leader

from isr.config import MonitorSettings
from isr.stream.operator import END_OF_INPUT, BucketProcessor


def rows(events, first_seq: int = 0, broadcast=False, topic="in", partition=0):
    """Column lists as the operator receives them from the packed stage."""
    values = [e if isinstance(e, bytes) else e.model_dump_json().encode() for e in events]
    n = len(values)
    ts = [json.loads(v)["ts"] if v.startswith(b"{") else None for v in values]
    return {"value": values, "ts": ts, "seq": list(range(first_seq, first_seq + n)),
            "topic": [topic] * n, "partition": [partition] * n,
            "offset": list(range(first_seq, first_seq + n)), "broadcast": [broadcast] * n,
            "end_ts": [None] * n, "key": [None] * n}


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
        p.process(bucket_id, bucket, rows([bad_broker], broadcast=True), watermark=0)
        out = p.process(bucket_id, bucket, rows([]), watermark=T0 + 10_000)
        reports += [r for r in out if r[0] == "dead_letter"]
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
    end = rows([END_OF_INPUT])
    end["end_ts"] = [T0 + 100_000]
    end["ts"] = [None]
    for c in data:
        data[c] += end[c]
    out = p.process(0, bucket, data, watermark=0)
    assert kinds(out).count("partition_state") == 1 and "summary" in kinds(out)
    state = json.loads(next(r[4] for r in out if r[0] == "partition_state"))
    assert state["hw"] == 10 and state["isr"] == [1, 2]
    summary = json.loads(next(r[4] for r in out if r[0] == "summary"))
    assert summary == {"kafka": [1, 0, 0]}
