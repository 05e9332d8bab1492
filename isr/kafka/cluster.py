"""A real Apache Kafka cluster on this machine, for the tests and the demo
(docs/real-kafka.md): one KRaft controller and three brokers on 127.0.0.1,
from Kafka's jars on Maven Central (jvm/kafka/pom.xml), each node with its
own data dir and log files (server.log, state-change.log, controller.log,
kafka-request.log with the request logger at DEBUG: jvm/kafka/log4j2.xml).

    cluster = KafkaCluster(ClusterConfig.from_env())
    cluster.start()          # resolves the jars once, formats, starts, waits
    cluster.pause(2); ...; cluster.resume(2)
    cluster.stop()

`scripts/kafka-cluster start|stop|status|logs` is this module's command line.
Every failure is a `ClusterError` whose text is one line saying what to do.
"""

from __future__ import annotations

import argparse
import atexit
import base64
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Optional

from isr import jvmarchive
from isr.kafka.jars import (JMX_AGENT, JVM_DIR, REPO, ClusterError, java_binary,
                            kafka_version, resolve_jars)
from isr.signals import pid_alive

LOG4J2 = JVM_DIR / "log4j2.xml"
TOOLS_LOG4J2 = JVM_DIR / "tools-log4j2.xml"
JMX_EXPORTER_CONFIG = JVM_DIR / "jmx-exporter.yaml"
CONTROLLER_ID = 0
BROKER_IDS = (1, 2, 3)


class NodeDied(ClusterError):
    """A node that should run is gone; the text ends with its server.log tail."""



