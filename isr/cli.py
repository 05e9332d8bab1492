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


def _settings(args: argparse.Namespace, extra: Sequence[str] = ()) -> Settings:
    settings = load_settings(args.config, list(extra) + list(args.set or []))
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
    from isr.replay import replay, write_jsonl

    from isr import preflight

    extra = [f"monitor.policy={args.policy}"] if args.policy else []
    settings = _settings(args, extra)
    preflight.readable_inputs(args.events)
    preflight.writable_file(args.output, "--output")
    preflight.writable_file(args.dead_letters, "--dead-letters")
    if args.report:
        preflight.writable_dir(args.report, "--report")
    err = Console(stderr=True)
    if not err.is_terminal:
        err.width = 120  # piped stderr: do not squeeze the summary into 80 columns
    show_progress = not args.quiet and err.is_terminal
    if args.engine == "spark":
        if args.report:
            raise ConfigError("--report follows the models in this process: use --engine local")
        from isr.stream.replay_spark import replay_spark
        result = replay_spark(args.events, settings)
    else:
        with (RichProgress(err) if show_progress else nullcontext()) as progress:
            result = replay(args.events, settings.monitor, progress, whatif=bool(args.report))
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
        print_summary(result, err)
    if args.report:
        from isr.console import print_whatif
        from isr.whatif import write_report

        written = write_report(result.whatif, result.whatif_rows, args.report, args.events)
        if not args.quiet:
            print_whatif(result, err)
            err.print("report: " + ", ".join(str(p) for p in written), highlight=False)
    if result.stats.lines and not result.stats.accepted:
        print(f"isr: replay: none of the {result.stats.lines} input lines was accepted "
              f"(exit code {NOTHING_ACCEPTED})", file=sys.stderr)
        return NOTHING_ACCEPTED
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from isr import preflight
    from isr.stream.job import run_to_kafka, spark_session
    from isr.stream.running import quiet_failures, run_until_stopped

    settings = _settings(args, [f"stream.master={args.master}"] if args.master else [])
    preflight.streaming_job(settings)
    trigger = {"availableNow": True} if args.available_now else None
    spark = spark_session(settings, settings.stream.master)
    quiet_failures(spark)
    query = run_to_kafka(settings, spark=spark, trigger=trigger)
    print(f"isr: query {settings.stream.query_name} running; checkpoint "
          f"{settings.stream.checkpoint_location}", file=sys.stderr)
    return run_until_stopped(query)


def cmd_demo(args: argparse.Namespace) -> int:
    from isr.demo import run_demo

    return run_demo(args.config, args.set or [], args.duration, Console())


def cmd_simulate(args: argparse.Namespace) -> int:
    from isr.sim.command import list_scenarios, simulate

    err = Console(stderr=True)
    if args.list:
        list_scenarios(Console())
        return 0
    if not args.scenario or not args.to:
        raise ConfigError("simulate needs --scenario NAME and --to kafka://TOPIC | FILE "
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

    p = sub.add_parser("demo", help="embedded broker + simulator + job, ISR changes shown live",
                       description="Start the embedded Kafka-protocol broker (Tansu), the "
                                   "cluster simulator's `demo` scenario in real time (broker 3 "
                                   "pauses longer than the lag limit every 40 s) and the "
                                   "streaming job, and show ISR changes as the job writes them. "
                                   "Ctrl-C stops everything.")
    p.add_argument("--duration", type=float, metavar="SECONDS",
                   help="stop after this long (default: until Ctrl-C)")
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

    p = sub.add_parser("schema", help="print the JSON Schemas of input and output records",
                       description="Print the JSON Schema of every input event and output "
                                   "record type, or of one with --type.")
    p.add_argument("--type", metavar="NAME", help="one record type, e.g. fetch or isr_change")
    p.set_defaults(func=cmd_schema)

    p = sub.add_parser("check-config", help="validate the configuration and print it",
                       description="Validate the configuration (file, ISR_* environment, --set) "
                                   "and print the effective settings.")
    _add_config_options(p)
    p.set_defaults(func=cmd_check_config)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except ConfigError as exc:
        print(f"isr: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:
        return 130
    except OSError as exc:  # a file the user named, going wrong during the work
        where = f": {exc.filename}" if exc.filename else ""
        print(f"isr: {exc.strerror or exc}{where}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
