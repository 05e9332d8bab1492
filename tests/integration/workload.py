"""A small cluster's fetch-state events for the streaming tests, with every
behaviour the job must get right: steady followers, a follower that gets
stuck, a partition that goes idle after its follower stalled (only the
watermark can drive its shrink), a fenced broker (cluster-wide event), and
bad input."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import orjson
from confluent_kafka import Producer

from isr.config import load_settings

# In the past (2023-11-14): the live job dead-letters times more than
# monitor.max_future_ms ahead of its clock.
T0 = 1_700_000_000_000
LAG_MS = 10_000  # run with monitor.replica_lag_time_max_ms = LAG_MS

BAD_LINES = [
    b"this is not json",
    b'{"v":1,"type":"gossip","ts":%d,"topic":"orders","partition":0}' % (T0 + 1000),
    b'{"v":1,"type":"fetch","ts":%d,"topic":"orders","partition":0,"leader":1,'
    b'"leader_epoch":1,"replica":2,"fetch_offset":-5,"leader_leo":10}' % (T0 + 1000),
]


def events(seconds: int = 60, partitions: int = 4, step_ms: int = 500) -> list[dict]:
    out = []
    parts = []
    for p in range(partitions):
        replicas = [1 + p % 4, 1 + (p + 1) % 4, 1 + (p + 2) % 4]
        parts.append({"p": p, "replicas": replicas, "leo": 0,
                      "seen": {r: 0 for r in replicas[1:]}})
        out.append({"v": 1, "type": "leader", "ts": T0, "topic": "orders", "partition": p,
                    "leader": replicas[0], "leader_epoch": 1, "replicas": replicas,
                    "isr": replicas, "leader_epoch_start_offset": 0})
    for t in range(step_ms, seconds * 1000 + 1, step_ms):
        ts = T0 + t
        if t == 40_000:  # broker 4 loses its session: the controller fences it
            # (250 ms off the grid: no same-ms tie with events of other partitions,
            # whose relative order Kafka does not define)
            out.append({"v": 1, "type": "broker", "ts": ts + 250, "broker": 4,
                        "broker_epoch": 7, "state": "fenced"})
        for part in parts:
            p, replicas = part["p"], part["replicas"]
            if p == 1 and t > 20_000:
                continue  # partition 1 goes idle
            base = {"v": 1, "ts": ts, "topic": "orders", "partition": p,
                    "leader": replicas[0], "leader_epoch": 1}
            part["leo"] += 3
            out.append({**base, "type": "append", "leader_leo": part["leo"]})
            for r in replicas[1:]:
                if p == 0 and r == replicas[-1] and t > 15_000:
                    continue  # stuck follower on partition 0
                if p == 1 and r == replicas[-1] and t > 12_000:
                    continue  # partition 1's follower stalls before the partition idles
                if r == 4 and t >= 40_000:
                    continue  # fenced
                out.append({**base, "type": "fetch", "replica": r,
                            "fetch_offset": part["seen"][r], "leader_leo": part["leo"],
                            "ts": ts + 1})
                part["seen"][r] = part["leo"]
    return out


def lines(with_bad: bool = True) -> list[bytes]:
    data = [orjson.dumps(e) for e in events()]
    if with_bad:
        for i, bad in enumerate(BAD_LINES):
            data.insert(50 + 40 * i, bad)
    return data


def write_file(path, data: list[bytes]) -> None:
    with open(path, "wb") as f:
        for line in data:
            f.write(line + b"\n")


def produce(bootstrap: str, topic: str, data: list[bytes]) -> None:
    """Keyed by topic/partition so each monitored partition stays in order."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 10, "log_level": 0,
                  "enable.idempotence": True})
    for line in data:
        try:
            ev = json.loads(line)
            key = f"{ev.get('topic')}/{ev.get('partition')}" if "topic" in ev else "cluster"
        except ValueError:
            key = "garbage"
        p.produce(topic, key=key, value=line)
        p.poll(0)
    p.flush(30)


