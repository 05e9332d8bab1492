"""`isr demo`: a real 3-broker Apache Kafka cluster with a producer, the taps
on its logs and a paused follower (isr/commands/demo_kafka.py), or the embedded broker
+ the simulator's `demo` scenario in real time (here); then the streaming
job, with ISR changes shown live in the terminal. Ctrl-C stops everything it
started."""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import socket
import sys
import tempfile
import threading
import time
from typing import Optional

from rich.console import Console

from isr.commands import options
from isr.config import ConfigError, Settings, load_settings

DEMO_OVERRIDES = [
    # Quick on a laptop: a 10 s lag limit, checks every 5 s, 1 s of lateness.
    "monitor.replica_lag_time_max_ms=10000",
    "monitor.allowed_lateness_ms=1000",
    "monitor.min_insync_replicas=2",
    "stream.trigger_interval=2 seconds",
]


STAGES = 4  # broker up, topics created, Spark started, first batch


def change_line(record: dict) -> str:
    """One `isr_change` as the demo's live line (rich markup). The time has
    milliseconds: a shrink and its expand often fall in the same second."""
    ts = record["ts"]
    t = time.strftime("%H:%M:%S", time.localtime(ts / 1000)) + f".{ts % 1000:03d}"
    colour = "red" if record["action"] == "shrink" else "green"
    return (f"{t} [bold {colour}]{record['action']:6}[/] {record['topic']}-{record['partition']} "
            f"replicas {record['replicas']} ISR {record['isr_before']} -> {record['isr_after']} "
            f"hw {record['hw']} [dim]({record['cause']}: {record['reason']})[/]")


class Stages:
    """The progress lines printed until the first ISR change, numbered and
    timed from the command's start, so the wait for Spark is not silence."""

    def __init__(self, console: Console) -> None:
        self.console, self.started, self.done = console, time.monotonic(), 0

    def print(self, text: str) -> None:
        self.console.print(text, highlight=False, soft_wrap=True)  # one line, also when piped

    def stage(self, text: str) -> None:
        self.done += 1
        self.print(f"[bold][{self.done}/{STAGES}][/] +{time.monotonic() - self.started:.1f} s "
                   f"{text}")


class FirstFault:
    """The scenario's first fault as the demo announces it: what happens and
    the wall-clock time from which it can show as an ISR change (when it has
    lasted the lag limit; the next isr-expiration check may come a little later)."""

    def __init__(self, scenario, start_s: float, lag_ms: int) -> None:
        fault = scenario.faults[0]
        every = f" every {fault.repeat_every_ms / 1000:g} s" if fault.repeat_every_ms else ""
        self.what = (f"broker {fault.broker} pauses {fault.duration_ms / 1000:g} s{every} from "
                     f"+{fault.at_ms / 1000:g} s, longer than the {lag_ms / 1000:g} s lag limit")
        self.due = time.strftime("%H:%M:%S",
                                 time.localtime(start_s + (fault.at_ms + lag_ms) / 1000))


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        # As the broker will (tokio sets it): connections of a previous run in
        # TIME_WAIT do not make the port busy.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _batch_started(query) -> bool:
    """Whether the query's first micro-batch with input has begun: its
    offsets show data (the batch then takes seconds, more with a backlog)."""
    return bool(query.status.get("isDataAvailable")) or bool(query.recentProgress)


def run_demo(config: Optional[str], overrides: list[str], duration: Optional[float],
             console: Console, broker_port: Optional[int] = None,
             cluster: str = "auto") -> int:
    """`cluster`: kafka (a real 3-broker cluster, isr/commands/demo_kafka.py), embedded
    (the embedded broker + the simulator), or auto: kafka where Java and
    Maven (or the cached jars) are, else embedded, said in one line."""
    load_settings(config, DEMO_OVERRIDES + list(overrides))  # a mistake stops us before any start
    os.environ.setdefault("ISR_SPARK_LOG_LEVEL", "ERROR")  # keep the terminal readable
    # The job's checkpoint lives as long as the demo: nothing is left in /tmp.
    with tempfile.TemporaryDirectory(prefix="isr-demo-", ignore_cleanup_errors=True) as scratch:
        overrides = [*overrides, f"stream.checkpoint_location={scratch}/checkpoint"]
        return _run_demo(config, overrides, duration, Stages(console), broker_port, cluster)


