"""scripts/kafka-cluster's failures, each one line saying what to do
(docs/real-kafka.md). No cluster is started here: each case fails before."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from isr.kafka import cluster as kc
from isr.kafka import jars

SCRIPT = kc.REPO / "scripts" / "kafka-cluster"


def run_script(*args: str, env: dict) -> subprocess.CompletedProcess:
    full = {**os.environ, "PYTHON": sys.executable, **env}
    return subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, env=full,
                          timeout=120)


def one_line(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 1, done
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    return lines[0]


def free_port_base(span: int = 20) -> int:
    """A base with base .. base + span free now: the script checks its
    ports in order, so any other port in use would be named first (a CI
    machine once held the controller's port, base + 0)."""
    for _ in range(50):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            base = probe.getsockname()[1] - span
        if base > 1024 and all(port_is_free(base + i) for i in range(span + 1)):
            return base
    pytest.fail("no 21 free consecutive ports on 127.0.0.1")


def port_is_free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def test_port_in_use_names_the_port_and_the_way_out(tmp_path):
    base = free_port_base()
    port = base + 2  # broker 2 listens on base + 2
    with socket.socket() as held:
        held.bind(("127.0.0.1", port))
        held.listen()
        done = run_script("start", env={"ISR_KAFKA_DIR": str(tmp_path),
                                        "ISR_KAFKA_PORT_BASE": str(base)})
    line = one_line(done)
    assert line.startswith("kafka-cluster start: port ")
    assert f"port {port} (broker-2) is in use" in line and "ISR_KAFKA_PORT_BASE" in line


def test_no_java_says_how_to_install_it(tmp_path):
    done = run_script("start", env={"ISR_KAFKA_DIR": str(tmp_path),
                                    "JAVA_HOME": str(tmp_path / "no-java")})
    assert "Java 17+ is needed" in one_line(done)


def test_a_corrupt_jar_cache_is_named_with_the_remedy(tmp_path, monkeypatch):
    monkeypatch.setenv("ISR_KAFKA_CACHE", str(tmp_path))
    libs = tmp_path / f"kafka-{jars.kafka_version()}" / "libs"
    libs.mkdir(parents=True)
    broken = b"PK\x03\x04 a jar cut short"
    (libs / "kafka-clients.jar").write_bytes(broken)
    (libs / "manifest.json").write_text(json.dumps(
        {"pom": jars._pom_digest(), "jars": {"kafka-clients.jar": len(broken)}}))
    with pytest.raises(jars.ClusterError, match=r"is corrupt \(kafka-clients.jar is not a "
                                              r"readable jar\): remove it \(rm -rf "):
        jars.resolve_jars()


@pytest.mark.skipif(shutil.which("mvn") is None, reason="needs Maven (mvn)")
def test_maven_unreachable_is_its_own_error(tmp_path, monkeypatch):
    """Real mvn, pointed at a mirror nobody listens on and an empty local
    repository: the one error the real-cluster tests skip on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    settings = tmp_path / "settings.xml"
    settings.write_text(
        "<settings><mirrors><mirror><id>nowhere</id><mirrorOf>*</mirrorOf>"
        f"<url>http://127.0.0.1:{closed}/maven2</url></mirror></mirrors></settings>")
    monkeypatch.setenv("ISR_KAFKA_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("ISR_KAFKA_MVN_ARGS",
                       f"-s {settings} -Dmaven.repo.local={tmp_path / 'm2'}")
    with pytest.raises(jars.MavenUnreachable, match="Maven Central is unreachable"):
        jars.resolve_jars(quiet=True)


def test_broker_properties_follow_the_docs():
    conf = kc.ClusterConfig(dir=Path("/x"), port_base=19250, replica_lag_time_max_ms=4000)
    props = dict(line.split("=", 1) for line in
                 kc.server_properties(conf, 2, Path("/x/broker-2")).splitlines())
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:19252"
    assert props["controller.quorum.voters"] == "0@127.0.0.1:19250"
    assert props["replica.lag.time.max.ms"] == "4000"
    assert props["num.network.threads"] == props["num.io.threads"] == "2"
    assert int(props["log.cleaner.dedupe.buffer.size"]) <= 8 << 20
    controller = kc.server_properties(conf, 0, Path("/x/controller"))
    assert "process.roles=controller" in controller and "broker.session.timeout.ms=" in controller


def test_a_sasl_listener_is_added_only_when_users_are_given():
    conf = kc.ClusterConfig(dir=Path("/x"), port_base=19250, sasl_users={"isr": "pw"})
    props = dict(line.split("=", 1) for line in
                 kc.server_properties(conf, 2, Path("/x/broker-2")).splitlines())
    assert props["listeners"] == ("PLAINTEXT://127.0.0.1:19252,"
                                  "SASL_PLAINTEXT://127.0.0.1:19257")
    assert props["advertised.listeners"] == props["listeners"]
    assert props["inter.broker.listener.name"] == "PLAINTEXT"
    assert props["sasl.enabled.mechanisms"] == "PLAIN"
    assert props["listener.name.sasl_plaintext.plain.sasl.jaas.config"] == (
        'org.apache.kafka.common.security.plain.PlainLoginModule required user_isr="pw";')
    assert conf.sasl_bootstrap == "127.0.0.1:19256,127.0.0.1:19257,127.0.0.1:19258"
    assert (19257, "broker-2's SASL listener") in conf.ports()
    plain = kc.ClusterConfig(dir=Path("/x"), port_base=19250)
    assert "SASL" not in kc.server_properties(plain, 2, Path("/x/broker-2"))


@pytest.mark.parametrize("jmx_exporter", [True, False])
def test_no_node_is_asked_to_write_the_class_archive_with_a_java_agent(
        tmp_path, monkeypatch, jmx_exporter):
    """A JVM started with -XX:ArchiveClassesAtExit and a -javaagent refuses to
    start (Java 17), so on a machine without the nodes' archive yet the
    brokers, which run the JMX exporter's agent, died at their first start.
    Exactly one node writes it, and never one with the agent."""
    from isr import jvmarchive

    monkeypatch.setenv("ISR_KAFKA_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv(jvmarchive.SWITCH, raising=False)
    libs = tmp_path / "libs"
    (libs / "agent").mkdir(parents=True)
    (libs / "agent" / f"{jars.JMX_AGENT}-1.0.jar").write_bytes(b"")
    commands: dict = {}

    class Started:
        pid = 4242

    def popen(cmd, **_kw):
        commands[cmd[-1]] = cmd
        return Started()

    monkeypatch.setattr(kc.subprocess, "Popen", popen)
    cluster = kc.KafkaCluster(kc.ClusterConfig(dir=tmp_path / "cluster",
                                               jmx_exporter=jmx_exporter))
    cluster.libs = libs
    for node in cluster.nodes:
        (cluster.node_dir(node) / "logs").mkdir(parents=True)
        cluster.start_node(node, java=sys.executable)  # any real file: the key stats it
    writers = [c for c in commands.values() if any(a.startswith(jvmarchive.WRITE) for a in c)]
    assert len(writers) == 1
    assert not any(a.startswith("-javaagent:") for a in writers[0]), writers[0]
    agents = sum(any(a.startswith("-javaagent:") for a in c) for c in commands.values())
    assert agents == (3 if jmx_exporter else 0)
