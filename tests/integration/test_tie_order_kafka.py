"""Same-ts ties across routing keys through a real Kafka input topic of two
partitions (docs/contract.md, "Order of events"): `isr run` reads them in
another order than the file has, and decides what `isr replay` of the file
decides. The case is the one the realistic run missed (docs/benchmarks.md,
"The realistic cluster through `isr run`"): a stalled leader resuming, its
append (key `orders/0`) and its followers' fetch sessions (key `leader/1`)
in the same millisecond."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import pytest
from helpers import ROOT
from workload import query_settings

from isr.config import load_settings
from isr.contract.events import routing_key
from isr.kafka.load import create_topics
from isr.pipeline.local import replay
from isr.sinks.kafka import read_to_end

pytestmark = pytest.mark.kafka
LATENESS_MS = 1000
T0 = 1_700_000_000_000  # in the past: the live job dead-letters events ahead of its clock


def _events() -> list[dict]:
    """orders/0: leader 1, followers 2 and 3 fetching through fetch sessions
    every 500 ms; the leader stops from +2 s to +14 s (lag 10 s) and resumes
    with an append (the produce requests queued meanwhile) before its
    followers' session fetches of the same millisecond, in the file. Beside
    it orders/1, an append every 10 ms: the filler that puts the resume's
    append at a far higher offset of its source partition than the
    sessions', so the job reads the sessions first."""
    ev: list[dict] = []
    for p in (0, 1):
        ev.append({"v": 1, "type": "leader", "ts": T0, "topic": "orders", "partition": p,
                   "leader": 1, "leader_epoch": 1, "replicas": [1, 2, 3], "isr": [1, 2, 3],
                   "leader_epoch_start_offset": 0})

    def append(t, p, leo):
        return {"v": 1, "type": "append", "ts": T0 + t, "topic": "orders", "partition": p,
                "leader": 1, "leader_epoch": 1, "leader_leo": leo}

    def session(t, replica, epoch, listed):
        return {"v": 1, "type": "fetch_session", "ts": T0 + t, "leader": 1, "replica": replica,
                "session_id": 100 + replica, "session_epoch": epoch, "full": epoch == 0,
                "partitions": [{"topic": "orders", "partition": 0, "leader_epoch": 1,
                                "fetch_offset": o} for o in listed], "forgotten": []}

    timeline: list[tuple[int, int, dict]] = []  # (t, order within t, event)
    timeline += [(t, 1, append(t, 1, t // 10 + 1)) for t in range(0, 20000, 10)]
    timeline.append((0, 0, append(0, 0, 100)))
    epoch = 0
    for t in list(range(0, 2001, 500)) + [14000] + list(range(14500, 20001, 500)):
        if t == 14000:
            timeline.append((t, 0, append(t, 0, 200)))  # before the sessions, in the file
        for r in (2, 3):
            listed = [100] if epoch == 0 else [200] if t == 14500 else []
            timeline.append((t, 2, session(t, r, epoch, listed)))
        epoch += 1
    ev += [e for _t, _o, e in sorted(timeline, key=lambda x: (x[0], x[1]))]
    return ev


def test_isr_run_decides_same_ts_ties_across_input_partitions_as_replay(kafka, tmp_path):
    from confluent_kafka import Producer
    from confluent_kafka.admin import NewTopic

    events = _events()
    path = tmp_path / "events.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    name = f"tie{uuid.uuid4().hex[:6]}"
    source = f"{name}.in"
    create_topics(kafka.bootstrap, [NewTopic(source, 2, 1)])
    # Keyed by the routing key, each key's events in one partition as the
    # contract asks; the partition chosen here: the partitions' own events
    # in 0, the sessions in 1 (what a key hash may well do).
    producer = Producer({"bootstrap.servers": kafka.bootstrap, "acks": "all", "log_level": 0})
    for e in events:
        key = routing_key(e)
        producer.produce(source, json.dumps(e).encode(), key=key,
                         partition=1 if key.startswith(b"leader/") else 0)
    assert producer.flush(30) == 0

    settings = [f"kafka.bootstrap_servers={kafka.bootstrap}", f'input.topics=["{source}"]',
                "monitor.replica_lag_time_max_ms=10000", "monitor.policy=kafka",
                f"monitor.allowed_lateness_ms={LATENESS_MS}",
                *query_settings(name, tmp_path / "checkpoint"),
                f"delivery.state_dir={tmp_path / 'delivery'}",
                "metrics.enabled=false"]
    result = replay([str(path)], load_settings(None, settings).monitor)
    watermark = max(e["ts"] for e in events) - LATENESS_MS
    expected = sorted((json.loads(d.model_dump_json()) for d in result.decisions
                       if d.ts < watermark and d.type == "isr_change"), key=lambda d: d["id"])
    # the tie decides: the overdue check at the resume shrinks orders/0 to [1]
    assert [(d["partition"], d["ts"] - T0, d["action"], d["isr_after"]) for d in expected][:1] == [
        (0, 14000, "shrink", [1])], expected
    assert "leader 1 resumed after 12000 ms" in expected[0]["reason"]

    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
               PYTHONPATH=str(ROOT), ISR_SPARK_LOG_LEVEL="ERROR")
    job = subprocess.run([sys.executable, "-m", "isr.cli", "run", "--available-now",
                          *[a for s in settings for a in ("--set", s)]],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=400)
    assert job.returncode == 0, job.stderr[-3000:]
    dead = list(read_to_end({"bootstrap.servers": kafka.bootstrap}, {(f"{name}.dead", 0): 0}))
    assert not dead, dead[0].value()[:500]
    changes = sorted((json.loads(m.value()) for m in read_to_end(
        {"bootstrap.servers": kafka.bootstrap}, {(f"{name}.changes", 0): 0})),
        key=lambda d: d["id"])
    assert changes == expected
