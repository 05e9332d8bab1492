"""`isr run`: the streaming job, Kafka topics in, decisions to Kafka."""

from __future__ import annotations

import argparse
import sys

from isr.commands import options


def add_parser(sub) -> None:
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
    options.add_config_options(p)
    p.set_defaults(func=cmd_run)


def cmd_run(args: argparse.Namespace) -> int:
    from isr import preflight
    from isr.pipeline.streaming import StreamingPipeline
    from isr.stream.job import spark_session
    from isr.stream.running import quiet_failures, run_until_stopped, stopping_our_jvm
    from isr.stream.tally import RunTally

    settings = options.settings(args, [f"stream.master={args.master}"] if args.master else [])
    preflight.streaming_job(settings)
    trigger = {"availableNow": True} if args.available_now else None
    with stopping_our_jvm():
        # only a run that ends by itself waits to write the JVM's class archive
        spark = spark_session(settings, settings.stream.master,
                              write_archive=bool(args.available_now))
        quiet_failures(spark)
    with StreamingPipeline(settings, RunTally(settings.monitor.policy)) as pipeline:
        with stopping_our_jvm():
            pipeline.start(spark, trigger)
        print(f"isr: query {settings.stream.query_name} running; checkpoint "
              f"{settings.stream.checkpoint_location}", file=sys.stderr)
        return run_until_stopped(pipeline.query, tally=pipeline.tally, spark=spark)