def job_settings(bootstrap: str, tmp_path, base: list[str], *extra: str, prefix=None,
                 checkpoint: str = "checkpoint"):
    """The job's settings with topics and a query of their own (`prefix`)."""
    prefix = prefix or f"t{uuid.uuid4().hex[:8]}"
    return load_settings(None, base + [
        f"kafka.bootstrap_servers={bootstrap}",
        f'input.topics=["{prefix}.in"]',
        f"output.changes_topic={prefix}.changes",
        f"output.state_topic={prefix}.state",
        f"output.dead_letter_topic={prefix}.dead",
        f"output.alerts_topic={prefix}.alerts",
        f"output.commit_topic={prefix}.commits",
        "output.partitions=1",  # the tests read partition 0
        f"stream.checkpoint_location={tmp_path / checkpoint}",
        f"stream.query_name={prefix}",
        *extra])


def job_config(tmp_path: Path, broker, name: str, input_topic: str, limit: int,
               source: str = "python") -> Path:
    """The streaming job's configuration for one test: input, output topics
    and a query of its own, run with LAG_MS and 1 s of lateness; `source`:
    input.source (the Python source or Spark's Kafka source)."""
    path = tmp_path / f"{name}.toml"
    path.write_text(f"""
[monitor]
replica_lag_time_max_ms = {LAG_MS}
allowed_lateness_ms = 1000
[kafka]
bootstrap_servers = "{broker.bootstrap}"
[input]
source = "{source}"
topics = ["{input_topic}"]
max_offsets_per_trigger = {limit}
[output]
changes_topic = "{name}.changes"
state_topic = "{name}.state"
dead_letter_topic = "{name}.dead"
alerts_topic = "{name}.alerts"
commit_topic = "{name}.commits"
partitions = 1
[stream]
checkpoint_location = "{tmp_path / name / 'checkpoint'}"
query_name = "{name}"
state_buckets = 2
""")
    return path


BASE = [f"monitor.replica_lag_time_max_ms={LAG_MS}", "monitor.allowed_lateness_ms=1000"]


def replayed_outputs(tmp: Path) -> dict:
    """`isr replay` of lines(): what every run of the job must write."""
    from isr.pipeline.local import replay

    path = tmp / "events.jsonl"
    write_file(path, lines())
    result = replay([str(path)], load_settings(None, BASE).monitor)
    # The stream decides what lies below its last watermark; a bounded replay
    # also flushes the last allowed_lateness_ms of input.
    watermark = max(e["ts"] for e in events()) - 1000
    final = [json.loads(d.model_dump_json()) for d in result.decisions if d.ts < watermark]
    return {"isr_change": sorted((d for d in final if d["type"] == "isr_change"),
                                 key=lambda d: d["id"]),
            "alert": sorted((d for d in final if d["type"] == "alert"), key=lambda d: d["id"]),
            "dead": sorted(d.reason for d in result.dead_letters)}


def records(broker, topic: str) -> list[dict]:
    """Everything in partition 0 of `topic` (the tests' outputs have one)."""
    from isr.sinks.kafka import read_to_end

    return [json.loads(m.value()) for m in read_to_end({"bootstrap.servers": broker.bootstrap},
                                                        {(topic, 0): 0})]


def assert_outputs_equal_replay(broker, name: str, expected: dict) -> None:
    """The job's topics `name`.changes/.alerts/.dead hold exactly `expected`."""
    changes = sorted(records(broker, f"{name}.changes"), key=lambda d: d["id"])
    assert changes == expected["isr_change"]
    assert len(changes) >= 4
    alerts = sorted(records(broker, f"{name}.alerts"), key=lambda d: d["id"])
    assert alerts == expected["alert"]
    assert sorted(d["reason"] for d in records(broker, f"{name}.dead")) == expected["dead"]
