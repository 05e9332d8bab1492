"""The stream never stops and never loses (docs/reliability.md), against the
embedded broker and real Spark: poison messages, a backlog read in small
slices, a new checkpoint under an old name, a broker restart, lost input,
Ctrl-C."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import workload
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from helpers import ROOT, wait_until

from isr.config import load_settings
from isr.kafka.embedded import EmbeddedBroker, free_port
from isr.pipeline.local import replay
from isr.pipeline.streaming import run_to_kafka
from isr.sinks.kafka import read_to_end

pytestmark = pytest.mark.integration

BASE = [f"monitor.replica_lag_time_max_ms={workload.LAG_MS}", "monitor.allowed_lateness_ms=1000",
        "metrics.enabled=false"]


def settings_for(bootstrap, tmp_path, *extra, prefix=None, checkpoint="checkpoint"):
    return workload.job_settings(bootstrap, tmp_path, BASE, *extra, prefix=prefix,
                                 checkpoint=checkpoint)


def records(bootstrap, topic, partitions=1):
    conf = {"bootstrap.servers": bootstrap}
    return [json.loads(m.value()) for m in read_to_end(conf, {(topic, p): 0
                                                              for p in range(partitions)})]


def produce(bootstrap, topic, values, partition=None):
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 10, "log_level": 0,
                  "message.max.bytes": 2_000_000})
    for key, value in values:
        kw = {} if partition is None else {"partition": partition}
        p.produce(topic, key=key, value=value, **kw)
        p.poll(0)
    assert p.flush(30) == 0


def keyed(lines):
    out = []
    for line in lines:
        try:
            ev = json.loads(line)
            key = f"{ev['topic']}/{ev['partition']}" if "topic" in ev else "cluster"
        except (ValueError, TypeError, KeyError):
            key = "garbage"
        out.append((key.encode(), line))
    return out


def decided_before(result, watermark):
    """What a stream has decided by its last watermark, as JSON, by id."""
    out = [json.loads(d.model_dump_json()) for d in result.decisions if d.ts < watermark]
    return sorted(out, key=lambda d: d["id"])


def poison(now_ms: int) -> list[tuple[str, bytes]]:
    """One of each message that stopped or poisoned the job before
    (docs/reliability.md), with the dead letter's reason class it must get."""
    ok = next(e for e in workload.events(seconds=1) if e["type"] == "append")
    def with_ts(ts):  # noqa: E306
        return json.dumps({**ok, "ts": ts}).encode()
    return [
        ("not_json", None),                                      # a tombstone
        ("invalid", with_ts("abc")),
        ("invalid", with_ts(1.5)),
        ("invalid", with_ts(True)),
        ("invalid", with_ts(2**70)),
        ("invalid", with_ts(10**17)),
        ("invalid", with_ts(2**63 - 1)),
        ("not_json", bytes(range(256)) * 1600),                  # 400 KB of binary
        ("invalid", json.dumps({**ok, "topic": "t" * 900_000}).encode()),  # a 900 KB name
        ("unknown_type", json.dumps({"v": 1, "type": "gossip", "ts": now_ms + 3_600_000})
         .encode()),
        ("future", with_ts(now_ms + 2 * 3_600_000)),             # valid, 2 h ahead
    ]


def test_poison_messages_become_dead_letters_and_decide_nothing(broker, spark, tmp_path):
    """Each in the middle of a valid stream: the job goes on to the end (exit
    0), each is dead-lettered once with its reason (and under the producer's
    1 MB), and the decisions are those of the valid events alone."""
    s = settings_for(broker.bootstrap, tmp_path)
    topic = s.input.topics[0]
    broker.create_topics([topic], 2)
    valid = workload.lines(with_bad=False)
    bad = poison(int(time.time() * 1000))
    mixed = list(valid)
    for i, (_cls, value) in enumerate(bad):
        mixed.insert(100 + 37 * i, value)
    produce(broker.bootstrap, topic, keyed(mixed))
    query = run_to_kafka(s, spark=spark, trigger={"availableNow": True})
    query.awaitTermination()
    assert query.exception() is None

    dead = records(broker.bootstrap, s.output.dead_letter_topic)
    assert sorted(d["reason_class"] for d in dead) == sorted(c for c, _v in bad)
    assert all(len(json.dumps(d)) < 100_000 for d in dead)
    assert any(d["raw_truncated"] and d["raw_size"] > 400_000 for d in dead)
    path = tmp_path / "valid.jsonl"
    workload.write_file(path, valid)
    alone = replay([str(path)], s.monitor)
    watermark = max(e["ts"] for e in workload.events()) - 1000
    expected = [d for d in decided_before(alone, watermark) if d["type"] == "isr_change"]
    assert sorted(records(broker.bootstrap, s.output.changes_topic),
                  key=lambda d: d["id"]) == expected
    assert expected


