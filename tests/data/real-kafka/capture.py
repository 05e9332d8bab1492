"""Capture what a real Kafka cluster writes during a follower pause, as the
fixtures of tests/test_real_kafka_fixtures.py (README.md next to this file).

    PYTHONPATH=. .venv/bin/python tests/data/real-kafka/capture.py tests/data/real-kafka/4.4.0
    PYTHONPATH=. .venv/bin/python tests/data/real-kafka/capture.py tests/data/real-kafka/4.4.0/kill-9 kill
    PYTHONPATH=. .venv/bin/python tests/data/real-kafka/capture.py tests/data/real-kafka/4.4.0/controlled-shutdown term

Starts the project's cluster (isr/kafka/cluster.py; ISR_KAFKA_PORT_BASE),
creates `orders` (3 partitions) and `idle` (1 partition, never written), both
RF 3 with min.insync.replicas=2, produces to `orders` with acks=all, and
- pause (default): pauses broker 3 (SIGSTOP) for 2.5 x replica.lag.time.max.ms
  and resumes it (SIGCONT);
- kill: kills broker 2 with SIGKILL, waits until the controller fenced it and
  moved its leadership, restarts it and waits until it is back in every ISR;
- term: stops broker 1 with SIGTERM (controlled shutdown), restarts it and
  waits until it is back in every ISR;
then keeps each node's log lines from the topics' creation on: the brokers'
request logs (follower FETCH lines, and the first few others), server.log,
state-change.log, the controller's controller.log, and the KRaft metadata log
through DumpLogSegments with and without --skip-record-metadata.
"""

from __future__ import annotations

import json
import sys
import tempfile
import threading
import time
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from isr.kafka.cluster import (BROKER_IDS, CONTROLLER_ID, ClusterConfig, KafkaCluster,
                               kafka_version, node_name)

PAUSED, KILLED, TERMINATED = 3, 2, 1
OTHER_REQUESTS_KEPT = 5  # per broker: enough to show the tap skipping them


def log4j_ms(line: str) -> int | None:
    """The epoch ms of a `[yyyy-MM-dd HH:mm:ss,SSS]` line (the cluster logs in UTC here)."""
    from datetime import datetime, timezone

    if not line.startswith("[") or len(line) < 25:
        return None
    try:
        dt = datetime.strptime(line[1:24], "%Y-%m-%d %H:%M:%S,%f").replace(tzinfo=timezone.utc)
    except ValueError:
        return None
    return int(dt.timestamp() * 1000)


def excerpt(src: Path, since_ms: int, requests: bool = False) -> str:
    """The lines of `src` from `since_ms` on; for a request log only the
    followers' FETCH lines and the first few others."""
    out, others, keep = [], 0, False
    for line in src.read_text().splitlines():
        ts = log4j_ms(line)
        if ts is not None:
            keep = ts >= since_ms
        if not keep:
            continue
        if requests and ts is not None:
            follower_fetch = ('"requestApiKeyName":"FETCH"' in line
                              and '"replicaState":{"replicaId":' in line)
            if not follower_fetch:
                others += 1
                if others > OTHER_REQUESTS_KEPT:
                    continue
        out.append(line)
    return "\n".join(out) + "\n"


def main(outdir: Path, fault: str = "pause") -> None:
    workdir = Path(tempfile.mkdtemp(prefix="kafka-capture-"))
    cluster = KafkaCluster(ClusterConfig.from_env(dir=workdir, detach=False))
    cluster.start()
    try:
        run = capture(cluster, fault)
        outdir.mkdir(parents=True, exist_ok=True)
        since = run["topics_created_ms"] - 1000
        for broker in BROKER_IDS:
            for name in ("server.log", "state-change.log", "kafka-request.log"):
                text = excerpt(cluster.log(broker, name), since, requests=name == "kafka-request.log")
                (outdir / f"{node_name(broker)}-{name}").write_text(text)
        (outdir / "controller-controller.log").write_text(
            excerpt(cluster.log(CONTROLLER_ID, "controller.log"), since))
        (outdir / "metadata.dump").write_text(cluster.dump_metadata())
        (outdir / "metadata-skip-record-metadata.dump").write_text(
            cluster.dump_metadata(skip_record_metadata=True))
        run["kafka_version"] = kafka_version()
        run["replica_lag_time_max_ms"] = cluster.conf.replica_lag_time_max_ms
        run["broker_session_timeout_ms"] = cluster.conf.broker_session_timeout_ms
        (outdir / "run.json").write_text(json.dumps(run, indent=1) + "\n")
    finally:
        cluster.stop(quiet=True)


