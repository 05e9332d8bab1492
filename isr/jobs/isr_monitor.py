"""The streaming job under spark-submit: the commands are in
docs/streaming.md, "On a cluster" (tests/integration/test_cluster.py runs
them as written there).

The script (jobs/isr_monitor.py, or the copy `isr files --out DIR` writes
from an installed wheel) only calls `main` here. A wheel given to --py-files
is on the driver's path, but PySpark puts only .zip, .egg and .jar files on
the executors' path (pyspark/core/context.py, PACKAGE_EXTENSIONS): the job
hands Spark a .zip copy of each shipped wheel (`ship_wheels`) before it
plans anything, so the executors import the same package.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

NAME = "isr_monitor"


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="isr_monitor.py")
    parser.add_argument("--config", metavar="PATH",
                        help="TOML configuration (default: $ISR_CONFIG, else conf/isr.toml)")
    # The job's old name for the same flag (`isr` always said --config).
    parser.add_argument("--conf", dest="old_conf", metavar="PATH", help=argparse.SUPPRESS)
    parser.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE")
    parser.add_argument("--available-now", action="store_true",
                        help="process what is in the topics now, then stop")
    args = parser.parse_args(argv)
    if args.old_conf is not None:
        print(f"{NAME}: --conf is the old name of --config; use --config", file=sys.stderr)
        if args.config is None:
            args.config = args.old_conf
        elif args.config != args.old_conf:
            parser.error("--config and --conf name different files; give --config only")
    return args


def ship_wheels(sc) -> list[str]:
    """Add a .zip copy of every .whl of --py-files (spark.submit.pyFiles) to
    the SparkContext, which puts .zip files on the executors' sys.path. A
    pure-Python wheel is a zip archive with the package at its root.

    The Python processes the driver's JVM starts (the planner of the Python
    Kafka source: pyspark/sql/streaming/python_streaming_source_runner.py)
    do not add the SparkContext's includes to their path; they take
    PYTHONPATH from the environment of the Python functions
    (SparkContext.environment), which therefore names the driver's copy.
    On an executor that path does not exist and Python skips it."""
    shipped = []
    pyfiles = sc.getConf().get("spark.submit.pyFiles", "") or ""
    tmp = Path(tempfile.mkdtemp(prefix="isr-wheels-"))
    for uri in filter(None, pyfiles.split(",")):
        path = uri[len("file:"):] if uri.startswith("file:") else uri
        if not path.endswith(".whl") or not os.path.isfile(path):
            continue
        as_zip = tmp / (Path(path).name[:-len(".whl")] + ".zip")
        shutil.copyfile(path, as_zip)
        sc.addPyFile(str(as_zip))
        shipped.append(str(as_zip))
    if shipped:
        sc.environment["PYTHONPATH"] = os.pathsep.join(
            shipped + [p for p in [sc.environment.get("PYTHONPATH")] if p])
    return shipped


def main(argv=None) -> int:
    args = parse_args(argv)

    from pyspark.sql import SparkSession

    from isr import preflight
    from isr.config import ConfigError, load_settings, unknown_env_vars
    from isr.pipeline.streaming import StreamingPipeline
    from isr.stream.job import spark_session
    from isr.stream.running import quiet_failures
    from isr.stream.tally import RunTally

    try:
        settings = load_settings(args.config, args.set)
        for line in unknown_env_vars(settings):
            print(line, file=sys.stderr)
        preflight.streaming_job(settings)
    except ConfigError as exc:
        print(f"{NAME}: {exc}", file=sys.stderr)
        return 2
    # Under spark-submit the JVM is already up (and PYSPARK_GATEWAY_PORT set):
    # its --master wins. `python jobs/isr_monitor.py` falls back to stream.master.
    under_spark_submit = "PYSPARK_GATEWAY_PORT" in os.environ
    spark = SparkSession.getActiveSession() or spark_session(
        settings, None if under_spark_submit else settings.stream.master,
        write_archive=bool(args.available_now))  # as `isr run`'s
    ship_wheels(spark.sparkContext)
    trigger = {"availableNow": True} if args.available_now else None
    quiet_failures(spark)
    try:
        pipeline = StreamingPipeline(settings, RunTally(settings.monitor.policy))
    except ConfigError as exc:  # an output.sinks entry that cannot be built
        print(f"{NAME}: {exc}", file=sys.stderr)
        return 2
    return pipeline.run(spark, trigger, NAME)


if __name__ == "__main__":
    sys.exit(main())
