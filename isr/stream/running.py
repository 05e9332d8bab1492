"""Keeping the streaming job running in the foreground (`isr run`,
jobs/isr_monitor.py): Ctrl-C or SIGTERM stop it in a few seconds with one
line, and a failure ends in one line too, the whole report in a file."""

from __future__ import annotations

import logging
import sys
import tempfile
import time

from isr.errors import one_line_reason
from isr.signals import StopOnSignal

# Loggers that print a failed query's stack traces (the Python worker's
# traceback, once per task attempt and again for the query): the report file
# has them, the terminal gets one line.
QUIET_LOGGERS = ("org.apache.spark.sql.execution.streaming",
                 "org.apache.spark.sql.execution.python",
                 "org.apache.spark.api.python",
                 "org.apache.spark.executor.Executor",
                 "org.apache.spark.scheduler.TaskSetManager",
                 "org.apache.spark.scheduler.DAGScheduler",
                 "org.apache.spark.util.Utils")


def quiet_failures(spark) -> None:
    """Silence the loggers that repeat a failure's stack traces."""
    logging.getLogger("py4j").setLevel(logging.CRITICAL)
    _quiet_accumulator_server(spark.sparkContext)
    try:
        jvm = spark.sparkContext._jvm
        configurator = jvm.org.apache.logging.log4j.core.config.Configurator
        off = jvm.org.apache.logging.log4j.Level.OFF
        for name in QUIET_LOGGERS:
            configurator.setLevel(name, off)
    except Exception:  # noqa: BLE001 - another logging backend: keep its output
        pass


def _quiet_accumulator_server(sc) -> None:
    """PySpark's accumulator server prints a traceback when the JVM hangs up
    on it at shutdown (EOFError while it polls for updates): a stop, not an
    error, so it is dropped; anything else is still printed."""
    server = getattr(sc, "_accumulatorServer", None)
    if server is None:
        return
    printed = server.handle_error

    def handle_error(request, client_address) -> None:
        if not isinstance(sys.exc_info()[1], (EOFError, ConnectionError)):
            printed(request, client_address)

    server.handle_error = handle_error


def run_until_stopped(query, name: str = "isr", tally=None) -> int:
    """Wait for the query: 0 when it ends by itself (--available-now), 130
    after Ctrl-C / SIGTERM, 1 when it fails (one line on stderr). `tally`
    (stream.tally.RunTally): its summary is printed when the job ends."""
    code = _wait(query, name)
    if tally is not None and code != 1:
        try:
            tally.observe_query(query)
        except Exception:  # noqa: BLE001 - a stopped session: the listener's counts stand
            pass
        tally.print()
    return code


def _wait(query, name: str) -> int:
    with StopOnSignal() as stop:
        while not stop():
            try:
                if query.awaitTermination(0.5):
                    break
            except Exception as exc:  # noqa: BLE001 - the query failed
                return _failed(exc, name)
        if stop():
            print(f"{name}: stopping (a micro-batch cut short is done again on the next "
                  "start, its records written once)", file=sys.stderr)
            started = time.monotonic()
            try:
                query.stop()
            except Exception:  # noqa: BLE001 - stopping is all that is asked
                pass
            print(f"{name}: stopped in {time.monotonic() - started:.1f} s", file=sys.stderr)
            return 130
        failure = query.exception()
        return _failed(failure, name) if failure is not None else 0

def _failed(exc, name: str) -> int:
    text = str(exc) if exc is not None else ""
    with tempfile.NamedTemporaryFile("w", prefix="isr-run-", suffix=".log",
                                     delete=False) as report:
        report.write(text + "\n")
    print(f"{name}: the job stopped: {one_line_reason(text)} (report: {report.name})",
          file=sys.stderr)
    return 1