def random_cluster_id() -> str:
    """Kafka's Uuid.toString: url-safe base64 without padding (not starting
    with '-', which its command lines would read as an option)."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not text.startswith("-"):
            return text


# ------------------------------------------------------------------ config
@dataclass
class ClusterConfig:
    """Where and how: every field has an environment variable (from_env)."""
    dir: Path = REPO / "tmp" / "kafka-cluster"   # ISR_KAFKA_DIR
    port_base: int = 19200                         # ISR_KAFKA_PORT_BASE
    replica_lag_time_max_ms: int = 3000            # ISR_KAFKA_REPLICA_LAG_MS
    # The controller fences a broker silent this long: above a SIGSTOP pause
    # of a few lag times, so a pause is a lag shrink, not a fencing.
    broker_session_timeout_ms: int = 12000         # ISR_KAFKA_SESSION_TIMEOUT_MS
    broker_heap: str = "-Xms64m -Xmx256m"           # ISR_KAFKA_BROKER_HEAP
    controller_heap: str = "-Xms32m -Xmx192m"       # ISR_KAFKA_CONTROLLER_HEAP
    # The Prometheus JMX exporter on each broker, port BASE + 10 + id
    jmx_exporter: bool = True                      # ISR_KAFKA_JMX_EXPORTER=0: off
    detach: bool = True  # nodes outlive this process (the script); False: die with it
    extra: dict = field(default_factory=dict)      # more broker properties
    # SASL/PLAIN users (name -> password): each broker also listens with
    # SASL_PLAINTEXT on port BASE + 5 + id (sasl_port), for the security tests.
    sasl_users: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.dir = Path(self.dir)

    @classmethod
    def from_env(cls, **overrides) -> "ClusterConfig":
        env = os.environ
        conf = cls(**overrides)
        if "dir" not in overrides and env.get("ISR_KAFKA_DIR"):
            conf.dir = Path(env["ISR_KAFKA_DIR"])
        for name, var in (("port_base", "ISR_KAFKA_PORT_BASE"),
                          ("replica_lag_time_max_ms", "ISR_KAFKA_REPLICA_LAG_MS"),
                          ("broker_session_timeout_ms", "ISR_KAFKA_SESSION_TIMEOUT_MS")):
            if name not in overrides and env.get(var):
                try:
                    setattr(conf, name, int(env[var]))
                except ValueError:
                    raise ClusterError(f"{var}={env[var]!r} is not a number") from None
        if "jmx_exporter" not in overrides and env.get("ISR_KAFKA_JMX_EXPORTER"):
            conf.jmx_exporter = env["ISR_KAFKA_JMX_EXPORTER"].lower() not in ("0", "false", "no")
        for name, var in (("broker_heap", "ISR_KAFKA_BROKER_HEAP"),
                          ("controller_heap", "ISR_KAFKA_CONTROLLER_HEAP")):
            if name not in overrides and env.get(var):
                setattr(conf, name, env[var])
        conf.dir = Path(conf.dir).resolve()
        return conf

    def port(self, node: int) -> int:
        return self.port_base + node  # controller 0 -> base, broker N -> base + N

    def metrics_port(self, broker: int) -> int:
        return self.port_base + 10 + broker

    def sasl_port(self, broker: int) -> int:
        return self.port_base + 5 + broker

    def ports(self) -> list[tuple[int, str]]:
        out = [(self.port(n), node_name(n)) for n in (CONTROLLER_ID, *BROKER_IDS)]
        if self.sasl_users:
            out += [(self.sasl_port(b), f"{node_name(b)}'s SASL listener") for b in BROKER_IDS]
        if self.jmx_exporter:
            out += [(self.metrics_port(b), f"{node_name(b)}'s JMX exporter") for b in BROKER_IDS]
        return out

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{self.port(b)}" for b in BROKER_IDS)

    @property
    def sasl_bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{self.sasl_port(b)}" for b in BROKER_IDS)


def node_name(node: int) -> str:
    return "controller" if node == CONTROLLER_ID else f"broker-{node}"


def server_properties(conf: ClusterConfig, node: int, node_dir: Path) -> str:
    voters = f"{CONTROLLER_ID}@127.0.0.1:{conf.port(CONTROLLER_ID)}"
    common = {
        "node.id": node,
        "controller.quorum.voters": voters,
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": ("CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT"
                                           + (",SASL_PLAINTEXT:SASL_PLAINTEXT"
                                              if conf.sasl_users else "")),
        "log.dirs": node_dir / "data",
        # Small: 2 cores shared by four JVMs (docs/real-kafka.md).
        "num.network.threads": 2,
        "num.io.threads": 2,
        "background.threads": 2,
    }
    if node == CONTROLLER_ID:
        props = {**common, "process.roles": "controller",
                 "listeners": f"CONTROLLER://127.0.0.1:{conf.port(node)}",
                 "broker.session.timeout.ms": conf.broker_session_timeout_ms,
                 # New topics' defaults are the controller's in KRaft.
                 "default.replication.factor": 3,
                 "num.partitions": 3,
                 "min.insync.replicas": 2}
    else:
        props = {**common, "process.roles": "broker",
                 "listeners": f"PLAINTEXT://127.0.0.1:{conf.port(node)}",
                 "advertised.listeners": f"PLAINTEXT://127.0.0.1:{conf.port(node)}",
                 "inter.broker.listener.name": "PLAINTEXT",
                 "replica.lag.time.max.ms": conf.replica_lag_time_max_ms,
                 "min.insync.replicas": 2,
                 "offsets.topic.replication.factor": 3,
                 "offsets.topic.num.partitions": 3,
                 "transaction.state.log.replication.factor": 3,
                 "transaction.state.log.min.isr": 2,
                 "transaction.state.log.num.partitions": 3,
                 "group.initial.rebalance.delay.ms": 0,
                 "num.replica.fetchers": 1,
                 # The cleaner would take 128 MB of heap for its dedupe buffer.
                 "log.cleaner.dedupe.buffer.size": 4 * 1024 * 1024,
                 "log.cleaner.threads": 1,
                 **sasl_listener(conf, node),
                 **conf.extra}
    return "".join(f"{k}={v}\n" for k, v in props.items())


def sasl_listener(conf: ClusterConfig, broker: int) -> dict:
    """A second listener, SASL_PLAINTEXT with the PLAIN mechanism, whose users
    are conf.sasl_users (the broker side of PlainLoginModule: `user_NAME="PASSWORD"`,
    listener-prefixed as KIP-86 allows, so no JAAS file). The brokers keep
    talking to each other over PLAINTEXT."""
    if not conf.sasl_users:
        return {}
    plain = f"127.0.0.1:{conf.port(broker)}"
    sasl = f"127.0.0.1:{conf.sasl_port(broker)}"
    users = " ".join(f'user_{name}="{password}"' for name, password in conf.sasl_users.items())
    return {"listeners": f"PLAINTEXT://{plain},SASL_PLAINTEXT://{sasl}",
            "advertised.listeners": f"PLAINTEXT://{plain},SASL_PLAINTEXT://{sasl}",
            "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config":
                f"org.apache.kafka.common.security.plain.PlainLoginModule required {users};"}


JVM_FLAGS = [
    # Four JVMs on two shared cores: a small footprint matters more than peak
    # throughput (docs/real-kafka.md has the measured RSS).
    "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-XX:ReservedCodeCacheSize=64m",
    "-XX:MaxMetaspaceSize=128m", "-XX:MaxDirectMemorySize=128m", "-Xss512k",
    "-Djava.awt.headless=true",
    # log lines in UTC whatever the machine: the taps and fixtures assume it
    "-Duser.timezone=UTC",
]


def _die_with_parent() -> None:
    """Before exec, in a node we do not detach: SIGKILL when the process that
    started it dies, however it dies, so a killed test run leaves no broker."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def rss_bytes(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def tail(path: Path, lines: int = 20) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 64 * 1024))
            return "\n".join(f.read().decode(errors="replace").splitlines()[-lines:])
    except OSError:
        return f"({path} not written)"


