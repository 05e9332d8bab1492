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


def query_settings(name: str, checkpoint) -> list[str]:
    """A query of its own: `<name>.*` output topics of one partition (the
    tests read partition 0), its checkpoint and its name."""
    return [f"output.changes_topic={name}.changes", f"output.state_topic={name}.state",
            f"output.dead_letter_topic={name}.dead", f"output.alerts_topic={name}.alerts",
            f"output.commit_topic={name}.commits", "output.partitions=1",
            f"stream.checkpoint_location={checkpoint}", f"stream.query_name={name}"]


def job_settings(bootstrap: str, tmp_path, base: list[str], *extra: str, prefix=None,
                 checkpoint: str = "checkpoint"):
    """The job's settings with topics and a query of their own (`prefix`)."""
    prefix = prefix or f"t{uuid.uuid4().hex[:8]}"
    return load_settings(None, base + [
        f"kafka.bootstrap_servers={bootstrap}", f'input.topics=["{prefix}.in"]',
        *query_settings(prefix, tmp_path / checkpoint), *extra])


def job_config(tmp_path: Path, broker, name: str, input_topic: str, limit: int,
               source: str = "python", trigger_interval: str = "1 second") -> Path:
    """The streaming job's configuration for one test: input, output topics
    and a query of its own, run with LAG_MS and 1 s of lateness; `source`:
    input.source (the Python source or Spark's Kafka source);
    `trigger_interval`: stream.trigger_interval."""
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
trigger_interval = "{trigger_interval}"
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


# ---------------------------------------------------------------- fetch sessions
SESSION_PARTITIONS = 12  # leaders 1..4, three partitions each: each session spans buckets
BAD_SESSION = (b'{"v":1,"type":"fetch_session","ts":%d,"leader":1,"replica":2,"session_id":5,'
               b'"session_epoch":3,"full":true,"partitions":[]}' % (T0 + 1000))


def session_events(seconds: int = 60, step_ms: int = 500) -> list[dict]:
    """Followers fetching through fetch sessions (KIP-227), one request per
    leader/follower pair every step: a full request first (session id 0,
    bound by the next request's id), then incremental ones listing only the
    partitions whose fetch offset moved. Even partitions are produced to,
    odd ones are idle after their first append (listed by no request, still
    fetched by their sessions). Along the way: a request the monitor missed
    (a skipped session epoch, 20 s), a follower that forgets a partition (25 s),
    a session the monitor never saw open (an unknown session id, 30 s), a
    partition whose leader moves (35 s: the old leader's followers forget it,
    the new leader's add it or open a session) and a broker whose follower
    fetches stop (broker 4 from 45 s)."""
    replicas = {p: [1 + p % 4, 1 + (p + 1) % 4, 1 + (p + 2) % 4]
                for p in range(SESSION_PARTITIONS)}
    lead = {p: r[0] for p, r in replicas.items()}
    epoch = {p: 1 for p in replicas}
    leo = {p: 0 for p in replicas}
    seen = {(p, r): 0 for p, rs in replicas.items() for r in rs}  # a follower's LEO
    out = [{"v": 1, "type": "leader", "ts": T0, "topic": "orders", "partition": p,
            "leader": lead[p], "leader_epoch": 1, "replicas": rs, "isr": rs,
            "leader_epoch_start_offset": 0} for p, rs in replicas.items()]
    sessions: dict[tuple, dict] = {}  # (leader, follower) -> {"id", "epoch", "cached"}
    next_id = 100
    forget: dict[tuple, list] = {}  # (leader, follower) -> partitions to forget next
    stopped: set[tuple] = set()  # (partition, follower) no longer fetched
    for t in range(step_ms, seconds * 1000 + 1, step_ms):
        ts = T0 + t
        if t == 35_000:  # partition 2 moves from leader 3 to leader 4
            old = lead[2]
            lead[2], epoch[2] = 4, 2
            out.append({"v": 1, "type": "leader", "ts": ts, "topic": "orders", "partition": 2,
                        "leader": 4, "leader_epoch": 2, "replicas": replicas[2],
                        "isr": replicas[2], "leader_epoch_start_offset": leo[2]})
            for r in replicas[2]:
                if r != old:
                    forget.setdefault((old, r), []).append(2)
        if t == 25_000:  # follower 2 stops fetching partition 0 from leader 1
            forget.setdefault((1, 2), []).append(0)
            stopped.add((0, 2))
        for p in replicas:
            if p % 2 == 0 or t == step_ms:
                leo[p] += 3
                out.append({"v": 1, "type": "append", "ts": ts, "topic": "orders",
                            "partition": p, "leader": lead[p], "leader_epoch": epoch[p],
                            "leader_leo": leo[p]})
        pairs = sorted({(lead[p], r) for p, rs in replicas.items() for r in rs if r != lead[p]})
        for pair in pairs:
            leader_id, follower = pair
            if follower == 4 and t >= 45_000:
                continue  # broker 4 stops fetching
            mine = [p for p in replicas if lead[p] == leader_id and follower in replicas[p]
                    and (p, follower) not in stopped]
            s = sessions.get(pair)
            gone = [p for p in forget.pop(pair, []) if s is not None and p in s["cached"]]
            if s is None:
                sessions[pair] = s = {"id": 0, "epoch": 0, "cached": {}}
            listed = []
            for p in mine:
                offset = seen[(p, follower)]
                if s["epoch"] == 0 or s["cached"].get(p) != offset:
                    listed.append({"topic": "orders", "partition": p, "leader_epoch": epoch[p],
                                   "fetch_offset": offset, "leader_leo": leo[p]})
                    s["cached"][p] = offset
                seen[(p, follower)] = leo[p]
            for p in gone:
                del s["cached"][p]
            request = {"v": 1, "type": "fetch_session", "ts": ts + 1, "received_ts": ts,
                       "leader": leader_id, "replica": follower, "broker_epoch": 7,
                       "session_id": s["id"], "session_epoch": s["epoch"],
                       "full": s["epoch"] == 0, "partitions": listed,
                       "forgotten": [{"topic": "orders", "partition": p} for p in gone]}
            if s["epoch"] == 0:
                s["id"], next_id = next_id, next_id + 1  # the response assigns it
            s["epoch"] += 1
            if pair == (1, 3) and t == 20_000:
                continue  # the monitor misses this request: the next skips an epoch
            if pair == (2, 3) and t == 30_000:
                # The follower had opened a new session the monitor did not see.
                s["id"], s["epoch"] = 999, 6
                request.update(session_id=999, session_epoch=5, full=False)
            out.append(request)
    return out


def session_lines() -> list[bytes]:
    data = [orjson.dumps(e) for e in session_events()]
    data.insert(40, BAD_SESSION)
    return data
