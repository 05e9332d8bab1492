"""spark-submit entry point of the ISR monitor.

    spark-submit --master local[2] jobs/isr_monitor.py --conf conf/isr.toml
    spark-submit --master yarn --py-files dist/isr_monitor-0.1.0-py3-none-any.whl \\
        jobs/isr_monitor.py --conf isr.toml --set kafka.bootstrap_servers=broker:9092

The package must be importable by the driver and the executors: install it
in the cluster's Python environment, or ship the wheel with --py-files (its
dependencies, pydantic among them, must then be installed on the nodes).
"""

from __future__ import annotations

import argparse
import os
import sys


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="isr_monitor.py")
    parser.add_argument("--conf", dest="config", help="TOML configuration (conf/isr.toml)")
    parser.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE")
    parser.add_argument("--available-now", action="store_true",
                        help="process what is in the topics now, then stop")
    args = parser.parse_args(argv)

    from pyspark.sql import SparkSession

    from isr import preflight
    from isr.config import ConfigError, load_settings, unknown_env_vars
    from isr.stream.job import run_to_kafka, spark_session
    from isr.stream.running import quiet_failures, run_until_stopped

    try:
        settings = load_settings(args.config, args.set)
        for line in unknown_env_vars(settings):
            print(line, file=sys.stderr)
        preflight.streaming_job(settings)
    except ConfigError as exc:
        print(f"isr_monitor: {exc}", file=sys.stderr)
        return 2
    # Under spark-submit the JVM is already up (and PYSPARK_GATEWAY_PORT set):
    # its --master wins. `python jobs/isr_monitor.py` falls back to stream.master.
    under_spark_submit = "PYSPARK_GATEWAY_PORT" in os.environ
    spark = SparkSession.getActiveSession() or spark_session(
        settings, None if under_spark_submit else settings.stream.master)
    trigger = {"availableNow": True} if args.available_now else None
    quiet_failures(spark)
    query = run_to_kafka(settings, spark=spark, trigger=trigger)
    return run_until_stopped(query, "isr_monitor")


if __name__ == "__main__":
    sys.exit(main())
