"""`isr tap metadata --poll` against the embedded broker over TCP: Metadata
and DescribeCluster become broker, leader and isr events (Tansu reports
ISR = replicas and leader epoch 0), and a poll that sees no change writes
nothing."""

from __future__ import annotations

import json
import uuid

from helpers import cli
from kafka.admin import KafkaAdminClient
from tapfixtures import TOPIC_ID, follower_outage

from isr.kafka.client import topic_partitions
from isr.sinks.kafka import read_to_end
from isr.tap.request_log import kafka_topic_id


def test_polling_the_embedded_broker(broker, tmp_path):
    topic = f"orders-{uuid.uuid4().hex[:6]}"
    broker.create_topics([topic], 3)
    out = tmp_path / "metadata.jsonl"
    r = cli("tap", "metadata", "--poll", broker.bootstrap, "--polls", "3", "--interval-s", "0.2",
            "--cluster", "lab", "--to", str(out))
    assert r.returncode == 0, r.stderr
    assert "3 polls" in r.stderr
    events = [json.loads(x) for x in out.read_text().splitlines()]
    ours = [e for e in events if e.get("topic") == topic]
    leaders = sorted((e["partition"], e["leader_epoch"], e["replicas"] == e["isr"]) for e in ours
                     if e["type"] == "leader")
    assert leaders == [(0, 0, True), (1, 0, True), (2, 0, True)]  # once each: no change after
    assert sorted(e["partition"] for e in ours if e["type"] == "isr") == [0, 1, 2]
    brokers = [(e["state"]) for e in events if e["type"] == "broker"]
    assert brokers == ["registered", "unfenced"]
    assert all(e["cluster"] == "lab" for e in events)
    # the events are valid input: replay accepts every one of them
    r = cli("replay", str(out), "--no-state")
    assert r.returncode == 0, r.stderr
    assert f"{len(events)} events read, {len(events)} accepted" in r.stderr, r.stderr


def test_polling_a_cluster_that_is_not_there_is_one_line(tmp_path):
    r = cli("tap", "metadata", "--poll", "127.0.0.1:1", "--polls", "1",
            "--to", str(tmp_path / "x.jsonl"))
    assert r.returncode != 0 and r.stderr.startswith("isr tap metadata: --poll 127.0.0.1:1: "), \
        r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_a_tap_writes_to_kafka_keyed_by_partition_and_names_topic_ids_from_the_cluster(
        broker, tmp_path):
    """`--to kafka://TOPIC`: every event once, keyed `topic/partition` (a
    session FETCH by its leader, `leader/<id>`); a FetchRequest v13+ topic id named by asking the cluster (`--topic-ids
    BOOTSTRAP`)."""
    name = f"orders-{uuid.uuid4().hex[:6]}"
    broker.create_topics([name], 1)
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    topic_id = next(kafka_topic_id(str(t["topic_id"])) for t in admin.describe_topics([name]))
    admin.close()
    log = tmp_path / "kafka-request.log"
    log.write_text("".join(line.replace(TOPIC_ID, topic_id) for line in
                           follower_outage(1_700_000_000_000, version=13, seconds=3).request_log))
    out_topic = f"tap-{uuid.uuid4().hex[:6]}"
    r = cli("tap", "request-log", str(log), "--broker", "1", "--topic-ids", broker.bootstrap,
            "--to", f"kafka://{out_topic}", "--set", f"kafka.bootstrap_servers={broker.bootstrap}")
    assert r.returncode == 0, r.stderr
    written = int(r.stderr.split(" events written")[0].split(", ")[-1].replace(",", ""))
    conf = {"bootstrap.servers": broker.bootstrap}
    msgs = list(read_to_end(conf, {tp: 0 for tp in topic_partitions(conf, [out_topic])}))
    assert written > 10 and len(msgs) == written
    events = [json.loads(m.value()) for m in msgs]
    sessions = [(m, e) for m, e in zip(msgs, events) if e["type"] == "fetch_session"]
    others = [(m, e) for m, e in zip(msgs, events) if e["type"] != "fetch_session"]
    assert sessions and others  # session FETCHes (the default grain) and appends
    assert {e["topic"] for _m, e in others} == {name}
    assert {p["topic"] for _m, e in sessions for p in e["partitions"]} == {name}
    assert {m.key() for m, _e in others} == {f"{name}/0".encode()}
    assert {m.key() for m, _e in sessions} == {b"leader/1"}  # the leader's view