def _run_demo(config: Optional[str], overrides: list[str], duration: Optional[float],
              stages: Stages, broker_port: Optional[int], cluster: str) -> int:
    if cluster != "embedded":
        from isr.commands.demo_kafka import FALL_BACK, run_kafka_demo, why_no_kafka

        why = why_no_kafka()
        if why is None:
            code = run_kafka_demo(config, overrides, duration, stages, broker_port,
                                  may_fall_back=cluster == "auto")
            if code != FALL_BACK:
                return code
        elif cluster == "kafka":
            raise ConfigError(f"--cluster kafka: {why}")
        else:
            stages.print(f"[yellow]no real Kafka here ({why.split(':')[0]}): the embedded "
                         "broker and the simulator instead[/]")
    return _run_embedded(config, overrides, duration, stages, broker_port)


def _run_embedded(config: Optional[str], overrides: list[str], duration: Optional[float],
                  stages: Stages, broker_port: Optional[int]) -> int:
    from isr.kafka.embedded import EmbeddedBroker, EmbeddedBrokerError, tansu_binary

    try:  # before anything starts: the broker comes from an optional extra
        tansu_binary()
    except EmbeddedBrokerError as exc:
        raise ConfigError(str(exc)) from None
    if broker_port is not None and not _port_free(broker_port):
        raise ConfigError(f"--broker-port {broker_port}: already in use")
    try:
        with EmbeddedBroker(port=broker_port) as broker:
            stages.stage(f"broker up at {broker.bootstrap} (embedded Tansu)")
            return _with_broker(broker, config, overrides, duration, stages)
    except EmbeddedBrokerError as exc:
        print(f"isr demo: {exc}", file=sys.stderr)
        return 1


def _with_broker(broker, config: Optional[str], overrides: list[str], duration: Optional[float],
                 stages: Stages) -> int:
    from confluent_kafka import Producer

    from isr.commands.demo_kafka import SparkStart
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    settings: Settings = load_settings(config, DEMO_OVERRIDES + list(overrides) + [
        f"kafka.bootstrap_servers={broker.bootstrap}"])
    topic = settings.input.topics[0]
    broker.create_topics([topic], 2)
    from isr.commands.simulate import feed_live
    from isr.sim.scenario import load_scenario

    scenario = load_scenario("demo")
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 20,
                         "log_level": 0})
    # The scenario starts at the next whole second (commands.simulate.starting_now).
    fault = FirstFault(scenario, math.ceil(time.time()), settings.monitor.replica_lag_time_max_ms)
    gen = threading.Thread(target=feed_live, daemon=True,
                           args=(scenario, producer, topic, stop.is_set))
    gen.start()
    stages.stage(f"topics created: the simulator writes scenario `demo` to [cyan]{topic}[/]; "
                 f"{fault.what}")
    stages.print("starting Spark (15-30 s, more on a busy machine)... Ctrl-C stops everything")
    try:
        # In a thread, as the real-cluster demo's: a SIGTERM meanwhile ends the
        # demo at once instead of after Spark's start (a minute when busy).
        spark = SparkStart(settings).begin().session(stop)
        if spark is None:
            stages.print("stopping (Spark was still starting)...")
            return 0
        signal.signal(signal.SIGINT, lambda *_: stop.set())  # after Spark's own handler
        return run_job(spark, settings, topic, broker.bootstrap, duration, stop, stages,
                       fault.due)
    finally:
        stop.set()
        producer.flush(5)
        gen.join(timeout=5)


def run_job(spark, settings: Settings, topic: str, bootstrap: str, duration: Optional[float],
            stop: threading.Event, stages: Stages, due: str,
            partitions: Optional[int] = None) -> int:
    """Both demos' last stage: the job on `topic`, its ISR changes printed
    until stopped."""
    from isr.pipeline.streaming import StreamingPipeline

    stages.stage(f"Spark started ({settings.stream.master}); the job reads [cyan]{topic}[/] "
                 f"and writes decisions to [cyan]{settings.output.changes_topic}[/]")
    with StreamingPipeline(settings) as pipeline:
        query = start_query(pipeline, spark, stop, stages)
        if query is None:
            return 0
        return _show_changes(query, settings, bootstrap, duration, stop, stages, due,
                             partitions=partitions)


