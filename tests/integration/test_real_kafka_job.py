"""The streaming job on the real cluster (issue 22 section 3): the taps write
a pause of broker 3 to a topic of the cluster they watch, `isr run` (Python
Kafka source, `input.source` default) reads it from that cluster and writes
ISR changes, alerts and state back to it; so does `spark-submit
jobs/isr_monitor.py`; read back, both are `isr replay`'s of the same events."""

from __future__ import annotations

import json
import os
import sys
import time
import uuid
from pathlib import Path

import pytest
from crashreport import crash_report, jvm_crash_options, launched_at, run_kept
from helpers import ROOT
from test_real_kafka_faults import isr_of, pause_until_shrunk_then_resume, producing, wait_for
from workload import query_settings

from isr.config import load_settings
from isr.kafka.cluster import BROKER_IDS
from isr.kafka.load import create_rf3_topics
from isr.pipeline.local import replay
from isr.sinks.kafka import read_to_end
from isr.tap.live import RunningTaps, kafka_cluster_taps

pytestmark = pytest.mark.kafka
LATENESS_MS = 2000  # the taps are separate processes (the demo's setting)


def job_settings(kafka, name: str, tmp_path, source: str) -> list[str]:
    """Reading `source`, writing `name`.* topics."""
    return [f"kafka.bootstrap_servers={kafka.bootstrap}", f'input.topics=["{source}"]',
            f"monitor.replica_lag_time_max_ms={kafka.conf.replica_lag_time_max_ms}",
            f"monitor.allowed_lateness_ms={LATENESS_MS}", "monitor.min_insync_replicas=2",
            *query_settings(name, tmp_path / "checkpoint"),
            f"delivery.state_dir={tmp_path / 'delivery'}",
            f"metrics.port={kafka.conf.port_base + 37}", "metrics.address=127.0.0.1"]


def messages(kafka, topic: str, partitions: int = 1) -> list[dict]:
    return [json.loads(m.value()) for m in read_to_end(
        {"bootstrap.servers": kafka.bootstrap}, {(topic, p): 0 for p in range(partitions)})]


def written(kafka, topic: str, partitions: int) -> int:
    """Records in `topic` now (read_to_end would chase the taps' writes)."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": "isr-tests", "log_level": 0})
    try:
        return sum(c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                   for p in range(partitions))
    finally:
        c.close()


def newest_ts(kafka, topic: str, partitions: int) -> int:
    """The largest event ts among the last records of each partition, up to
    the ends seen first (reading to the end would chase the taps' writes)."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": "isr-tests", "log_level": 0})
    try:
        ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                for p in range(partitions)}
        waiting = {p for p, end in ends.items() if end > 0}
        c.assign([TopicPartition(topic, p, max(0, ends[p] - 50)) for p in waiting])
        newest, deadline = 0, time.monotonic() + 20
        while waiting and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None or m.error():
                continue
            newest = max(newest, json.loads(m.value())["ts"])
            if m.offset() >= ends[m.partition()] - 1:
                waiting.discard(m.partition())
        return newest
    finally:
        c.close()


