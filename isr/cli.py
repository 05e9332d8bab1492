"""The `isr` command (README, "Commands")."""

from __future__ import annotations

import argparse
import json
import sys
from contextlib import nullcontext
from typing import Optional, Sequence

from rich.console import Console

from isr import __version__
from isr.config import ConfigError, Settings, load_settings, resolve_config_path, unknown_env_vars

# Exit codes: 0 done, 1 the job failed, 2 a user's mistake (one line),
# 3 replay accepted no event at all, 130 stopped by Ctrl-C / SIGTERM.
NOTHING_ACCEPTED = 3


def _settings(args: argparse.Namespace, extra: Sequence[str] = (),
              base: Optional[dict] = None) -> Settings:
    settings = load_settings(args.config, list(extra) + list(args.set or []), base)
    for line in unknown_env_vars(settings):
        print(line, file=sys.stderr)
    return settings


def _add_config_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", metavar="PATH",
                   help="TOML configuration (default: $ISR_CONFIG, else conf/isr.toml if present)")
    p.add_argument("--set", action="append", metavar="SECTION.KEY=VALUE",
                   help="override one setting (repeatable); wins over the file and ISR_* env vars")


def cmd_replay(args: argparse.Namespace) -> int:
    from isr.console import RichProgress, print_summary
    from isr.pipeline.local import replay, write_jsonl

    from isr import preflight

    extra = [f"monitor.policy={args.policy}"] if args.policy else []
    preflight.readable_inputs(args.events)
    settings = _settings(args, extra, _settings_beside(args.events, args.quiet))
    preflight.writable_file(args.output, "--output")
    preflight.writable_file(args.dead_letters, "--dead-letters")
    if args.report:
        preflight.writable_dir(args.report, "--report")
    err = Console(stderr=True)
    if not err.is_terminal:
        err.width = 120  # piped stderr: do not squeeze the summary into 80 columns
    show_progress = not args.quiet and err.is_terminal
    if args.engine == "spark":
        if args.merge:
            raise ConfigError("--merge reads the files in this process: use --engine local")
        if args.report:
            raise ConfigError("--report follows the models in this process: use --engine local")
        from isr.stream.replay_spark import replay_spark
        from isr.stream.running import stopping_our_jvm
        with stopping_our_jvm():
            result = replay_spark(args.events, settings)
    else:
        with (RichProgress(err) if show_progress else nullcontext()) as progress:
            result = replay(args.events, settings.monitor, progress, whatif=bool(args.report),
                            merge=args.merge, max_line_bytes=settings.input.max_line_bytes)
    out_cm = open(args.output, "wb") if args.output not in (None, "-") else nullcontext(
        sys.stdout.buffer)
    with out_cm as out:
        write_jsonl(result.decisions, out)
        if not args.no_state:
            write_jsonl(result.states, out)
        out.flush()
    if args.dead_letters:
        with open(args.dead_letters, "wb") as dl:
            write_jsonl(result.dead_letters, dl)
    elif result.dead_letters and not args.quiet:
        for d in result.dead_letters[:5]:
            err.print(f"dead letter {d.source}:{d.offset}: {d.reason}", markup=False)
        if len(result.dead_letters) > 5:
            err.print(f"... {len(result.dead_letters) - 5} more (use --dead-letters FILE)")
    if not args.quiet:
        print_summary(result, err, settings.monitor.replica_lag_time_max_ms)
    if args.report:
        from isr.console import print_whatif
        from isr.engine.whatif import write_report

        written = write_report(result.whatif, result.whatif_rows, args.report, args.events)
        if not args.quiet:
            print_whatif(result, err)
            err.print("report: " + ", ".join(str(p) for p in written), highlight=False)
    if result.stats.lines and not result.stats.accepted:
        print(f"isr replay: none of the {result.stats.lines} input lines was accepted "
              f"(exit code {NOTHING_ACCEPTED})", file=sys.stderr)
        return NOTHING_ACCEPTED
    return 0


def _settings_beside(events: Sequence[str], quiet: bool) -> Optional[dict]:
    """An example's own settings travel with it: `X.toml` beside `X.jsonl`
    (examples/), applied over the config file and under --policy / --set,
    and said in one line."""
    import tomllib
    from pathlib import Path

    from isr.config import flat_keys

    merged: dict = {}
    for name in events:
        sidecar = Path(name).with_suffix(".toml")
        if name == "-" or sidecar == Path(name) or not sidecar.is_file():
            continue
        try:
            table = tomllib.loads(sidecar.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError, OSError) as exc:
            raise ConfigError(f"{sidecar} (the settings beside {name}): {exc}") from None
        merged.update(table)
        if not quiet:
            shown = ", ".join(f"{k} = {json.dumps(v)}" for k, v in flat_keys(table))
            print(f"isr replay: settings from {sidecar}, beside the events: {shown} "
                  "(--policy and --set win)", file=sys.stderr)
    return merged or None