def formatted_template(props: dict[int, str], cluster_dir: Path) -> Path:
    """Where the formatted data directories of this configuration are kept:
    keyed by Kafka's version and every node's server.properties (its own
    directory written as a placeholder, so any cluster directory shares it)."""
    import hashlib

    from isr.kafka.jars import cache_root

    key = hashlib.sha256(kafka_version().encode())
    for node in sorted(props):
        key.update(props[node].replace(str(cluster_dir), "{dir}").encode())
    return cache_root() / f"kafka-{kafka_version()}" / "formatted" / key.hexdigest()[:16]


def _save_template(template: Path, data_dirs: dict[int, Path], cluster_id: str) -> None:
    """Copy what StorageTool wrote; renamed into place whole (another run
    formatting the same configuration at the same time loses the race harmlessly)."""
    staging = template.with_name(f"{template.name}.{os.getpid()}.partial")
    shutil.rmtree(staging, ignore_errors=True)
    try:
        for node, data in data_dirs.items():
            shutil.copytree(data, staging / node_name(node))
        (staging / "cluster.id").write_text(cluster_id)
        os.replace(staging, template)
    except OSError:  # a cache we cannot write (or another run won): format next time too
        shutil.rmtree(staging, ignore_errors=True)


def class_archive(java: str) -> Path:
    """The nodes' class-data sharing archive (isr/jvmarchive.py), without its
    suffix: the classes a broker loads, mapped by every later JVM of this
    Java and these jars: a node's start takes half the CPU (measured: the
    cluster's 4 JVMs 22.9 CPU-seconds without, 12.0 with; docs/real-kafka.md).
    The first cluster stopped cleanly writes it; a JVM that cannot use it
    (another Java build) runs without."""
    from isr.kafka.jars import cache_root

    return jvmarchive.stem(cache_root() / f"kafka-{kafka_version()}", "classes", java,
                           " ".join(JVM_FLAGS))


ARCHIVE_WRITER = 1  # the node whose clean exit writes the archive (a broker: the most classes)


def _archive_written_by(pid: int) -> Optional[Path]:
    """The archive a node writes at its exit (its command line says), if any."""
    return jvmarchive.written_by(_cmdline(pid).split())


