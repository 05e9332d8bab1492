"""`isr tap request-log|metadata|server-log|state-change`: run a tap over its source and
write the events to Kafka (keyed `topic/partition`, idempotent producer) or
to JSON lines; a progress line on a terminal and a final count."""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from contextlib import nullcontext
from typing import Callable, Optional

import orjson
from rich.console import Console

from isr.commands import options
from isr.config import ConfigError, Settings
from isr.contract.events import routing_key
from isr.linecap import DEFAULT_MAX_LINE_BYTES
from isr.signals import StopOnSignal
from isr.tap.lines import events_of, read_lines

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
    if not sink.written and getattr(tap, "unknown_id_lines", 0):
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


def add_parser(sub) -> None:
    tap = sub.add_parser("tap", help="fetch-state events from a real cluster's logs and metadata",
                         description="Turn a Kafka cluster's own logs into the monitor's input "
                                     "events (docs/tap.md).")
    kinds = tap.add_subparsers(dest="source", required=True, metavar="SOURCE")

    def common(p, source_help: Optional[str]) -> None:
        if source_help:
            p.add_argument("path", metavar="PATH|-", help=source_help)
            p.add_argument("-F", "--follow", action="store_true",
                           help="keep reading as the file grows, across rotation (like tail -F)")
            p.add_argument("--timezone", default="UTC",
                           help="the broker's time zone, as log4j's %%d is local time (default UTC)")
        p.add_argument("--to", required=True, metavar="kafka://TOPIC|FILE",
                       help="kafka://TOPIC (brokers from [kafka]), a JSON-lines file, or - for stdout")
        p.add_argument("--cluster", default="default", help="the cluster's name in the events")
        p.add_argument("--quiet", "-q", action="store_true", help="no progress or final count")
        options.add_config_options(p)

    p = kinds.add_parser("request-log", help="follower fetches from a broker's kafka-request.log",
                         description="Follower FETCH requests of one broker's request log "
                                     "(kafka.request.logger=DEBUG) as fetch and append events.")
    common(p, "the broker's kafka-request.log, or - for stdin")
    p.add_argument("--broker", type=int, required=True, help="the id of the broker that wrote it")
    p.add_argument("--topic-ids", metavar="DUMP|BOOTSTRAP",
                   help="where FetchRequest v13+ topic ids get their names: a metadata dump file "
                        "(kafka-dump-log --cluster-metadata-decoder) or bootstrap servers")
    p.set_defaults(func=cmd_tap_request_log)

    p = kinds.add_parser("metadata", help="leaders, ISR and brokers from the KRaft metadata log "
                                          "or by polling",
                         description="Leader, isr and broker events from the text of "
                                     "kafka-dump-log --cluster-metadata-decoder (exact), or "
                                     "by polling Metadata and DescribeCluster (--poll, sampled).")
    p.add_argument("path", nargs="?", metavar="PATH|-", help="the metadata dump, or - for stdin")
    p.add_argument("-F", "--follow", action="store_true", help="keep reading as the file grows")
    p.add_argument("--poll", metavar="BOOTSTRAP", help="poll this cluster instead of reading a dump")
    p.add_argument("--interval-s", type=float, default=5.0, help="seconds between polls (default 5)")
    p.add_argument("--polls", type=int, help="stop after this many polls (default: until stopped)")
    common(p, None)
    p.set_defaults(func=cmd_tap_metadata)

    p = kinds.add_parser("server-log", help="the ISR the cluster committed, from server.log",
                         description="The ISR changes in the leaders' server.log as isr events "
                                     "(Kafka 0.9 to 4.x wording, docs/tap.md).")
    common(p, "a broker's server.log, or - for stdin")
    p.set_defaults(func=cmd_tap_server_log)

    p = kinds.add_parser("state-change", help="leaders and ISRs from state-change.log",
                         description="A broker becoming leader and the controller's leader "
                                     "and ISR changes in state-change.log as leader and isr "
                                     "events (Kafka 0.9 to 4.x wording, docs/tap.md).")
    common(p, "a broker's or the controller's state-change.log, or - for stdin")
    p.add_argument("--replicas", metavar="DUMP|BOOTSTRAP",
                   help="where a leader line's partition gets its replicas when no line gave them: "
                        "a metadata dump file (kafka-dump-log --cluster-metadata-decoder) or "
                        "bootstrap servers")
    p.set_defaults(func=cmd_tap_state_change)

    p = kinds.add_parser("cluster", help="every tap of a running cluster, as the demo and "
                                         "compose run them",
                         description="Per broker `tap request-log -F` (topic ids from the "
                                     "cluster), `tap state-change -F` and `tap server-log -F` on "
                                     "its log files, and one `tap metadata --poll`, each its own "
                                     "process (isr/tap/live.py), until stopped.")
    p.add_argument("--log-path", required=True, metavar="TEMPLATE",
                   help="a broker's log file, {broker} and {file} filled in, e.g. "
                        "/logs/broker-{broker}/{file}")
    p.add_argument("--brokers", required=True, metavar="ID,ID,...", help="the broker ids")
    p.add_argument("--bootstrap", required=True, help="the cluster's bootstrap servers")
    p.add_argument("--interval-s", type=float, default=5.0,
                   help="seconds between metadata polls (default 5)")
    common(p, None)
    p.set_defaults(func=cmd_tap_cluster)


