"""`isr simulate` producing to a real broker (the embedded Tansu), in real
time and as a load generator, and the monitor job deciding on its events."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from isr.sinks.kafka import read_to_end

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def _simulate(broker, *args: str) -> tuple[int, str]:
    r = subprocess.run([sys.executable, "-m", "isr.cli", "simulate", *args,
                        "--set", f"kafka.bootstrap_servers={broker.bootstrap}"],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    sent = int(re.search(r"(\d+) events in", r.stderr).group(1))
    return sent, r.stderr


def _all(broker, topic: str, partitions: int) -> list:
    return list(read_to_end({"bootstrap.servers": broker.bootstrap},
                            {(topic, p): 0 for p in range(partitions)}))


def test_real_time_events_reach_the_topic_keyed_by_partition_at_wall_clock(broker):
    topic = f"sim{uuid.uuid4().hex[:6]}"
    started = time.time() * 1000
    sent, err = _simulate(broker, "--scenario", "kip501-slow-leader", "--to",
                          f"kafka://{topic}", "--duration", "3", "--partitions", "2")
    finished = time.time() * 1000
    assert "--set monitor.replica_lag_time_max_ms=10000" in err  # the scenario's watch hint
    msgs = _all(broker, topic, 2)
    assert len(msgs) == sent > 50  # ~30 events/s for 3 s, none lost
    events = [json.loads(m.value()) for m in msgs]
    partition_events = [(m.key(), e) for m, e in zip(msgs, events) if e["type"] != "broker"]
    # a partition's events keyed by it, a FETCH (its session) by its leader
    assert all(k == (b"leader/1001" if e["type"] == "fetch_session" else b"events/0")
               for k, e in partition_events)
    assert {e["type"] for e in events} >= {"fetch_session", "append"}
    # Real time: event time is wall-clock time, from the next whole second on.
    assert all(started - 1000 <= e["ts"] <= finished for e in events)
    assert min(e["ts"] for e in events) % 1000 == 0


def test_load_generator_sends_exactly_what_it_reports(broker):
    topic = f"load{uuid.uuid4().hex[:6]}"
    sent, err = _simulate(broker, "--scenario", "steady-10k", "--to", f"kafka://{topic}",
                          "--rate", "4000", "--duration", "4", "--partitions", "4")
    assert re.search(r"target 4,000, held \d+\.\d%", err), err
    assert len(_all(broker, topic, 4)) == sent
    assert 8000 <= sent <= 16000  # a 4 s budget at 4000/s


def test_simulated_cluster_through_the_streaming_job_matches_replay(broker, spark, tmp_path):
    """The simulator's events, produced to Kafka and decided by the Spark job,
    give the decisions `isr replay` gives on the same events."""
    from isr.config import load_settings
    from isr.sim.cluster import Simulator
    from isr.contract.events import routing_key
    from isr.sim.scenario import load_scenario
    from isr.pipeline.streaming import run_to_kafka
    from confluent_kafka import Producer

    sc = load_scenario("follower-gc-pause-long")
    events = list(Simulator(sc).events())
    name = f"simjob{uuid.uuid4().hex[:6]}"
    broker.create_topics([f"{name}.in"], 2)
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 20})
    for e in events:
        p.produce(f"{name}.in", key=routing_key(e), value=json.dumps(e))
    p.flush(30)
    overrides = [f"kafka.bootstrap_servers={broker.bootstrap}", f'input.topics=["{name}.in"]',
                 f"output.changes_topic={name}.changes", f"output.state_topic={name}.state",
                 f"output.dead_letter_topic={name}.dead", f"output.commit_topic={name}.commits",
                 f"output.alerts_topic={name}.alerts", "output.partitions=1",
                 f"stream.checkpoint_location={tmp_path}/ck", f"stream.query_name={name}",
                 "monitor.policy=kafka,kip16", "input.max_offsets_per_trigger=1500"]
    settings = load_settings(None, overrides)
    run_to_kafka(settings, spark=spark, trigger={"availableNow": True}).awaitTermination()
    got = [json.loads(m.value()) for m in _all(broker, f"{name}.changes", 1)]
    path = tmp_path / "events.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    r = subprocess.run([sys.executable, "-m", "isr.cli", "replay", str(path), "--policy",
                        "kafka,kip16", "--no-state", "-q"], cwd=ROOT, capture_output=True,
                       text=True, timeout=120)
    replayed = [json.loads(line) for line in r.stdout.splitlines()]
    want = [d for d in replayed if d["type"] == "isr_change"]
    assert [(d["policy"], d["action"], d["ts"] - sc.start_ts) for d in want] == [
        ("kafka", "shrink", 75000), ("kip16", "shrink", 90000),
        ("kafka", "expand", 100003), ("kip16", "expand", 100003)]
    assert sorted(got, key=lambda d: d["id"]) == sorted(want, key=lambda d: d["id"])
    # The job stops at its last watermark (allowed lateness before the end):
    # every alert transition before that is the replay's.
    watermark = events[-1]["ts"] - settings.monitor.allowed_lateness_ms
    alerts = [json.loads(m.value()) for m in _all(broker, f"{name}.alerts", 1)]
    want_alerts = [d for d in replayed if d["type"] == "alert" and d["ts"] < watermark]
    assert {a["labels"]["alertname"] for a in want_alerts} >= {"AtMinIsr", "FollowerLagging"}
    assert sorted(alerts, key=lambda d: d["id"]) == sorted(want_alerts, key=lambda d: d["id"])
