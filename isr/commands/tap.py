"""`isr tap SOURCE`: each source's parser and function; the tap runs in
isr/tap/output.py."""

from __future__ import annotations

import argparse
import sys
from typing import Optional

from rich.console import Console

from isr.commands import options
from isr.config import ConfigError
from isr.tap.output import poll_metadata, run_tap


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
                                     "(kafka.request.logger=DEBUG) as fetch_session (or fetch) "
                                     "and append events.")
    common(p, "the broker's kafka-request.log, or - for stdin")
    p.add_argument("--grain", choices=("session", "partition"), default="session",
                   help="session (default): one fetch_session event per follower FETCH, only the "
                        "partitions it listed (KIP-227); partition: one fetch event per partition "
                        "of its session, for monitors or jobs that do not read fetch_session")
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
                                        _topic_ids(args.topic_ids, options.settings_once(args)),
                                        grain=args.grain))


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