def isr_sizes(cluster: KafkaCluster) -> list[tuple[int, int]]:
    md = AdminClient({"bootstrap.servers": cluster.bootstrap, "log_level": 0}).list_topics(
        "orders", timeout=10)
    return [(p.leader, len(p.isrs)) for p in md.topics["orders"].partitions.values()]


def wait_for(predicate, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"capture: the cluster did not get there in {seconds} s")
        time.sleep(0.25)


def fault_pause(cluster: KafkaCluster, run: dict) -> None:
    run["paused_broker"] = PAUSED
    run["pause_ms"] = int(time.time() * 1000)
    cluster.pause(PAUSED)
    time.sleep(cluster.conf.replica_lag_time_max_ms * 2.5 / 1000)
    cluster.resume(PAUSED)
    run["resume_ms"] = int(time.time() * 1000)


def fault_kill(cluster: KafkaCluster, run: dict) -> None:
    run["killed_broker"] = KILLED
    run["kill_ms"] = int(time.time() * 1000)
    cluster.kill(KILLED)
    wait_for(lambda: all(leader != KILLED and size == 2 for leader, size in isr_sizes(cluster)),
             cluster.conf.broker_session_timeout_ms / 1000 + 20)
    run["restart_ms"] = int(time.time() * 1000)
    cluster.restart_node(KILLED)
    wait_for(lambda: all(size == 3 for _leader, size in isr_sizes(cluster)), 60)


def fault_term(cluster: KafkaCluster, run: dict) -> None:
    run["stopped_broker"] = TERMINATED
    run["sigterm_ms"] = int(time.time() * 1000)
    cluster.stop_node(TERMINATED)
    run["stopped_ms"] = int(time.time() * 1000)
    cluster.restart_node(TERMINATED)
    run["restart_ms"] = int(time.time() * 1000)
    wait_for(lambda: all(size == 3 for _leader, size in isr_sizes(cluster)), 60)


FAULTS = {"pause": fault_pause, "kill": fault_kill, "term": fault_term}


def capture(cluster: KafkaCluster, fault: str) -> dict:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    topics = [NewTopic("orders", 3, 3, config={"min.insync.replicas": "2"}),
              NewTopic("idle", 1, 3, config={"min.insync.replicas": "2"})]
    run = {"topics_created_ms": int(time.time() * 1000)}
    for future in admin.create_topics(topics).values():
        future.result(timeout=30)
    time.sleep(2)
    stop = threading.Event()
    counts = {"acked": 0, "failed": 0}

    def delivered(err, _msg):
        counts["failed" if err else "acked"] += 1

    def produce():
        p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 5,
                      "log_level": 0})  # a stopped broker's refused connections
        n = 0
        while not stop.is_set():
            p.produce("orders", key=str(n % 30).encode(), value=b"x" * 100,
                      on_delivery=delivered)
            n += 1
            p.poll(0)
            time.sleep(0.1)  # 10 records a second: short request logs
        p.flush(30)

    producer = threading.Thread(target=produce)
    producer.start()
    time.sleep(4)
    run["fault"] = fault
    FAULTS[fault](cluster, run)
    time.sleep(6)
    stop.set()
    producer.join()
    time.sleep(1)
    run["end_ms"] = int(time.time() * 1000)
    run.update(counts)
    return run


if __name__ == "__main__":
    main(Path(sys.argv[1]), *sys.argv[2:3])
