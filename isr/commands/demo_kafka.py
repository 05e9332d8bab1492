"""`isr demo` on a real cluster (issue 22 section 8): one KRaft controller and
three Apache Kafka brokers (isr/kafka/cluster.py), a producer writing with
acks=all to an RF-3 topic with min.insync.replicas=2, the taps on the
brokers' live logs (isr/tap/live.py, as the tests and compose run them), the
streaming job reading the taps' topic from that cluster, and broker 3 paused
(SIGSTOP) every 40 s for longer than replica.lag.time.max.ms but shorter than
broker.session.timeout.ms, so its partitions shrink, then expand at SIGCONT.

The monitor's own topics are placed on brokers 1 and 2 only: the pause must
not hold up the events that show it."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from typing import Optional

from isr.commands.demo import Stages, run_job
from isr.config import Settings, load_settings
from isr.signals import SignalInterrupt

FALL_BACK = -1000   # run_kafka_demo: Maven Central unreachable, use the embedded path
PAUSED = 3          # the broker the demo pauses; the monitor's topics are on the others
LOAD_TOPIC = "payments"
LOAD_PER_S = 50
FIRST_PAUSE_S = 8.0  # after the taps started: the poller has the leaders by then
EVERY_S = 40.0


def demo_overrides(lag_ms: int) -> list[str]:
    return [f"monitor.replica_lag_time_max_ms={lag_ms}",  # the brokers' own setting
            "monitor.allowed_lateness_ms=2000",  # the taps are separate processes
            "monitor.min_insync_replicas=2",
            "stream.trigger_interval=2 seconds"]


def cluster_config(port_base: Optional[int] = None):
    """The demo's cluster: its own directory (tmp/kafka-demo, $ISR_KAFKA_DIR),
    port base 19300 ($ISR_KAFKA_PORT_BASE, --broker-port), no JMX exporter;
    its nodes die with the demo."""
    from isr.kafka.cluster import REPO, ClusterConfig

    over = {"detach": False, "jmx_exporter": False}
    if not os.environ.get("ISR_KAFKA_DIR"):
        over["dir"] = REPO / "tmp" / "kafka-demo"
    if port_base is not None or not os.environ.get("ISR_KAFKA_PORT_BASE"):
        over["port_base"] = port_base or 19300
    return ClusterConfig.from_env(**over)


def why_no_kafka() -> Optional[str]:
    """None when a real cluster can start here (Java, and the cached jars or
    Maven to fetch them); else why not, in a few words."""
    from isr.kafka.jars import ClusterError, cache_root, check_cache, java_binary, kafka_version

    try:
        java_binary()
    except ClusterError as exc:
        return str(exc)
    libs = cache_root() / f"kafka-{kafka_version()}" / "libs"
    if check_cache(libs) is not None and shutil.which("mvn") is None:
        return "no Maven (mvn) to fetch Kafka's jars"
    return None


def run_kafka_demo(config: Optional[str], overrides: list[str], duration: Optional[float],
                   stages: Stages, port_base: Optional[int], may_fall_back: bool) -> int:
    from isr.kafka.cluster import KafkaCluster
    from isr.kafka.jars import (ClusterError, MavenUnreachable, cache_root, check_cache,
                                kafka_version, resolve_jars)

    cluster = KafkaCluster(cluster_config(port_base))
    stop = threading.Event()

    def interrupt(*_) -> None:  # until the cluster is up: stop its start now
        stop.set()
        raise SignalInterrupt  # not a plain KeyboardInterrupt: isr/signals.py says why

    # Ours, not isr.signals': the cluster's stop may take longer than its grace.
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, interrupt)
    try:
        cluster._check_ports()  # before anything starts: one line, nothing to stop
        if check_cache(cache_root() / f"kafka-{kafka_version()}" / "libs") is not None:
            stages.print(f"fetching Kafka {kafka_version()}'s jars with Maven (once, about "
                         "30 s)...")
        try:
            resolve_jars(quiet=True)
        except MavenUnreachable as exc:
            if not may_fall_back:
                raise
            stages.print(f"[yellow]{exc}: the embedded broker and the simulator instead[/]")
            return FALL_BACK
        settings: Settings = load_settings(
            config, demo_overrides(cluster.conf.replica_lag_time_max_ms) + list(overrides) + [
                f"kafka.bootstrap_servers={cluster.bootstrap}"])
        # Spark's start (15-30 s) beside the cluster's: the first change comes sooner.
        spark = SparkStart(settings).begin()
        stages.print(f"starting a real Kafka {kafka_version()} cluster and Spark (20-40 s, more "
                     "on a busy machine)... Ctrl-C stops everything")
        cluster.start()
        stages.stage(f"Kafka {kafka_version()} up at {cluster.bootstrap}: 1 KRaft controller "
                     f"+ 3 brokers (logs in {cluster.conf.dir})")
        return _with_cluster(cluster, settings, spark, duration, stages, stop)
    except ClusterError as exc:
        print(f"isr demo: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        stages.print("stopping...")
        return 130
    finally:
        cluster.stop(quiet=True)  # no broker left behind, also on Ctrl-C and errors


class SparkStart:
    """The Spark session started in a thread (its JVM's start is most of the
    demo's wait); `session()` waits for it, re-raising what it raised."""

    def __init__(self, settings: Settings) -> None:
        self.settings, self.spark, self.error = settings, None, None
        self.thread = threading.Thread(target=self._run, daemon=True, name="spark-start")

    def begin(self) -> "SparkStart":
        self.thread.start()
        return self

    def _run(self) -> None:
        from isr.stream.job import spark_session
        from isr.stream.jvm import QUICK_START_JVM
        from isr.stream.running import quiet_failures

        os.environ.setdefault("ISR_SPARK_JAVA_OPTIONS", QUICK_START_JVM)  # the first change sooner
        try:
            self.spark = spark_session(self.settings, self.settings.stream.master)
            quiet_failures(self.spark)
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread
            self.error = exc

    def session(self, stop: threading.Event):
        """The session, or None if `stop` came first (SIGTERM while Spark starts)."""
        while self.thread.is_alive() and not stop.is_set():
            self.thread.join(0.2)  # short joins: Ctrl-C still interrupts the wait
        if self.error is not None:
            raise self.error
        return None if stop.is_set() else self.spark


def _create_topics(cluster, settings: Settings) -> int:
    """The load topic RF 3 (min.insync.replicas=2, one partition led by each
    broker); the monitor's input and output topics on brokers 1 and 2 only.
    Returns the changes topic's partition count."""
    from confluent_kafka.admin import NewTopic

    from isr.kafka.jars import ClusterError
    from isr.kafka.load import create_topics, rf3_topic

    out = settings.output
    pairs = [[1, 2], [2, 1]]
    parts = out.partitions if out.partitions > 0 else 2
    compact = {"cleanup.policy": "compact"}
    new = [rf3_topic(LOAD_TOPIC, 3),
           NewTopic(out.commit_topic, 1, replica_assignment=[[1, 2]], config=compact)]
    new += [NewTopic(t, 2, replica_assignment=pairs, config={"min.insync.replicas": "1"})
            for t in settings.input.topics]
    new += [NewTopic(t, parts, replica_assignment=[pairs[p % 2] for p in range(parts)],
                     config=compact if t in (out.state_topic, out.alerts_topic) else {})
            for t in (out.changes_topic, out.state_topic, out.dead_letter_topic,
                      out.alerts_topic)]
    try:
        create_topics(cluster.bootstrap, new)
    except Exception as exc:  # noqa: BLE001 - one line, not a traceback
        raise ClusterError(f"creating the demo's topics: {exc}") from None
    return parts


def _pauses(cluster, stop: threading.Event, stages: Stages) -> None:
    """SIGSTOP the follower for 2.5 lag limits (under the session timeout:
    a lag shrink, not a fencing), SIGCONT, every EVERY_S."""
    conf = cluster.conf
    pause_s = min(2.5 * conf.replica_lag_time_max_ms, 0.7 * conf.broker_session_timeout_ms) / 1000
    next_at = time.monotonic() + FIRST_PAUSE_S
    while not stop.wait(max(0.0, next_at - time.monotonic())):
        cluster.pause(PAUSED)
        try:
            stages.print(f"{_now()} [yellow]broker {PAUSED} paused[/] (SIGSTOP for {pause_s:g} s)")
            stop.wait(pause_s)
        finally:
            cluster.resume(PAUSED)
        stages.print(f"{_now()} [yellow]broker {PAUSED} resumed[/] (SIGCONT)")
        next_at += EVERY_S


def _now() -> str:
    t = time.time()
    return time.strftime("%H:%M:%S", time.localtime(t)) + f".{int(t * 1000) % 1000:03d}"


def _with_cluster(cluster, settings: Settings, spark_start: SparkStart,
                  duration: Optional[float], stages: Stages, stop: threading.Event) -> int:
    from isr.kafka.load import Producing
    from isr.tap.live import RunningTaps, kafka_cluster_taps

    for sig in (signal.SIGINT, signal.SIGTERM):  # from now on a clean stop at the next look
        signal.signal(sig, lambda *_: stop.set())
    conf = cluster.conf
    topic = settings.input.topics[0]
    parts = _create_topics(cluster, settings)
    taps = RunningTaps(kafka_cluster_taps(
        cluster, f"kafka://{topic}", cluster="demo",
        extra=["--set", f"kafka.bootstrap_servers={cluster.bootstrap}"]),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    producer = Producing(cluster.bootstrap, LOAD_TOPIC, LOAD_PER_S, stop=stop, flush_s=5)
    threads = [producer.thread,
               threading.Thread(target=_pauses, args=(cluster, stop, stages), daemon=True)]
    try:
        taps.start()
        # the first shrink: the pause has lasted the lag limit, and the leader's
        # next ISR check (every lag/2) has run
        due = time.strftime("%H:%M:%S", time.localtime(
            time.time() + FIRST_PAUSE_S + 1.5 * conf.replica_lag_time_max_ms / 1000))
        first = time.monotonic() - stages.started + FIRST_PAUSE_S  # as the stage times
        for t in threads:
            t.start()
        lag, session = conf.replica_lag_time_max_ms / 1000, conf.broker_session_timeout_ms / 1000
        stages.stage(f"topics created: a producer writes acks=all to [cyan]{LOAD_TOPIC}[/] "
                     f"(RF 3, min ISR 2); {len(taps.procs)} taps on the brokers' logs write to "
                     f"[cyan]{topic}[/]; broker {PAUSED} pauses every {EVERY_S:g} s from "
                     f"+{first:.0f} s, longer than the {lag:g} s lag limit, shorter than "
                     f"the {session:g} s session timeout")
        spark = spark_start.session(stop)
        if spark is None:
            return 0
        return run_job(spark, settings, topic, cluster.bootstrap, duration, stop, stages, due,
                       partitions=parts)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=10)
        taps.stop()