# ------------------------------------------------------------------ the cluster
class KafkaCluster:
    """The nodes' processes, found again through pid files in each node's
    directory (so `stop` works from another process, and a start finds the
    nodes a killed run left behind)."""

    def __init__(self, conf: Optional[ClusterConfig] = None) -> None:
        self.conf = conf or ClusterConfig.from_env()
        self.procs: dict[int, subprocess.Popen] = {}
        self.expected: dict[int, str] = {}  # node -> running | paused | stopped
        self.libs: Optional[Path] = None
        self._log_start: dict[int, int] = {}  # where each node's current run begins in server.log
        self.timings: dict[str, float] = {}  # the last start's phases, in seconds
        self._atexit = False

    # --------------------------------------------------------- paths
    @property
    def nodes(self) -> tuple[int, ...]:
        return (CONTROLLER_ID, *BROKER_IDS)

    @property
    def bootstrap(self) -> str:
        return self.conf.bootstrap

    @property
    def sasl_bootstrap(self) -> str:
        """The SASL_PLAINTEXT listeners (conf.sasl_users set)."""
        return self.conf.sasl_bootstrap

    def node_dir(self, node: int) -> Path:
        return self.conf.dir / node_name(node)

    def log(self, node: int, name: str = "server.log") -> Path:
        return self.node_dir(node) / "logs" / name

    def data_dir(self, node: int) -> Path:
        return self.node_dir(node) / "data"

    def metadata_segments(self, node: int = CONTROLLER_ID) -> list[Path]:
        return sorted((self.data_dir(node) / "__cluster_metadata-0").glob("*.log"))

    def _pid_file(self, node: int) -> Path:
        return self.node_dir(node) / "kafka.pid"

    def pid(self, node: int) -> Optional[int]:
        """The node's pid if it runs (and is ours: its command line names its config)."""
        try:
            pid = int(self._pid_file(node).read_text())
        except (OSError, ValueError):
            return None
        props = str(self.node_dir(node) / "server.properties")
        return pid if pid_alive(pid) and props in _cmdline(pid) else None

    def running(self) -> list[int]:
        return [n for n in self.nodes if self.pid(n) is not None]

    # --------------------------------------------------------- start
    def start(self, timeout_s: float = 120.0, fresh: bool = True,
              ready: bool = True) -> "KafkaCluster":
        """Format (fresh: after wiping the data) and start every node, then
        wait until each broker logged that it started and Metadata lists them
        (ready=False: only until each node's JVM writes its server.log)."""
        left = self.running()
        if left:
            if self.conf.detach:  # someone's cluster (the script's): not ours to wipe
                raise ClusterError(f"the cluster in {self.conf.dir} already runs "
                                   f"(pids {[self.pid(n) for n in left]}): "
                                   "scripts/kafka-cluster stop first")
            self.stop(quiet=True)  # a test run that was killed left these behind
        java = java_binary()
        self._check_ports()
        self.libs = resolve_jars()
        started = time.monotonic()
        if fresh or not all((self.data_dir(n) / "meta.properties").exists() for n in self.nodes):
            self._format(java)
        self.timings = {"format": time.monotonic() - started}
        if not self.conf.detach and not self._atexit:
            atexit.register(self.stop, quiet=True)
            self._atexit = True
        try:
            for node in self.nodes:
                self.start_node(node, java)
            if not ready:
                self._wait_logging(timeout_s - (time.monotonic() - started))
                return self
            self.timings["ready"] = self.wait_ready(timeout_s - (time.monotonic() - started))
        except BaseException:  # a half-started cluster is not left behind
            self.stop(quiet=True)
            raise
        return self

    def _check_ports(self) -> None:
        for port, what in self.conf.ports():
            with socket.socket() as s:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    raise ClusterError(
                        f"port {port} ({what}) is in use on 127.0.0.1: stop what "
                        "holds it or choose other ports with ISR_KAFKA_PORT_BASE") from None

    def _format(self, java: str) -> None:
        """Fresh node directories, formatted. StorageTool is four JVM starts
        (15 s of a loaded 2-core machine); its output depends only on the
        nodes' configuration, so the first format of a configuration is kept
        (formatted_template) and later starts copy it: a fresh, empty
        cluster, the same cluster id each time."""
        props = {}
        for node in self.nodes:
            d = self.node_dir(node)
            shutil.rmtree(d, ignore_errors=True)
            (d / "logs").mkdir(parents=True)
            props[node] = server_properties(self.conf, node, d)
            (d / "server.properties").write_text(props[node])
        template = formatted_template(props, self.conf.dir)
        if not (template / "cluster.id").exists():
            self._storage_format(java)
            _save_template(template, {n: self.data_dir(n) for n in self.nodes},
                           (self.conf.dir / "cluster.id").read_text())
            return
        for node in self.nodes:
            shutil.copytree(template / node_name(node), self.data_dir(node))
        shutil.copyfile(template / "cluster.id", self.conf.dir / "cluster.id")

    def _storage_format(self, java: str) -> None:
        cluster_id = random_cluster_id()
        procs = []
        for node in self.nodes:
            props = self.node_dir(node) / "server.properties"
            procs.append((node, subprocess.Popen(
                self._java(java, "kafka.tools.StorageTool", tool=True)
                + ["format", "-t", cluster_id, "-c", str(props)],
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)))
        for node, proc in procs:
            out, _ = proc.communicate(timeout=120)
            if proc.returncode != 0:
                raise ClusterError(f"formatting {node_name(node)} failed: "
                                   f"{out.strip().splitlines()[-1] if out.strip() else '?'}")
        (self.conf.dir / "cluster.id").write_text(cluster_id + "\n")

    def _java(self, java: str, main: str, tool: bool = False, heap: str = "-Xmx256m",
              node_dir: Optional[Path] = None, write_archive: bool = False) -> list[str]:
        """A node's or tool's command: it maps the class archive, or, with
        `write_archive` and none kept yet, writes it at its exit."""
        cmd = [java, *heap.split(), *JVM_FLAGS, "-cp", f"{self.libs}/*"]
        cmd[1:1] = jvmarchive.options(class_archive(java), write_archive)
        if tool:
            cmd += [f"-Dlog4j2.configurationFile={TOOLS_LOG4J2}"]
        else:
            cmd += [f"-Dlog4j2.configurationFile={LOG4J2}", f"-Dkafka.logs.dir={node_dir}/logs"]
            if node_dir is not None and node_dir.name == node_name(CONTROLLER_ID):
                # Only the brokers' requests matter (followers' FETCH); the
                # controller's would be the brokers' metadata polls, 2 a second.
                cmd.append("-Disr.request.log.level=INFO")
        return cmd + [main]

    def _archive_writer(self) -> int:
        """The node whose clean exit writes the class archive: a broker (it
        loads the most classes), unless the brokers run the JMX exporter's
        Java agent: a JVM asked to write an archive with an agent refuses to
        start (Java 17: "Must enable AllowArchivingWithJavaAgent", a
        diagnostic flag whose archives then need it at every use), so the
        controller, which runs none, writes it."""
        return CONTROLLER_ID if self.conf.jmx_exporter else ARCHIVE_WRITER

    def start_node(self, node: int, java: Optional[str] = None) -> None:
        if self.pid(node) is not None:
            return
        java = java or java_binary()
        self.libs = self.libs or resolve_jars()
        d = self.node_dir(node)
        heap = self.conf.controller_heap if node == CONTROLLER_ID else self.conf.broker_heap
        cmd = self._java(java, "kafka.Kafka", heap=heap, node_dir=d,
                         write_archive=node == self._archive_writer())
        if node != CONTROLLER_ID and self.conf.jmx_exporter:
            agent = next((self.libs / "agent").glob(f"{JMX_AGENT}-*.jar"))
            cmd.insert(1, f"-javaagent:{agent}=127.0.0.1:{self.conf.metrics_port(node)}:"
                          f"{JMX_EXPORTER_CONFIG}")
        cmd.append(str(d / "server.properties"))
        with open(d / "logs" / "kafka.out", "ab") as out:
            proc = subprocess.Popen(
                cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=d,
                start_new_session=True,  # its own process group; Ctrl-C is ours to pass on
                preexec_fn=None if self.conf.detach else _die_with_parent)
        self._pid_file(node).write_text(f"{proc.pid}\n")
        self.procs[node] = proc
        self.expected[node] = "running"
        self._mark_start(node)

    def _mark_start(self, node: int) -> None:
        """Where this start's lines begin in server.log (a restart appends)."""
        path = self.log(node)
        self._log_start[node] = path.stat().st_size if path.exists() else 0

    def _started(self, node: int) -> bool:
        path = self.log(node)
        if not path.exists():
            return False
        with open(path, "rb") as f:
            f.seek(self._log_start.get(node, 0))
            return b"Kafka Server started" in f.read()

    def wait_ready(self, timeout_s: float = 60.0, nodes: Optional[Iterable[int]] = None) -> float:
        """Until each broker logged `Kafka Server started` and a Metadata
        request answers with all three brokers; returns the seconds waited."""
        started = time.monotonic()
        deadline = started + max(timeout_s, 1.0)
        waiting = set(nodes if nodes is not None else BROKER_IDS)
        while time.monotonic() < deadline:
            self.check()
            waiting = {n for n in waiting if not self._started(n)}
            if not waiting and len(self.metadata_brokers()) == len(BROKER_IDS):
                return time.monotonic() - started
            time.sleep(0.2)
        names = ", ".join(node_name(n) for n in sorted(waiting)) or "Metadata"
        raise ClusterError(f"the Kafka cluster was not ready within {timeout_s:.0f} s "
                           f"(waiting for {names}); logs in {self.conf.dir}")

    def _wait_logging(self, timeout_s: float) -> None:
        deadline = time.monotonic() + max(timeout_s, 1.0)
        while not all(self.log(n).exists() for n in self.nodes):
            self.check()
            if time.monotonic() > deadline:
                raise ClusterError(f"the Kafka nodes wrote no server.log within {timeout_s:.0f} s; "
                                   f"logs in {self.conf.dir}")
            time.sleep(0.1)

    def metadata_brokers(self) -> list[int]:
        """Broker ids of a Metadata round trip (empty if nobody answers)."""
        from confluent_kafka.admin import AdminClient

        try:
            md = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0,
                              "socket.connection.setup.timeout.ms": 1000}).list_topics(timeout=2)
        except Exception:  # noqa: BLE001 - not answering yet
            return []
        return sorted(md.brokers)

    def under_replicated(self) -> Optional[list[str]]:
        """Partitions whose ISR is not all their replicas, by a Metadata round
        trip (None if nobody answers)."""
        from confluent_kafka.admin import AdminClient

        try:
            md = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0,
                              "socket.connection.setup.timeout.ms": 1000}).list_topics(timeout=5)
        except Exception:  # noqa: BLE001 - not answering yet
            return None
        return sorted(f"{t}-{p}" for t, tm in md.topics.items() for p, pm in tm.partitions.items()
                      if set(pm.isrs) != set(pm.replicas))

    def topics(self) -> list[str]:
        """The topics but Kafka's internal ones (Metadata round trip)."""
        from confluent_kafka.admin import AdminClient

        md = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0}).list_topics(
            timeout=10)
        return sorted(t for t in md.topics if not t.startswith("__"))

    def delete_topics(self, topics: Iterable[str], timeout_s: float = 30.0) -> None:
        """Delete `topics` and wait for the controller to have done it."""
        from confluent_kafka.admin import AdminClient

        if not topics:
            return
        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})
        for future in admin.delete_topics(sorted(topics), operation_timeout=timeout_s).values():
            future.result(timeout=timeout_s)

    def wait_calm(self, timeout_s: float = 60.0) -> None:
        """Until every partition's ISR holds all its replicas: a node just
        restarted or resumed is caught up, so what a test counts from now on
        (ISR changes, the brokers' counters) is its own."""
        deadline = time.monotonic() + timeout_s
        while True:
            behind = self.under_replicated()
            if behind == []:
                return
            if time.monotonic() > deadline:
                raise ClusterError(f"the Kafka cluster did not catch up within {timeout_s:.0f} s "
                                   f"(under-replicated: {', '.join(behind or ['no answer'])[:300]})")
            time.sleep(0.5)

    def check(self) -> None:
        """Raise NodeDied (with the tail of its server.log) for a node that
        should run and does not."""
        for node, state in self.expected.items():
            if state != "stopped" and self.pid(node) is None:
                proc, code = self.procs.get(node), None
                if proc is not None:  # ours: its exit status (-9 for SIGKILL)
                    try:
                        code = proc.wait(timeout=2)
                    except subprocess.TimeoutExpired:
                        # alive: its /proc command line read empty in passing
                        # (seen as a JVM starts under load), not a death
                        continue
                self.expected[node] = "stopped"
                raise NodeDied(
                    f"Kafka {node_name(node)} died (exit {code}); last lines of "
                    f"{self.log(node)}:\n{tail(self.log(node))}\n{tail(self.log(node, 'kafka.out'), 5)}")

    # --------------------------------------------------------- faults
    def _signal(self, node: int, sig: int) -> None:
        pid = self.pid(node)
        if pid is None:
            raise ClusterError(f"{node_name(node)} is not running")
        os.killpg(pid, sig)

    def pause(self, node: int) -> None:
        self._signal(node, signal.SIGSTOP)
        self.expected[node] = "paused"

    def resume(self, node: int) -> None:
        self._signal(node, signal.SIGCONT)
        self.expected[node] = "running"

    def kill(self, node: int) -> None:
        """kill -9: no controlled shutdown."""
        self.expected[node] = "stopped"
        pid = self.pid(node)
        self._signal(node, signal.SIGKILL)
        self._reap(node, 10)
        jvmarchive.drop(_archive_written_by(pid) if pid else None)

    def stop_node(self, node: int, timeout_s: float = 30.0) -> None:
        """SIGTERM: a broker's controlled shutdown, then SIGKILL if it hangs."""
        pid = self.pid(node)
        self.expected[node] = "stopped"
        if pid is None:
            return
        partial = _archive_written_by(pid)
        os.killpg(pid, signal.SIGCONT)  # a paused node cannot handle SIGTERM
        os.killpg(pid, signal.SIGTERM)
        if self._reap(node, timeout_s + (60 if partial else 0)):
            jvmarchive.keep(partial)
        else:
            os.killpg(pid, signal.SIGKILL)
            self._reap(node, 10)
        jvmarchive.drop(partial)

    def restart_node(self, node: int, timeout_s: float = 60.0) -> None:
        self.start_node(node)
        if node != CONTROLLER_ID:
            self.wait_ready(timeout_s, nodes=[node])

    def _reap(self, node: int, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        proc = self.procs.get(node)
        while time.monotonic() < deadline:
            if proc is not None:
                try:
                    proc.wait(timeout=0.1)
                except subprocess.TimeoutExpired:
                    pass
            if self.pid(node) is None:
                return True
            time.sleep(0.05)
        return False

    def stop(self, quiet: bool = False, timeout_s: float = 30.0) -> None:
        """Brokers first (their controlled shutdown needs the controller), then
        the controller; anything still there after `timeout_s` is killed."""
        for group in (BROKER_IDS, (CONTROLLER_ID,)):
            pids = {n: self.pid(n) for n in group}
            partials = {n: _archive_written_by(pid) if pid else None for n, pid in pids.items()}
            for node, pid in pids.items():
                self.expected[node] = "stopped"
                if pid is not None:
                    os.killpg(pid, signal.SIGCONT)
                    os.killpg(pid, signal.SIGTERM)
            for node, pid in pids.items():
                if pid is None:
                    continue
                if self._reap(node, timeout_s + (60 if partials[node] else 0)):
                    jvmarchive.keep(partials[node])
                else:
                    jvmarchive.drop(partials[node])
                    if not quiet:
                        print(f"kafka-cluster: {node_name(node)} did not stop in "
                              f"{timeout_s:.0f} s; killed", file=sys.stderr)
                    try:
                        os.killpg(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                    self._reap(node, 10)
        for node in self.nodes:
            self._pid_file(node).unlink(missing_ok=True)

    # --------------------------------------------------------- tools
    def tool(self, main: str, args: list[str], timeout_s: float = 120.0) -> str:
        """Run one of Kafka's tools (e.g. org.apache.kafka.tools.DumpLogSegments)
        on the cached jars; its stdout, or ClusterError with its last line."""
        self.libs = self.libs or resolve_jars()
        done = subprocess.run(self._java(java_binary(), main, tool=True) + args,
                              capture_output=True, text=True, timeout=timeout_s)
        if done.returncode != 0:
            last = (done.stderr.strip() or done.stdout.strip() or "?").splitlines()[-1]
            raise ClusterError(f"{main.rsplit('.', 1)[-1]} failed: {last[:300]}")
        return done.stdout

    def dump_metadata(self, skip_record_metadata: bool = False, node: int = CONTROLLER_ID) -> str:
        """The KRaft metadata log as `kafka-dump-log --cluster-metadata-decoder` prints it."""
        files = ",".join(str(p) for p in self.metadata_segments(node))
        args = ["--cluster-metadata-decoder", "--files", files]
        if skip_record_metadata:
            args.append("--skip-record-metadata")
        return self.tool("org.apache.kafka.tools.DumpLogSegments", args)

    def broker_metrics(self, broker: int) -> dict[str, float]:
        """The broker's ReplicaManager metrics from its JMX exporter
        (jvm/kafka/jmx-exporter.yaml), by Prometheus name."""
        from urllib.request import urlopen

        url = f"http://127.0.0.1:{self.conf.metrics_port(broker)}/metrics"
        with urlopen(url, timeout=10) as response:
            text = response.read().decode()
        out = {}
        for line in text.splitlines():
            if line.startswith("kafka_server_replicamanager_"):
                name, value = line.rsplit(" ", 1)
                out[name.split("{")[0]] = float(value)
        return out

    def rss(self) -> dict[int, int]:
        return {n: rss_bytes(pid) for n in self.nodes if (pid := self.pid(n)) is not None}

    def __enter__(self) -> "KafkaCluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop(quiet=True)


# ------------------------------------------------------------------ command line
def _status(cluster: KafkaCluster) -> int:
    up = 0
    for node in cluster.nodes:
        pid = cluster.pid(node)
        where = f"127.0.0.1:{cluster.conf.port(node)}"
        if pid is None:
            print(f"{node_name(node):10s} {where:16s} stopped")
        else:
            up += 1
            print(f"{node_name(node):10s} {where:16s} pid {pid}  RSS {rss_bytes(pid) >> 20} MB")
    total = sum(cluster.rss().values())
    print(f"{up}/{len(cluster.nodes)} nodes up, RSS {total >> 20} MB; bootstrap "
          f"{cluster.bootstrap}; logs in {cluster.conf.dir}/<node>/logs")
    return 0 if up == len(cluster.nodes) else 3


def _logs(cluster: KafkaCluster, node: str, name: str, lines: int, follow: bool) -> int:
    names = {node_name(n): n for n in cluster.nodes}
    names.update({str(n): n for n in cluster.nodes})
    if node not in names:
        raise ClusterError(f"no node {node!r}: one of {', '.join(sorted(names))}")
    path = cluster.log(names[node], name)
    if not path.exists():
        raise ClusterError(f"{path} does not exist (is the cluster started?)")
    if follow:
        os.execvp("tail", ["tail", "-n", str(lines), "-F", str(path)])
    print(tail(path, lines))
    return 0


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="kafka-cluster",
        description="A real Apache Kafka KRaft cluster on 127.0.0.1: 1 controller (port BASE) "
                    "and brokers 1-3 (ports BASE+1..BASE+3). Environment: ISR_KAFKA_DIR, "
                    "ISR_KAFKA_PORT_BASE (19200), ISR_KAFKA_REPLICA_LAG_MS, ISR_KAFKA_CACHE.")
    sub = parser.add_subparsers(dest="command", required=True)
    start = sub.add_parser("start", help="resolve the jars (once), format, start, wait until ready")
    start.add_argument("--keep-data", action="store_true",
                       help="restart on the existing data instead of a fresh cluster")
    start.add_argument("--timeout", type=float, default=120.0)
    sub.add_parser("fetch", help="only resolve (and cache) Kafka's jars")
    sub.add_parser("stop", help="stop every node (brokers first), killing what hangs")
    sub.add_parser("status", help="each node's pid, port and RSS (exit 3 if not all up)")
    logs = sub.add_parser("logs", help="the tail of a node's log file")
    logs.add_argument("node", nargs="?", default="broker-1",
                      help="controller, broker-1..3 or 0..3 (default broker-1)")
    logs.add_argument("file", nargs="?", default="server.log",
                      help="server.log, state-change.log, controller.log, kafka-request.log, "
                           "kafka.out")
    logs.add_argument("-n", "--lines", type=int, default=40)
    logs.add_argument("-f", "--follow", action="store_true")
    args = parser.parse_args(argv)
    try:
        cluster = KafkaCluster(ClusterConfig.from_env())
        if args.command == "start":
            t0 = time.monotonic()
            cluster.start(timeout_s=args.timeout, fresh=not args.keep_data)
            phases = ", ".join(f"{k} {v:.1f} s" for k, v in cluster.timings.items())
            print(f"Kafka {kafka_version()} up in {time.monotonic() - t0:.1f} s ({phases}): "
                  f"bootstrap {cluster.bootstrap}, RSS {sum(cluster.rss().values()) >> 20} MB, "
                  f"logs in {cluster.conf.dir}/<node>/logs")
            return 0
        if args.command == "fetch":
            print(resolve_jars())
            return 0
        if args.command == "stop":
            running = cluster.running()
            cluster.stop()
            print(f"stopped {len(running)} node(s)" if running else "nothing was running")
            return 0
        if args.command == "status":
            return _status(cluster)
        return _logs(cluster, args.node, args.file, args.lines, args.follow)
    except ClusterError as exc:
        print(f"kafka-cluster {args.command}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
