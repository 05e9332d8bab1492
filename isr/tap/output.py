"""`isr tap request-log|metadata|server-log|state-change`: run a tap over its source and
write the events to Kafka (keyed `topic/partition`, idempotent producer) or
to JSON lines; a progress line on a terminal and a final count."""

from __future__ import annotations

import sys
import time
from collections import Counter
from contextlib import nullcontext
from typing import TYPE_CHECKING, Callable, Optional

import orjson
from rich.console import Console

from isr.config import ConfigError, Settings
from isr.contract.events import routing_key
from isr.linecap import DEFAULT_MAX_LINE_BYTES
from isr.signals import StopOnSignal
from isr.tap.lines import events_of, read_lines

if TYPE_CHECKING:
    from confluent_kafka import Producer

KAFKA_PREFIX = "kafka://"
NOTHING_WRITTEN = 3  # as `isr replay` that accepted nothing (README, exit codes)


class Sink:
    """JSON lines to a file / stdout, or Kafka. `live`: the source has no end
    (a followed file, polling), so each line is flushed as it is written."""

    def __init__(self, to: str, settings_factory: Callable[[], Settings],
                 live: bool = False) -> None:
        self.to = to
        self.live = live
        self.written = 0
        self.producer: Optional[Producer]  # None: to a file or stdout
        if to.startswith(KAFKA_PREFIX):
            from isr import preflight
            from isr.kafka.client import ensure_topics, producer

            self.topic = to[len(KAFKA_PREFIX):]
            if not self.topic:
                raise ConfigError("--to kafka://TOPIC needs a topic name")
            conf = preflight.kafka_reachable(settings_factory())  # Ctrl-C-able, bounded
            ensure_topics(conf, [self.topic])
            self.producer = producer(conf)
            self.file = None
        else:
            self.producer = None
            self.file = open(to, "wb") if to != "-" else None

    def write(self, ev: dict) -> None:
        self.written += 1
        data = orjson.dumps(ev)
        if self.producer is not None:
            from isr.kafka.client import send

            send(self.producer, self.topic, data, routing_key(ev))
            if self.written % 1024 == 0:
                self.producer.poll(0)
        else:
            out = self.file or sys.stdout.buffer
            out.write(data + b"\n")
            if self.live:
                out.flush()

    def close(self) -> None:
        if self.producer is not None:
            remaining = self.producer.flush(30)
            if remaining:
                raise ConfigError(f"{remaining} events were not acknowledged by the broker in 30 s")
        elif self.file is not None:
            self.file.close()
        else:
            sys.stdout.buffer.flush()

    def abandon(self) -> None:
        """Stopped midway (an interrupt): what was written to a file stays there."""
        if self.file is not None and not self.file.closed:
            self.file.close()


def run_tap(tap, source: str, follow: bool, to: str, settings_factory,
            console: Console, quiet: bool, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
            name: str = "isr tap") -> int:
    """Feed `source` through `tap` into `to`; prints the count at the end.
    0 when done, 130 when stopped by Ctrl-C / SIGTERM, NOTHING_WRITTEN when
    the tap could write nothing for a reason the user can fix (its warnings)."""
    from isr import preflight

    if source != "-" and not follow:
        preflight.readable_inputs([source], "a log file")
    if not to.startswith(KAFKA_PREFIX):
        preflight.writable_file(to, "--to")
    sink = Sink(to, settings_factory, live=follow)
    show = not quiet and console.is_terminal
    started = time.monotonic()
    stop = StopOnSignal()
    try:
        with stop, (console.status("") if show else nullcontext()) as status:
            last = 0.0
            for ev in events_of(tap, read_lines(source, follow, stop,
                                                max_line_bytes=max_line_bytes)):
                sink.write(ev)
                if status is not None and time.monotonic() - last > 0.5:
                    last = time.monotonic()
                    status.update(f"{tap.lines:,} lines read, {sink.written:,} events written")
            sink.close()
    except KeyboardInterrupt:  # stopped inside a blocking read (isr/signals.py)
        stop.stopped = True
    finally:
        sink.abandon()
    warnings = tap.warnings()
    if not quiet:
        console.print(summary(tap.lines, sink.written, tap.skipped, time.monotonic() - started,
                              to, tap.approximate), highlight=False, soft_wrap=True)
    for line in warnings:  # even with --quiet: output was lost
        print(f"{name}: warning: {line}", file=sys.stderr)
    if stop():
        return 130
    if not sink.written and getattr(tap, "unknown_id_lines", 0) > 0:
        return NOTHING_WRITTEN
    return 0


def summary(lines: int, written: int, skipped: Counter, seconds: float, to: str,
            approximate: Counter = Counter()) -> str:
    text = f"{lines:,} lines read, {written:,} events written to {to} in {seconds:.1f} s"
    for title, counts in (("skipped", skipped), ("approximate", approximate)):
        if counts:
            text += f"; {title}: " + ", ".join(
                f"{n:,} {reason}" for reason, n in sorted(counts.items(),
                                                          key=lambda kv: (-kv[1], kv[0])))
    return text


def poll_metadata(poller, bootstrap: str, interval_s: float, polls: Optional[int], to: str,
                  settings_factory, console: Console, quiet: bool,
                  clock: Callable[[], float] = time.time) -> int:
    """Poll Metadata + DescribeCluster every `interval_s` (`polls` times, or
    until stopped) and write what changed. A cluster that does not answer
    within kafka.connect_timeout_s at the start is one line (ConfigError)."""
    from kafka.admin import KafkaAdminClient
    from kafka.errors import KafkaError

    settings = settings_factory()
    timeout_ms = int(settings.kafka.connect_timeout_s * 1000)
    sink = Sink(to, lambda: settings, live=True)
    try:
        admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="isr-tap",
                                 bootstrap_timeout_ms=timeout_ms, request_timeout_ms=timeout_ms)
    except KafkaError as exc:
        sink.abandon()
        raise ConfigError(f"--poll {bootstrap}: no answer within "
                          f"{settings.kafka.connect_timeout_s:g} s (kafka.connect_timeout_s): "
                          f"{exc}") from None
    done = 0
    try:
        with StopOnSignal() as stop:
            while not stop() and (polls is None or done < polls):
                if done:
                    _sleep(interval_s, stop)
                    if stop():
                        break
                ts = int(clock() * 1000)
                try:
                    events = poller.diff(admin.describe_cluster(), admin.describe_topics(), ts)
                except KafkaError as exc:  # a broker restart: try again at the next poll
                    print(f"isr tap metadata: poll failed: {exc}", file=sys.stderr)
                    events = []
                for ev in events:
                    sink.write(ev)
                done += 1
            admin.close()
            sink.close()
    finally:
        sink.abandon()
    if not quiet:
        console.print(f"{done} polls, {sink.written:,} events written to {to}", highlight=False)
    return 130 if stop() else 0


def _sleep(seconds: float, stop: Callable[[], bool]) -> None:
    """Sleep, but wake within 0.1 s of a stop."""
    deadline = time.monotonic() + seconds
    while not stop() and time.monotonic() < deadline:
        time.sleep(min(0.1, max(0.0, deadline - time.monotonic())))
