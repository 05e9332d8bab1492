"""Spark's own Kafka source (input.source = "kafka": spark-sql-kafka-0-10 at
exactly pyspark's Spark version, resolved by scripts/spark-kafka-jars) on the
real Apache Kafka cluster: the same decisions as the Python source and as
`isr replay` of the same events; and the security settings reaching both
its Java client and our Python clients on the cluster's SASL_PLAINTEXT
listener (isr/kafka/cluster.py, sasl_listener)."""

from __future__ import annotations

import uuid

import pytest
import workload
from conftest import SASL_USERS
from workload import assert_outputs_equal_replay, records

from isr.config import ConfigError
from isr.kafka.client import ensure_topics
from isr.pipeline.streaming import run_to_kafka
from isr.stream import job
from isr.stream.connector import missing_message

pytestmark = [pytest.mark.integration, pytest.mark.kafka]


@pytest.fixture(scope="module")
def replayed(tmp_path_factory):
    return workload.replayed_outputs(tmp_path_factory.mktemp("replay"))


def input_topic(kafka, name: str) -> str:
    """Two partitions holding the workload, written over PLAINTEXT."""
    topic = f"{name}.in"
    ensure_topics({"bootstrap.servers": kafka.bootstrap}, [topic], 2, 3)
    workload.produce(kafka.bootstrap, topic, workload.lines())
    return topic


def settings(bootstrap: str, tmp_path, topic: str, prefix: str, *extra: str):
    return workload.job_settings(bootstrap, tmp_path, workload.BASE, f'input.topics=["{topic}"]',
                                 *extra, prefix=prefix, checkpoint=f"{prefix}-checkpoint")


def run(spark, s):
    query = run_to_kafka(s, spark=spark, trigger={"availableNow": True})
    query.awaitTermination()
    return query


def outputs(kafka, prefix: str) -> dict:
    """Everything the job wrote; the last state of each partition."""
    out = {kind: sorted(records(kafka, f"{prefix}.{kind}"), key=lambda d: d.get("id", ""))
           for kind in ("changes", "alerts")}
    out["dead"] = sorted((d["source"], d["reason"]) for d in records(kafka, f"{prefix}.dead"))
    out["state"] = {(s["topic"], s["partition"]): s for s in records(kafka, f"{prefix}.state")}
    return out


def test_sparks_kafka_source_decides_as_the_python_source_and_replay(
        kafka, spark, spark_kafka_jars, replayed, tmp_path):
    assert spark_kafka_jars, missing_message()
    name = f"sk{uuid.uuid4().hex[:6]}"
    topic = input_topic(kafka, name)
    written = {}
    for source in ("python", "kafka"):
        prefix = f"{name}-{source}"
        query = run(spark, settings(kafka.bootstrap, tmp_path, topic, prefix,
                                    f"input.source={source}"))
        described = query.lastProgress["sources"][0]["description"]
        # Spark's own connector really read it (KafkaV2[Subscribe[...]]).
        assert described.startswith("KafkaV2") == (source == "kafka"), described
        assert_outputs_equal_replay(kafka, prefix, replayed)
        written[source] = outputs(kafka, prefix)
    assert written["kafka"] == written["python"]
    assert len(written["kafka"]["state"]) == 4


def sasl_settings(kafka, tmp_path, topic: str, prefix: str, monkeypatch, password: str):
    (user, _), = SASL_USERS.items()
    monkeypatch.setenv("ISR_KAFKA_SASL_PASSWORD", password)
    return settings(kafka.sasl_bootstrap, tmp_path, topic, prefix, "input.source=kafka",
                    "kafka.security_protocol=SASL_PLAINTEXT", "kafka.sasl_mechanism=PLAIN",
                    f"kafka.sasl_username={user}", "kafka.connect_timeout_s=5")


def test_sasl_settings_reach_sparks_java_client_and_our_python_clients(
        kafka, spark, spark_kafka_jars, replayed, tmp_path, monkeypatch, capsys):
    """On the SASL_PLAINTEXT listener (PLAIN): a wrong password is one clear
    line from our clients (librdkafka's names: sasl.username/password) and
    from Spark's source (the Java client's: sasl.jaas.config); the right one
    reads with Spark's source and writes with our sink, as replay decides."""
    from isr.preflight import kafka_reachable
    from isr.stream.running import run_until_stopped

    assert spark_kafka_jars, missing_message()
    name = f"ss{uuid.uuid4().hex[:6]}"
    topic = input_topic(kafka, name)

    wrong = sasl_settings(kafka, tmp_path, topic, f"{name}-wrong", monkeypatch, "not-it")
    with pytest.raises(ConfigError) as refused:
        kafka_reachable(wrong)  # what `isr run` checks first, with our client
    line = str(refused.value)
    assert "\n" not in line and line.startswith(f"kafka: {kafka.sasl_bootstrap} refused the "
                                                 "login (") and "Authentication failed" in line, line
    # Spark's source alone (the check above would stop `isr run` first).
    query = job.start(spark, wrong, lambda _batch, _records: None,
                      trigger={"availableNow": True})
    assert run_until_stopped(query, "isr run") == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("isr run: the job stopped: "), err
    assert "Kafka refused the SASL login" in err, err

    right = sasl_settings(kafka, tmp_path, topic, f"{name}-right", monkeypatch,
                          SASL_USERS["isr"])
    assert kafka_reachable(right)["sasl.password"] == SASL_USERS["isr"]
    assert job.source_options(right)["kafka.sasl.jaas.config"].startswith(
        "org.apache.kafka.common.security.plain.PlainLoginModule required username=\"isr\"")
    query = run(spark, right)
    assert query.lastProgress["sources"][0]["description"].startswith("KafkaV2")
    assert_outputs_equal_replay(kafka, f"{name}-right", replayed)