def start_query(pipeline, spark, stop: threading.Event, stages: Stages):
    """The job's query, or None if a stop came while Spark planned it (its
    source's schema comes from a Python worker: up to a minute on a busy
    machine, and no signal cuts it short): the demo then ends at once."""
    from isr.signals import Stopped

    try:
        return pipeline.start(spark, stop=stop.is_set)
    except Stopped:
        stages.print("stopping (Spark was still planning the job's query)...")
        return None


def _show_changes(query, settings: Settings, bootstrap: str, duration: Optional[float],
                  stop: threading.Event, stages: Stages, due: str,
                  partitions: Optional[int] = None) -> int:
    """Print the job's ISR changes until stopped. With `partitions`, the
    changes topic's partitions are assigned, not subscribed: no consumer
    group, whose coordinator may be the broker the real-cluster demo pauses."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    from isr.stream.running import _failed

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "isr-demo",
                         "auto.offset.reset": "earliest", "session.timeout.ms": 6000,
                         "enable.auto.commit": partitions is None, "log_level": 3})
    if partitions is None:
        consumer.subscribe([settings.output.changes_topic])
    else:
        consumer.assign([TopicPartition(settings.output.changes_topic, p, OFFSET_BEGINNING)
                         for p in range(partitions)])
    deadline = time.monotonic() + duration if duration else None
    shown = 0
    try:
        while not stop.is_set() and (deadline is None or time.monotonic() < deadline):
            if query.exception() is not None:  # one line, the report in a file
                return _failed(query.exception(), "isr demo")
            if stages.done < STAGES and _batch_started(query):
                stages.stage("first batch: the job is reading the events so far; the first "
                             f"ISR change is due from about {due}")
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            # (The job's own topic: it never writes a record without a value.)
            record = json.loads(msg.value())  # type: ignore[arg-type]
            if record.get("type") == "isr_change":
                if stages.done < STAGES:  # it came and went between two looks
                    stages.stage("first batch done")
                stages.print(change_line(record))
                shown += 1
    finally:
        stages.print(f"stopping ({shown} ISR changes shown)...")
        consumer.close()
        query.stop()
    return 0 if shown or not duration or stop.is_set() else 3


def add_parser(sub) -> None:
    p = sub.add_parser("demo", help="a real Kafka cluster (or the embedded broker + simulator), "
                                    "the taps and the job, ISR changes shown live",
                       description="Start a real 3-broker Apache Kafka cluster (KRaft; its jars "
                                   "fetched with Maven once), a producer (acks=all, RF 3, min "
                                   "ISR 2), the taps on the brokers' logs and the streaming job, "
                                   "and pause broker 3 (SIGSTOP) longer than the lag limit "
                                   "every 40 s; without Java or Maven, the embedded "
                                   "Kafka-protocol broker (Tansu) and the cluster simulator's "
                                   "`demo` scenario instead. ISR changes are shown as the job "
                                   "writes them. Ctrl-C stops everything.")
    p.add_argument("--cluster", choices=("auto", "kafka", "embedded"), default="auto",
                   help="kafka: the real cluster; embedded: the embedded broker + simulator; "
                        "auto (default): kafka where Java and Maven are, else embedded")
    p.add_argument("--duration", type=float, metavar="SECONDS",
                   help="stop this long after Spark has started (default: until Ctrl-C)")
    p.add_argument("--broker-port", type=int, metavar="PORT",
                   help="the embedded broker's port (default: a free one), or the real "
                        "cluster's first port (controller; brokers the next three; default "
                        "19300); the metrics endpoint's is metrics.port")
    options.add_config_options(p)
    p.set_defaults(func=cmd_demo)


def cmd_demo(args: argparse.Namespace) -> int:
    return run_demo(args.config, args.set or [], args.duration, Console(), args.broker_port,
                    args.cluster)