def test_the_local_engine_takes_the_same_poison_in_a_file_and_does_not_hang(tmp_path):
    valid = workload.lines(with_bad=False)
    mixed = list(valid)
    bad = [(c, v) for c, v in poison(int(time.time() * 1000)) if v is not None]
    for i, (_cls, value) in enumerate(bad):
        mixed.insert(100 + 37 * i, value.replace(b"\n", b" "))
    poisoned, clean = tmp_path / "mixed.jsonl", tmp_path / "valid.jsonl"
    workload.write_file(poisoned, mixed)
    workload.write_file(clean, valid)
    monitor = load_settings(None, BASE).monitor
    started = time.monotonic()
    got = replay([str(poisoned)], monitor)
    assert time.monotonic() - started < 30  # a far-future ts once made it run for ever
    assert sorted(d.reason_class for d in got.dead_letters) == sorted(c for c, _v in bad)
    alone = replay([str(clean)], monitor)
    assert [d.model_dump_json() for d in got.decisions] == [
        d.model_dump_json() for d in alone.decisions]


def skewed_events() -> list[dict]:
    """Two monitored partitions, each in its own input partition: `dense`
    has a burst of appends in its first 20 s, `calm` is steady and loses a
    follower at 30 s. Read in equal shares of offsets, `dense` falls behind
    `calm` in event time by seconds."""
    T0, out = workload.T0, []
    for name in ("dense", "calm"):
        out.append({"v": 1, "type": "leader", "ts": T0, "topic": name, "partition": 0,
                    "leader": 1, "leader_epoch": 1, "replicas": [1, 2, 3], "isr": [1, 2, 3],
                    "leader_epoch_start_offset": 0})
    leo = {"dense": 0, "calm": 0}
    for t in range(500, 60_001, 500):
        for name in ("dense", "calm"):
            bursts = 20 if name == "dense" and t <= 20_000 else 1
            for i in range(bursts):
                leo[name] += 1
                out.append({"v": 1, "type": "append", "ts": workload.T0 + t + i, "topic": name,
                            "partition": 0, "leader": 1, "leader_epoch": 1,
                            "leader_leo": leo[name]})
            for r in (2, 3):
                if name == "calm" and r == 3 and t > 30_000:
                    continue
                out.append({"v": 1, "type": "fetch", "ts": workload.T0 + t + 50 + r,
                            "topic": name, "partition": 0, "leader": 1, "leader_epoch": 1,
                            "replica": r, "fetch_offset": leo[name], "leader_leo": leo[name]})
    return sorted(out, key=lambda e: e["ts"])


def test_a_backlog_read_in_small_slices_decides_as_replay(broker, spark, tmp_path):
    s = settings_for(broker.bootstrap, tmp_path, "input.max_offsets_per_trigger=150",
                     "monitor.allowed_lateness_ms=200")
    topic = s.input.topics[0]
    broker.create_topics([topic], 2)
    events = skewed_events()
    for p, name in enumerate(("dense", "calm")):
        produce(broker.bootstrap, topic,
                [(name.encode(), json.dumps(e).encode()) for e in events if e["topic"] == name],
                partition=p)
    query = run_to_kafka(s, spark=spark, trigger={"availableNow": True})
    query.awaitTermination()
    assert len(query.recentProgress) >= 8  # read in many slices
    assert records(broker.bootstrap, s.output.dead_letter_topic) == []  # nothing late
    path = tmp_path / "events.jsonl"
    workload.write_file(path, [json.dumps(e).encode() for e in events])
    local = replay([str(path)], s.monitor)
    watermark = events[-1]["ts"] - 200
    expected = decided_before(local, watermark)
    for kind, topic_out in (("isr_change", s.output.changes_topic),
                            ("alert", s.output.alerts_topic)):
        want = [d for d in expected if d["type"] == kind]
        assert want, kind
        assert sorted(records(broker.bootstrap, topic_out), key=lambda d: d["id"]) == want


