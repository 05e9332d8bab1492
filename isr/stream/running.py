"""Keeping the streaming job running in the foreground (`isr run`,
jobs/isr_monitor.py): Ctrl-C or SIGTERM stop it in a few seconds with one
line, and a failure ends in one line too, the whole report in a file."""

from __future__ import annotations

import logging
import os
import signal
import sys
import tempfile
import time
from contextlib import contextmanager
from typing import Iterator, Optional

from isr.errors import one_line_reason
from isr.signals import StopOnSignal

# Spark's query.stop() may wait for a micro-batch; after this long a stop is
# forced (isr/signals.py), so a service manager's stop never becomes a kill.
STOP_GRACE_S = 10.0

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


@contextmanager
def stopping_our_jvm() -> Iterator[None]:
    """Ctrl-C / SIGTERM while pyspark starts its JVM can land after the JVM
    began and before it connected; that JVM then lives on without us (its
    gateway thread keeps it up). On an interrupt, the child processes this
    process started meanwhile get SIGTERM."""
    before = _children()
    root = logging.getLogger()
    root.addFilter(_interrupt_noise)
    try:
        yield
    except KeyboardInterrupt:
        for pid in _children() - before:
            try:
                os.kill(pid, signal.SIGTERM)
            except OSError:
                pass  # gone already
        raise
    finally:
        root.removeFilter(_interrupt_noise)


def quiet_py4j() -> None:
    """The run is ending with Py4J calls still under way (a query being
    planned): their failures as the JVM goes are logged by py4j and pyspark
    with tracebacks; nothing in them is for the user."""
    for name in ("py4j", "pyspark"):
        logging.getLogger(name).setLevel(logging.CRITICAL + 1)


def _interrupt_noise(record: logging.LogRecord) -> bool:
    """py4j logs an interrupted call with its traceback on the root logger:
    a stop, not an error."""
    return not str(record.msg).startswith("KeyboardInterrupt while")


def _end_local_python_workers() -> None:
    """SIGKILL the PySpark worker processes below this one (local mode; a
    cluster's run on its executors). Stopped under them, the workers find
    their sockets closed and PySpark's daemon prints the BrokenPipe or
    EOFError tracebacks, which the JVM copies to our stderr: a stop is not an
    error. Killing them first is safe: the micro-batch cut short is done
    again on the next start (the same as a kill -9 of the whole job)."""
    for pid in descendants(_parents(), {os.getpid()}) - {os.getpid()}:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read()
            if b"python" in os.path.basename(cmdline.split(b"\0")[0]) and b"pyspark" in cmdline:
                os.kill(pid, signal.SIGKILL)
        except OSError:
            pass  # gone already


def descendants(parents: dict[int, int], roots: set[int]) -> set[int]:
    """`roots` and every process below them (`parents`: pid -> parent pid,
    as `_parents` gives it)."""
    below, grew = set(roots), True
    while grew:
        grew = False
        for pid, ppid in parents.items():
            if ppid in below and pid not in below:
                below.add(pid)
                grew = True
    return below


def _parents() -> dict[int, int]:
    """pid -> parent pid of every process readable now (Linux /proc;
    elsewhere none)."""
    parents = {}
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    parents[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    return parents


def _children() -> set[int]:
    """This process's children (Linux /proc; elsewhere none are found)."""
    me = os.getpid()
    return {pid for pid, ppid in _parents().items() if ppid == me}


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


class ExecutorWatch:
    """Says in the job's log when an executor goes (its worker lost: Spark
    runs its tasks again elsewhere) or comes. Nothing in local mode."""

    def __init__(self, spark, name: str):
        self._sc, self._name = spark.sparkContext, name
        self._known: Optional[set[str]] = None

    def _executors(self) -> set[str]:
        ids = self._sc._jsc.sc().getExecutorIds()  # a Scala Seq; the driver is not in it
        return {str(ids.apply(i)) for i in range(ids.size())}

    def poll(self) -> None:
        try:
            now = self._executors()
        except Exception:  # noqa: BLE001 - a stopping context: nothing to say
            return
        if self._known is not None:
            for gone in sorted(self._known - now):
                print(f"{self._name}: executor {gone} lost (its worker or process died); "
                      "Spark runs its tasks again on the other executors", file=sys.stderr)
            for new in sorted(now - self._known):
                print(f"{self._name}: executor {new} joined", file=sys.stderr)
        self._known = now


def run_until_stopped(query, name: str = "isr", tally=None, spark=None) -> int:
    """Wait for the query: 0 when it ends by itself (--available-now), 130
    after Ctrl-C / SIGTERM, 1 when it fails (one line on stderr). `tally`
    (stream.tally.RunTally): its summary is printed when the job ends.
    `spark`: executors lost or added are reported (ExecutorWatch)."""
    code = _wait(query, name, ExecutorWatch(spark, name) if spark is not None else None)
    if tally is not None and code != 1:
        try:
            tally.observe_query(query)
        except Exception:  # noqa: BLE001 - a stopped session: the listener's counts stand
            pass
        tally.print()
    return code


def _wait(query, name: str, watch: "ExecutorWatch | None" = None) -> int:
    with StopOnSignal(grace_s=STOP_GRACE_S) as stop:
        while not stop():
            try:
                if query.awaitTermination(0.5):
                    break
                if watch is not None:
                    watch.poll()
            except Exception as exc:  # noqa: BLE001 - the query failed
                return _failed(exc, name)
        if stop():
            print(f"{name}: stopping (a micro-batch cut short is done again on the next "
                  "start, its records written once)", file=sys.stderr)
            started = time.monotonic()
            _end_local_python_workers()
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