def test_isr_run_on_the_real_cluster_writes_what_replay_decides(kafka, tmp_path):
    paused = 3
    name = f"job{uuid.uuid4().hex[:6]}"
    load = f"{name}-load"
    create_rf3_topics(kafka.bootstrap, (load, 3), (f"{name}.in", 2))  # the job makes its own
    errors = open(tmp_path / "taps.err", "w")
    taps = RunningTaps(kafka_cluster_taps(
        kafka, f"kafka://{name}.in", poll_interval_s=0.5,
        extra=["--set", f"kafka.bootstrap_servers={kafka.bootstrap}"]), cwd=ROOT, stderr=errors)
    try:
        taps.start()
        wait_for(lambda: written(kafka, f"{name}.in", 2), 60, "the taps' first events")
        with producing(kafka, load) as counts:
            time.sleep(3)
            pause_until_shrunk_then_resume(kafka, paused, load)
            # The watermark passes the expand once the taps have written
            # events this much later than it. On a loaded machine they fall
            # behind the cluster, and a fixed sleep was not always enough.
            back_ms = time.time() * 1000
            wait_for(lambda: newest_ts(kafka, f"{name}.in", 2) > back_ms + LATENESS_MS + 2000,
                     90, "the taps' events past the expand and the lateness")
    finally:
        codes = taps.stop()
        errors.close()
    assert set(codes.values()) == {130}, (codes, (tmp_path / "taps.err").read_text()[-3000:])
    assert counts["failed"] == 0
    # What the job will read, as `isr replay` reads it.
    events = messages(kafka, f"{name}.in", 2)
    path = tmp_path / "events.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in sorted(events, key=lambda e: e["ts"])))
    overrides = job_settings(kafka, name, tmp_path, f"{name}.in")
    result = replay([str(path)], load_settings(None, overrides).monitor)
    # The stream decides what lies below its last watermark.
    watermark = max(e["ts"] for e in events) - LATENESS_MS
    final = [json.loads(d.model_dump_json()) for d in result.decisions if d.ts < watermark]
    expected = {kind: sorted((d for d in final if d["type"] == kind), key=lambda d: d["id"])
                for kind in ("isr_change", "alert")}
    # A crash of either launch leaves its files in tmp_path (tests/crashreport.py):
    # spark-submit's driver JVM once aborted here (docs/real-kafka.md, "Known issues").
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
               PYTHONPATH=str(ROOT), ISR_SPARK_LOG_LEVEL="ERROR",
               SPARK_SUBMIT_OPTS=f"{os.environ.get('SPARK_SUBMIT_OPTS', '')} "
                                 f"{jvm_crash_options(tmp_path)}".strip())
    spark_submit = str(Path(sys.executable).with_name("spark-submit"))
    took = {}
    # `isr run`, then spark-submit as docs/streaming.md runs the job: each
    # with output topics and a checkpoint of its own, on the same input
    for launcher, prefix, command in [
            ("isr run", name, [sys.executable, "-m", "isr.cli", "run"]),
            ("spark-submit", f"{name}.s", [spark_submit, "--master", "local[2]",
                                           "jobs/isr_monitor.py"])]:
        own = job_settings(kafka, prefix, tmp_path / prefix, f"{name}.in")
        started, since = time.monotonic(), launched_at()
        job = run_kept([*command, "--available-now", *[a for o in own for a in ("--set", o)]],
                       cwd=ROOT, env=env, out_dir=tmp_path, name=prefix, timeout=400)
        took[launcher] = round(time.monotonic() - started, 1)
        assert job.returncode == 0, f"{launcher}: " + crash_report(
            job, cwd=ROOT, out_dir=tmp_path, name=prefix, started=since)
        changes = sorted(messages(kafka, f"{prefix}.changes"), key=lambda d: d["id"])
        alerts = sorted(messages(kafka, f"{prefix}.alerts"), key=lambda d: d["id"])
        assert changes == expected["isr_change"], launcher
        assert alerts == expected["alert"], launcher
        states = messages(kafka, f"{prefix}.state")
        assert {(s["topic"], s["partition"]) for s in states if s["topic"] == load} == {
            (load, p) for p in range(3)}, launcher
    # broker 3's pause: a shrink and an expand on each partition of the load
    # topic that brokers 1 and 2 lead (where broker 3 leads, see docs/real-kafka.md)
    led = {p: leader for p, (leader, _isr) in isr_of(kafka, load).items()}
    for p, leader in led.items():
        if leader in BROKER_IDS and leader != paused:
            mine = [(c["action"], sorted(c["isr_after"])) for c in changes
                    if (c["topic"], c["partition"]) == (load, p)]
            assert mine == [("shrink", [1, 2]), ("expand", [1, 2, 3])], (p, mine)
    print(f"\nthe job on the real cluster (s, --available-now): {took}, {len(events)} events, "
          f"{len(changes)} changes, {len(alerts)} alerts")