def test_a_new_checkpoint_under_the_same_name_writes_its_own_batches(broker, spark, tmp_path,
                                                                      capfd):
    s = settings_for(broker.bootstrap, tmp_path)
    broker.create_topics(s.input.topics, 1)
    produce(broker.bootstrap, s.input.topics[0], keyed(workload.lines()))
    first = run_to_kafka(s, spark=spark, trigger={"availableNow": True})
    first.awaitTermination()
    once = records(broker.bootstrap, s.output.changes_topic)
    assert once
    again = settings_for(broker.bootstrap, tmp_path, prefix=s.stream.query_name,
                         checkpoint="another-checkpoint")
    second = run_to_kafka(again, spark=spark, trigger={"availableNow": True})
    second.awaitTermination()
    twice = records(broker.bootstrap, s.output.changes_topic)
    assert sorted(d["id"] for d in twice) == sorted(d["id"] for d in once * 2)
    commits = records(broker.bootstrap, s.output.commit_topic)
    assert {c["checkpoint"] for c in commits} == {first.id, second.id}
    warning = [line for line in capfd.readouterr().err.splitlines()
               if line.startswith("isr: sink: the last commit")]
    assert len(warning) == 1 and second.id in warning[0] and first.id in warning[0]


def test_a_broker_restart_is_ridden_out_and_lost_input_is_never_skipped(spark, tmp_path):
    """The broker dies mid-stream and comes back on the same port after a
    few seconds (memory storage: its topics come back as the test creates and
    fills them; until they are filled again the topic's end lies below what
    the job read, which the source looks at again for WENT_BACK_GRACE_S
    before calling it lost). The job waits and carries on. Then the input
    topic comes back shorter than what the job had read, for good: it stops
    with the documented line, never skipping in silence."""
    port = free_port()
    phase1, phase2 = workload.lines(with_bad=False)[:300], workload.lines(with_bad=False)[300:]
    with EmbeddedBroker(port=port) as broker:
        s = settings_for(broker.bootstrap, tmp_path, "kafka.outage_timeout_s=120",
                         "stream.trigger_interval=1 second")
        topic = s.input.topics[0]
        broker.create_topics([topic], 1)
        produce(broker.bootstrap, topic, keyed(phase1))
        query = run_to_kafka(s, spark=spark)
        try:
            wait_until(lambda: query.lastProgress and query.lastProgress["numInputRows"] >= 0
                  and records(broker.bootstrap, s.output.commit_topic), what="a first batch")
            broker.stop()
            time.sleep(8)  # down: the job's source and sink wait
            broker.start()
            broker.create_topics([topic], 1)
            produce(broker.bootstrap, topic, keyed(phase1))  # the same records, same offsets
            produce(broker.bootstrap, topic, keyed(phase2))
            assert query.isActive
            wait_until(lambda: any(c["ts"] >= workload.T0 + 40_000 for c in records(
                broker.bootstrap, s.output.changes_topic)), what="decisions after the restart")
            assert query.exception() is None
            # The input comes back shorter than what was read: not skipped in silence.
            admin = AdminClient({"bootstrap.servers": broker.bootstrap})
            admin.delete_topics([topic])[topic].result(10)
            broker.create_topics([topic], 1)
            produce(broker.bootstrap, topic, keyed(phase1[:10]))
            wait_until(lambda: not query.isActive, what="the job to stop")
            message = str(query.exception())
            assert "offsets went back from" in message and "fail_on_data_loss" in message
        finally:
            query.stop()


def test_isr_run_stops_on_ctrl_c_with_one_line(broker, tmp_path):
    s = settings_for(broker.bootstrap, tmp_path)
    broker.create_topics(s.input.topics, 1)
    args = [f"--set={k}={v}" for k, v in (
        ("kafka.bootstrap_servers", broker.bootstrap), ("input.topics", f'["{s.input.topics[0]}"]'),
        ("output.changes_topic", s.output.changes_topic), ("output.state_topic", s.output.state_topic),
        ("output.dead_letter_topic", s.output.dead_letter_topic),
        ("output.alerts_topic", s.output.alerts_topic),
        ("output.commit_topic", s.output.commit_topic),
        ("stream.checkpoint_location", str(tmp_path / "ck")), ("metrics.enabled", "false"))]
    proc = subprocess.Popen([sys.executable, "-m", "isr.cli", "run", *args], cwd=ROOT,
                            stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "ISR_SPARK_LOG_LEVEL": "ERROR"})
    lines = []
    for line in proc.stderr:  # Spark's start-up banner, then ours
        lines.append(line.rstrip())
        if "running; checkpoint" in line:
            break
    time.sleep(5)
    proc.send_signal(signal.SIGINT)
    started = time.monotonic()
    rest = proc.communicate(timeout=60)[1].splitlines()
    assert time.monotonic() - started < 15
    assert proc.returncode == 130
    ours = [line for line in rest if line.startswith("isr:")]
    assert ours[0] == ("isr: stopping (a micro-batch cut short is done again on the next "
                       "start, its records written once)")
    assert len(ours) == 2 and ours[1].startswith("isr: stopped in ")
    assert not [line for line in rest if "Traceback" in line or "Error" in line
                or "Exception" in line], rest
