"""`isr tap metadata --poll` against the embedded broker over TCP: Metadata
and DescribeCluster become broker, leader and isr events (Tansu reports
ISR = replicas and leader epoch 0), and a poll that sees no change writes
nothing."""

from __future__ import annotations

import json
import uuid

from helpers import cli


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
    assert r.returncode != 0 and r.stderr.startswith("isr: "), r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