def _topic_ids(where: Optional[str], settings_factory):
    """FetchRequest v13+ names topics by id: a resolver from a dump or a cluster."""
    if where is None:
        return None
    from pathlib import Path

    if Path(where).exists():
        from isr import preflight
        from isr.tap.lines import events_of, read_lines
        from isr.tap.metadata import MetadataLogTap

        preflight.readable_inputs([where], "a metadata dump")
        dump = MetadataLogTap()
        max_line_bytes = settings_factory().input.max_line_bytes
        for _ in events_of(dump, read_lines(where, False, max_line_bytes=max_line_bytes)):
            pass
        return dump.topic_name
    from isr.tap.resolve import ClusterTopicIds

    return ClusterTopicIds.reachable(where, settings_factory().kafka.connect_timeout_s)


def _run_tap(args: argparse.Namespace, tap) -> int:
    settings = options.settings_once(args)
    return run_tap(tap, args.path, args.follow, args.to, settings, Console(stderr=True),
                   args.quiet, settings().input.max_line_bytes, options.command_label(args))


def cmd_tap_request_log(args: argparse.Namespace) -> int:
    from isr.tap.request_log import RequestLogTap

    zone = _zone(args.timezone)
    return _run_tap(args, RequestLogTap(args.broker, args.cluster, zone,
                                        _topic_ids(args.topic_ids, options.settings_once(args))))


def cmd_tap_server_log(args: argparse.Namespace) -> int:
    from isr.tap.server_log import ServerLogTap

    return _run_tap(args, ServerLogTap(args.cluster, _zone(args.timezone)))


def cmd_tap_state_change(args: argparse.Namespace) -> int:
    from isr.tap.state_change import StateChangeTap

    from isr.tap.assignment import replicas_from

    settings = options.settings_once(args)()
    replicas = replicas_from(args.replicas, settings.kafka.connect_timeout_s,
                             settings.input.max_line_bytes)
    return _run_tap(args, StateChangeTap(args.cluster, _zone(args.timezone), replicas))


def cmd_tap_cluster(args: argparse.Namespace) -> int:
    import time

    from isr.tap.live import ClusterTaps, RunningTaps

    try:
        brokers = [int(b) for b in args.brokers.split(",") if b.strip()]
    except ValueError:
        raise ConfigError(f"--brokers {args.brokers}: broker ids separated by commas") from None
    if not brokers or "{broker}" not in args.log_path or "{file}" not in args.log_path:
        raise ConfigError("--log-path needs {broker} and {file}, --brokers at least one id")
    extra = (["--config", args.config] if args.config else []) + \
        [f"--set={s}" for s in args.set or []]
    taps = RunningTaps(ClusterTaps(args.log_path, brokers, args.bootstrap, args.to,
                                   args.cluster, args.interval_s, extra=extra), stderr=None)
    if not args.quiet:
        print(f"isr tap cluster: {len(taps.taps.commands())} taps on brokers "
              f"{','.join(map(str, brokers))} to {args.to}", file=sys.stderr)
    try:
        taps.start()
        while not taps.failed():
            time.sleep(0.5)
        name, code = next(iter(taps.failed().items()))
        print(f"isr tap cluster: the {name} tap stopped (exit {code}); stopping the others",
              file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: every tap stopped, 130 as every command
        return 130
    finally:
        taps.stop()


def cmd_tap_metadata(args: argparse.Namespace) -> int:
    from isr.tap.metadata import MetadataLogTap, MetadataPoller

    if (args.path is None) == (args.poll is None):
        raise ConfigError("reads a dump (PATH or -) or polls (--poll BOOTSTRAP): "
                          "one of the two")
    if args.poll is not None:
        return poll_metadata(MetadataPoller(args.cluster), args.poll, args.interval_s, args.polls,
                             args.to, options.settings_once(args), Console(stderr=True), args.quiet)
    args.timezone = "UTC"
    # A finished dump is replayed in offset order; a followed one as it grows.
    return _run_tap(args, MetadataLogTap(args.cluster, hold=not args.follow))


def _zone(name: str) -> str:
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ConfigError(f"--timezone {name}: not a time zone name (e.g. UTC, Europe/Berlin)") \
            from None
    return name