def cmd_run(args: argparse.Namespace) -> int:
    from isr import preflight
    from isr.stream.job import run_to_kafka, spark_session
    from isr.stream.running import quiet_failures, run_until_stopped, stopping_our_jvm
    from isr.stream.tally import RunTally

    settings = _settings(args, [f"stream.master={args.master}"] if args.master else [])
    preflight.streaming_job(settings)
    trigger = {"availableNow": True} if args.available_now else None
    with stopping_our_jvm():
        spark = spark_session(settings, settings.stream.master)
        quiet_failures(spark)
        tally = RunTally(settings.monitor.policy)
        query = run_to_kafka(settings, spark=spark, trigger=trigger, tally=tally)
    print(f"isr: query {settings.stream.query_name} running; checkpoint "
          f"{settings.stream.checkpoint_location}", file=sys.stderr)
    return run_until_stopped(query, tally=tally, spark=spark)


def cmd_demo(args: argparse.Namespace) -> int:
    from isr.commands.demo import run_demo

    return run_demo(args.config, args.set or [], args.duration, Console(), args.broker_port,
                    args.cluster)


def cmd_simulate(args: argparse.Namespace) -> int:
    from isr.commands.simulate import list_scenarios, simulate

    err = Console(stderr=True)
    if args.list:
        list_scenarios(Console())
        return 0
    if not args.scenario or not args.to:
        raise ConfigError("needs --scenario NAME and --to kafka://TOPIC | FILE "
                          "(--list shows the scenarios)")
    if not args.to.startswith("kafka://"):
        from isr import preflight
        preflight.writable_file(args.to, "--to")
    sent = simulate(args.scenario, args.to, args.rate, args.duration, args.seed,
                    args.partitions, lambda: _settings(args), err,
                    show_progress=not args.quiet and err.is_terminal, forever=args.forever)
    if not args.quiet:
        line = f"{sent.events} events in {sent.seconds:.1f} s ({sent.rate:,.0f} events/s"
        if sent.target_rate:
            line += f"; target {sent.target_rate:,.0f}, held {sent.rate / sent.target_rate:.1%}"
        err.print(line + f") -> {args.to}", highlight=False, soft_wrap=True)
        if sent.monitor_overrides:
            err.print("the scenario is meant to be watched with: "
                      + " ".join(f"--set {o}" for o in sent.monitor_overrides), highlight=False,
                      soft_wrap=True)
    return 0


def cmd_schema(args: argparse.Namespace) -> int:
    from isr.contract import json_schemas

    schemas = json_schemas()
    if args.type:
        merged = {**schemas["input"], **schemas["output"]}
        if args.type not in merged:
            raise ConfigError(f"unknown record type {args.type!r}; one of {sorted(merged)}")
        schemas = merged[args.type]
    print(json.dumps(schemas, indent=2, sort_keys=False))
    return 0


def cmd_check_config(args: argparse.Namespace) -> int:
    from isr import preflight
    from isr.config import redacted

    settings = _settings(args)
    preflight.kafka_client_config(settings)
    path = resolve_config_path(args.config)
    print(json.dumps(redacted(settings.model_dump(mode="json")), indent=2))
    source = f"file {path}" if path else "no file (defaults)"
    print(f"configuration OK: {source}, then ISR_* environment variables, then --set "
          "(secrets shown as ***)", file=sys.stderr)
    return 0


