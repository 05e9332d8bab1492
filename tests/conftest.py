"""Shared fixtures: one embedded broker and one local Spark session per run."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from isr.stream.jvm import QUICK_START_JVM

sys.path.insert(0, str(Path(__file__).resolve().parent))  # `import helpers`
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
os.environ.setdefault("ISR_SPARK_LOG_LEVEL", "ERROR")
# Every JVM Spark starts for a test (pyspark's sessions, spark-submit's
# drivers) with the quick-start options: the tests' runs are short.
os.environ.setdefault("SPARK_SUBMIT_OPTS", QUICK_START_JVM)


@pytest.fixture(scope="session")
def broker():
    from isr.kafka.embedded import EmbeddedBroker

    with EmbeddedBroker() as b:
        yield b


@pytest.fixture(scope="session")
def spark_kafka_jars() -> list[str]:
    """Spark's Kafka connector at pyspark's Spark version, resolved once by
    scripts/spark-kafka-jars (Maven Central, then cached); [] when it could
    not be (a test of input.source = "kafka" then fails with the reason)."""
    import shutil
    import subprocess

    from isr.stream.connector import kafka_jars

    script = Path(__file__).resolve().parents[1] / "scripts" / "spark-kafka-jars"
    if not kafka_jars() and shutil.which("mvn"):
        subprocess.run([str(script)], env={**os.environ, "PYTHON": sys.executable},
                       capture_output=True, timeout=600)
    return kafka_jars()


@pytest.fixture(scope="session")
def spark(spark_kafka_jars):
    from isr.config import Settings
    from isr.stream.job import spark_session

    # input.source = "kafka": the session also gets Spark's Kafka connector
    # (spark.jars), so one session runs both sources.
    settings = Settings.model_validate({"input": {"source": "kafka"}})
    # it writes the driver's class archive at the end if there is none (its
    # streaming queries load the classes every later session maps)
    session = spark_session(settings, "local[2]", "isr-tests", write_archive=True)
    yield session
    session.stop()


# The test cluster's SASL/PLAIN user (isr/kafka/cluster.py, sasl_listener).
SASL_USERS = {"isr": "isr-test-secret"}


def kafka_test_config():
    """The tests' cluster: its own ports and directory, so a cluster started
    with scripts/kafka-cluster (the demo's) can run beside it; its nodes die
    with the test process (detach=False)."""
    from isr.kafka.cluster import REPO, ClusterConfig

    return ClusterConfig.from_env(
        dir=Path(os.environ.get("ISR_KAFKA_TEST_DIR", REPO / "tmp" / "kafka-test-cluster")),
        port_base=int(os.environ.get("ISR_KAFKA_TEST_PORT_BASE", "19250")),
        jmx_exporter=True,  # the tests compare the brokers' own counters with ours
        sasl_users=SASL_USERS,  # a SASL_PLAINTEXT listener beside PLAINTEXT (test_spark_kafka)
        detach=False)


@pytest.fixture(scope="session")
def kafka_cluster():
    """A real Apache Kafka cluster (1 KRaft controller + 3 brokers, docs/real-kafka.md),
    one per test session. Skipped only when its jars are not cached and Maven
    Central is unreachable; any other reason it cannot start is a failure."""
    from isr.kafka.cluster import KafkaCluster
    from isr.kafka.jars import MavenUnreachable

    cluster = KafkaCluster(kafka_test_config())
    try:
        cluster.start()
    except MavenUnreachable as exc:
        pytest.skip(f"real Kafka cluster: {exc}")
    try:
        yield cluster
    finally:
        cluster.stop(quiet=True)


@pytest.fixture
def kafka(kafka_cluster):
    """The session's cluster with every node up and running at the start of
    the test (one a test paused or stopped is resumed or restarted); a node
    that died on its own during the test fails it with its server.log tail.
    The test starts once every ISR is full again, so the ISR changes and the
    brokers' counters it sees are its own, not an earlier test's recovery."""
    for node in kafka_cluster.nodes:
        if kafka_cluster.expected.get(node) == "paused":
            kafka_cluster.resume(node)
        elif kafka_cluster.pid(node) is None:
            kafka_cluster.restart_node(node)
    kafka_cluster.wait_calm()
    before = set(kafka_cluster.topics())
    yield kafka_cluster
    kafka_cluster.check()
    # The test's topics go: every follower fetches each partition it has
    # (one request-log line and one event each, for every later test's taps
    # and job), and their replication would cost the next tests CPU.
    if all(kafka_cluster.expected.get(n) == "running" for n in kafka_cluster.nodes):
        kafka_cluster.delete_topics(set(kafka_cluster.topics()) - before)


@pytest.fixture(scope="session")
def wheel(tmp_path_factory) -> Path:
    """The wheel `pip wheel` builds from this checkout (what users ship)."""
    import subprocess

    out = tmp_path_factory.mktemp("wheel")
    root = Path(__file__).resolve().parents[1]
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-v", "-w", str(out),
                            str(root)], capture_output=True, text=True)
    assert built.returncode == 0, built.stderr[-3000:]
    (path,) = out.glob("isr_monitor-*.whl")
    path.with_suffix(".log").write_text(built.stdout + built.stderr)
    return path


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory):
    """A standalone master and 2 workers (1 core each) on 127.0.0.1 (tests/cluster.py);
    stopped after the run, also when tests failed."""
    from cluster import StandaloneCluster

    with StandaloneCluster(tmp_path_factory.mktemp("spark-cluster"), workers=2) as c:
        yield c


@pytest.fixture(scope="session")
def python_without_isr(tmp_path_factory) -> Path:
    """An interpreter with the project's dependencies but not `isr` (the executors')."""
    from cluster import python_without_isr

    return python_without_isr(tmp_path_factory.mktemp("deps-env"))
