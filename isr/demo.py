"""`isr demo`: embedded broker + the simulator's `demo` scenario in real time +
the streaming job, with ISR changes shown live in the terminal. Ctrl-C stops
everything it started."""

from __future__ import annotations

import json
import os
import signal
import tempfile
import threading
import time
from typing import Optional

from rich.console import Console

from isr.config import Settings, load_settings
from isr.sim.command import feed_live
from isr.sim.scenario import load_scenario

DEMO_OVERRIDES = [
    # Quick on a laptop: a 10 s lag limit, checks every 5 s, 1 s of lateness.
    "monitor.replica_lag_time_max_ms=10000",
    "monitor.allowed_lateness_ms=1000",
    "monitor.min_insync_replicas=2",
    "stream.trigger_interval=2 seconds",
]


def _show(console: Console, record: dict) -> None:
    t = time.strftime("%H:%M:%S", time.localtime(record["ts"] / 1000))
    colour = "red" if record["action"] == "shrink" else "green"
    console.print(
        f"{t} [bold {colour}]{record['action']:6}[/] {record['topic']}-{record['partition']} "
        f"replicas {record['replicas']} ISR {record['isr_before']} -> {record['isr_after']} "
        f"hw {record['hw']} [dim]({record['cause']}: {record['reason']})[/]", highlight=False,
        soft_wrap=True)  # one line per change, also when piped


def run_demo(config: Optional[str], overrides: list[str], duration: Optional[float],
             console: Console) -> int:
    from confluent_kafka import Consumer, Producer

    from isr.kafka.embedded import EmbeddedBroker
    from isr.stream.job import run_to_kafka

    os.environ.setdefault("ISR_SPARK_LOG_LEVEL", "ERROR")  # keep the terminal readable
    stop = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    checkpoint = tempfile.mkdtemp(prefix="isr-demo-")
    with EmbeddedBroker() as broker:
        settings: Settings = load_settings(config, DEMO_OVERRIDES + list(overrides) + [
            f"kafka.bootstrap_servers={broker.bootstrap}",
            f"stream.checkpoint_location={checkpoint}"])
        topic = settings.input.topics[0]
        broker.create_topics([topic], 2)
        console.print(f"[bold]embedded broker[/] at {broker.bootstrap} (Tansu); "
                      f"events -> [cyan]{topic}[/], decisions <- "
                      f"[cyan]{settings.output.changes_topic}[/]")
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 20,
                             "log_level": 0})
        scenario = load_scenario("demo")
        gen = threading.Thread(target=feed_live, daemon=True,
                               args=(scenario, producer, topic, stop.is_set))
        gen.start()
        console.print("starting the Spark job (15-30 s)... broker 3 pauses 14 s every 40 s; "
                      "Ctrl-C stops everything")
        query = run_to_kafka(settings, master=settings.stream.master)
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "isr-demo",
                             "auto.offset.reset": "earliest", "session.timeout.ms": 6000,
                             "log_level": 3})
        consumer.subscribe([settings.output.changes_topic])
        deadline = time.monotonic() + duration if duration else None
        shown = 0
        try:
            while not stop.is_set() and (deadline is None or time.monotonic() < deadline):
                if query.exception() is not None:
                    console.print(f"[red]the job failed:[/] {query.exception()}")
                    return 1
                msg = consumer.poll(0.5)
                if msg is None or msg.error():
                    continue
                record = json.loads(msg.value())
                if record.get("type") == "isr_change":
                    _show(console, record)
                    shown += 1
        finally:
            stop.set()
            console.print(f"stopping ({shown} ISR changes shown)...")
            consumer.close()
            query.stop()
            producer.flush(5)
            gen.join(timeout=5)
    return 0 if shown or not duration else 3