def cmd_files(args: argparse.Namespace) -> int:
    from pathlib import Path

    from isr.ops import write_files

    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out}: not a directory")
    for path in write_files(out):
        print(path)
    print(f"then: spark-submit --py-files isr_monitor-{__version__}-py3-none-any.whl "
          f"{out / 'isr_monitor.py'} --config {out / 'isr.toml'} (docs/streaming.md)",
          file=sys.stderr)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="isr",
        description="Kafka ISR monitor: re-computes each partition leader's ISR decisions "
                    "from replica fetch-state events.")
    parser.add_argument("--version", action="version", version=f"isr {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("replay", help="apply a bounded event file and print the decisions",
                       description="Apply JSON-lines event files (or - for stdin) to the leader "
                                   "model and write decisions as JSON lines: isr_change (and "
                                   "isr_propagation in zk mode) in event-time order, then the "
                                   "final partition_state of every partition. A summary goes "
                                   "to stderr.")
    p.add_argument("events", nargs="+", metavar="EVENTS", help="JSON-lines file(s), - for stdin")
    p.add_argument("--policy", metavar="P[,P...]",
                   help="kafka, kip16, legacy, kip501; several run side by side")
    p.add_argument("--engine", choices=["local", "spark"], default="local",
                   help="local: the leader model in this process (default); spark: the "
                        "streaming job over the file (Trigger.AvailableNow), same decisions")
    p.add_argument("--merge", action="store_true",
                   help="interleave the files by ts (the outputs of several `isr tap`s) instead "
                        "of reading them one after the other")
    p.add_argument("--output", "-o", metavar="FILE", help="decisions file (default: stdout)")
    p.add_argument("--dead-letters", metavar="FILE",
                   help="write rejected input lines here as dead_letter records")
    p.add_argument("--no-state", action="store_true",
                   help="omit the final partition_state records")
    p.add_argument("--report", metavar="DIR",
                   help="what-if report: whatif.md, whatif.json and isr_size.png (ISR size over "
                        "time per policy where the policies differ) in DIR")
    p.add_argument("--quiet", "-q", action="store_true", help="no summary or progress on stderr")
    _add_config_options(p)
    p.set_defaults(func=cmd_replay)

    p = sub.add_parser("run", help="the streaming job: Kafka topics in, decisions to Kafka",
                       description="Run the Spark Structured Streaming job (what "
                                   "jobs/isr_monitor.py runs under spark-submit): read fetch-state "
                                   "events from [input] topics, keep every partition's leader "
                                   "model in Spark's state store, write isr_change, "
                                   "partition_state, alerts and dead letters to [output] "
                                   "topics, send alerts to the [delivery] webhooks and serve "
                                   "Prometheus metrics ([metrics]).")
    p.add_argument("--master", help="Spark master (default: stream.master, local[2])")
    p.add_argument("--available-now", action="store_true",
                   help="process what is in the topics now, then stop (Trigger.AvailableNow)")
    _add_config_options(p)
    p.set_defaults(func=cmd_run)

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
    _add_config_options(p)
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("simulate", help="run a cluster scenario; events to a topic or a file",
                       description="Simulate a Kafka cluster's leader-side observations for a "
                                   "scenario of isr/sim/scenarios (or a TOML path) and write the "
                                   "fetch-state events to a file (as fast as possible) or "
                                   "produce them to Kafka (in real time, or at --rate events/s "
                                   "as a load generator that reports the rate it held).")
    p.add_argument("--scenario", metavar="NAME", help="a name from --list, or a TOML file")
    p.add_argument("--to", metavar="kafka://TOPIC|FILE",
                   help="kafka://TOPIC (brokers from [kafka]), a JSON-lines file, or - for stdout")
    p.add_argument("--rate", type=float, metavar="EVENTS_PER_S",
                   help="load generator: hold this many events/s (Kafka only); the scenario runs "
                        "for --duration seconds of wall time")
    p.add_argument("--duration", type=float, metavar="S",
                   help="seconds to run (default: the scenario's); simulated time, which is "
                        "wall time when producing in real time")
    p.add_argument("--seed", type=int, help="override the scenario's seed")
    p.add_argument("--forever", action="store_true",
                   help="kafka://TOPIC only: the scenario in real time without end (its "
                        "repeating faults keep coming), until stopped")
    p.add_argument("--partitions", type=int, default=4,
                   help="partitions of the topic if it must be created (default 4)")
    p.add_argument("--list", action="store_true", help="list the scenarios and exit")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress or summary")
    _add_config_options(p)
    p.set_defaults(func=cmd_simulate)

    _add_tap_parsers(sub)

    p = sub.add_parser("verify", help="where the computed ISR changes and the cluster's own differ",
                       description="Replay EVENTS (with the cluster's own `isr` events, e.g. from "
                                   "`isr tap server-log`) and print, per partition, where the "
                                   "computed ISR changes and the ones the cluster committed "
                                   "differ, with the numbers of both sides. Exit 1 if any differ.")
    p.add_argument("events", nargs="+", metavar="EVENTS", help="JSON-lines event files")
    p.add_argument("--policy", default="kafka", help="the policy to compare (default kafka)")
    p.add_argument("--tolerance-ms", type=int, default=2000,
                   help="a computed change and a commit this close in time are the same change "
                        "(the leader's AlterPartition round trip; default 2000); a shrink may "
                        "also differ by one ISR check interval (docs/tap.md)")
    _add_config_options(p)
    p.set_defaults(func=cmd_verify)

    p = sub.add_parser("schema", help="print the JSON Schemas of input and output records",
                       description="Print the JSON Schema of every input event and output "
                                   "record type, or of one with --type.")
    p.add_argument("--type", metavar="NAME", help="one record type, e.g. fetch or isr_change")
    p.set_defaults(func=cmd_schema)

    p = sub.add_parser("files", help="write the job script, config, Prometheus rules and "
                                     "Grafana dashboards out of the installed package",
                       description="Write the files an operator needs beside the wheel into "
                                   "DIR and print their paths: isr_monitor.py (the script to "
                                   "spark-submit), isr.toml, prometheus/rules.yml, "
                                   "grafana/dashboards/*.json.")
    p.add_argument("--out", required=True, metavar="DIR", help="directory to write (created)")
    p.set_defaults(func=cmd_files)

    p = sub.add_parser("check-config", help="validate the configuration and print it",
                       description="Validate the configuration (file, ISR_* environment, --set) "
                                   "and print the effective settings.")
    _add_config_options(p)
    p.set_defaults(func=cmd_check_config)
    return parser


