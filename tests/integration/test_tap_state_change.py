"""`isr tap state-change --replicas BOOTSTRAP` against the embedded broker over
TCP: a leader line whose partition no line gave the replicas of gets them
from the cluster's Metadata and is a leader event."""

from __future__ import annotations

import json
import uuid

from helpers import cli
from kafka.admin import KafkaAdminClient


def test_a_leader_line_gets_its_replicas_from_the_cluster(broker, tmp_path):
    topic = f"orders-{uuid.uuid4().hex[:6]}"
    broker.create_topics([topic], 1)
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    node = admin.describe_topics([topic])[0]["partitions"][0]["leader_id"]
    admin.close()
    log = tmp_path / "state-change.log"
    log.write_text(  # 4.4.0's wording (tests/data/real-kafka/4.4.0)
        f"[2026-11-25 18:00:25,022] INFO [Broker id={node}] Leader {topic}-0 with topic id "
        "Some(ajTRq1KmSLSTgCjn_TZn7g) starts at leader epoch 0 from offset 0 with partition "
        f"epoch 0, high watermark 0, ISR [{node}], adding replicas [] and removing replicas [] . "
        "Previous leader None and previous leader epoch was -1. (state.change.logger)\n")
    out = tmp_path / "state.jsonl"
    r = cli("tap", "state-change", str(log), "--replicas", broker.bootstrap, "--to", str(out))
    assert r.returncode == 0, r.stderr
    events = [json.loads(x) for x in out.read_text().splitlines()]
    assert [(e["type"], e.get("replicas")) for e in events] == [("leader", [node]), ("isr", None)]