def _add_tap_parsers(sub) -> None:
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
        _add_config_options(p)

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
        from isr.commands.tap import events_of
        from isr.tap.lines import read_lines
        from isr.tap.metadata import MetadataLogTap

        preflight.readable_inputs([where], "a metadata dump")
        dump = MetadataLogTap()
        max_line_bytes = settings_factory().input.max_line_bytes
        for _ in events_of(dump, read_lines(where, False, max_line_bytes=max_line_bytes)):
            pass
        return dump.topic_name
    from isr.tap.resolve import ClusterTopicIds

    return ClusterTopicIds.reachable(where, settings_factory().kafka.connect_timeout_s)


def _settings_once(args: argparse.Namespace):
    """The settings, loaded (and their warnings printed) once per command."""
    def load() -> Settings:
        if not hasattr(args, "_loaded_settings"):
            args._loaded_settings = _settings(args)
        return args._loaded_settings
    return load


def _run_tap(args: argparse.Namespace, tap) -> int:
    from isr.commands.tap import run_tap

    settings = _settings_once(args)
    return run_tap(tap, args.path, args.follow, args.to, settings, Console(stderr=True),
                   args.quiet, settings().input.max_line_bytes, command_label(args))


def cmd_tap_request_log(args: argparse.Namespace) -> int:
    from isr.tap.request_log import RequestLogTap

    zone = _zone(args.timezone)
    return _run_tap(args, RequestLogTap(args.broker, args.cluster, zone,
                                        _topic_ids(args.topic_ids, _settings_once(args))))


def cmd_tap_server_log(args: argparse.Namespace) -> int:
    from isr.tap.server_log import ServerLogTap

    return _run_tap(args, ServerLogTap(args.cluster, _zone(args.timezone)))


def cmd_tap_state_change(args: argparse.Namespace) -> int:
    from isr.tap.state_change import StateChangeTap

    from isr.tap.assignment import replicas_from

    settings = _settings_once(args)()
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
        from isr.commands.tap import poll_metadata

        return poll_metadata(MetadataPoller(args.cluster), args.poll, args.interval_s, args.polls,
                             args.to, _settings_once(args), Console(stderr=True), args.quiet)
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


def cmd_verify(args: argparse.Namespace) -> int:
    from isr import preflight
    from isr.commands.verify import describe, verify

    if "-" in args.events:
        raise ConfigError("reads its files twice (the replay, then the cluster's side): give "
                          "files, not - (stdin)")
    preflight.readable_inputs(args.events)
    settings = _settings(args)
    reports = verify(args.events, settings.monitor, args.policy, args.tolerance_ms,
                     settings.input.max_line_bytes)
    if not reports:
        print("no ISR changes on either side: nothing to compare", file=sys.stderr)
        return 0
    t0 = min([c.ts for r in reports for c, _ in r.matched] +
             [c.ts for r in reports for c in r.computed_only] +
             [c.ts for r in reports for c, _ in r.cluster_only] or [0])
    differ = [r for r in reports if not r.agrees]
    for r in differ:
        print("\n".join(describe(r, t0)))
    agreed = sum(len(r.matched) for r in reports)
    given = sum(len(r.given) for r in reports)
    states = f"; {given} ISRs set by leader events agree" if given else ""
    print(f"{len(reports)} partitions, {agreed} ISR changes agree, {len(differ)} partitions "
          f"differ (policy {args.policy}, tolerance {args.tolerance_ms} ms{states})")
    return 1 if differ else 0


def command_label(args: argparse.Namespace) -> str:
    """The command the user ran, as every error line names it: `isr replay`,
    `isr tap server-log`."""
    label = f"isr {args.command}"
    if args.command == "tap":
        label += f" {args.source}"
    return label


def main(argv: Optional[Sequence[str]] = None) -> int:
    from isr import signals

    args = build_parser().parse_args(argv)
    label = command_label(args)
    try:
        with signals.handled(label):  # SIGTERM stops the command as Ctrl-C does
            return args.func(args)
    except ConfigError as exc:
        print(f"{label}: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:
        return 130
    except OSError as exc:  # a file the user named, going wrong during the work
        where = f": {exc.filename}" if exc.filename else ""
        print(f"{label}: {exc.strerror or exc}{where}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
