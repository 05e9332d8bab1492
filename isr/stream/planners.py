"""The Python sources' planner processes end with their one call.

Spark starts a Python source's planning steps (create the data source, plan
its read) each in a Python worker of its own (`pyspark.sql.worker.*`, forked
by a PySpark daemon per step), once at the query's start. Like a task's
worker, Spark keeps such a worker for reuse when it reports a clean end of
stream, and closes it only after a minute without use of its kind: at 100 k
partitions the create and plan workers hold 66 + 100 MB through the query's
first minute, when its first, largest batches run (docs/benchmarks.md,
issue 23, branches `rsscap` and `pymem`). Nothing ever reuses them here: the
job plans its one query once.

`end_planner_after_call` (called where our data sources' planner-side code
runs: `schema`, `streamReader`) makes such a worker answer the end of stream
with PySpark's own "do not reuse this worker" marker (END_OF_DATA_SECTION,
which `pyspark.sql.worker.utils.worker_run` itself writes when the JVM's end
marker is missing): the JVM then destroys the worker once the call's result
is read (PythonPlannerRunner: destroyPythonWorker instead of
releasePythonWorker) instead of keeping it idle. Only in those planner
processes (their daemon's argument names the planner module); the source's
runner and the read tasks are untouched.

Each of those planners' daemons (47 MB, for the application's life: Spark
starts them with its own daemon module, whatever `spark.python.daemon.module`
says) then has nothing left to fork for: a watcher (a shell started by the
worker, in a session of its own) waits for the worker to be gone, i.e. for
the JVM's destroy, whose kill request the daemon served, and then ends the
daemon as Spark itself does (SIGTERM: it removes its socket and exits) if it
has no other worker. Should the JVM need that planner again (another query
of the application), its connection to the gone daemon fails and Spark
starts a new daemon (PythonWorkerFactory.createThroughDaemon's restart).
`ISR_PLANNER_REUSE=1` leaves the workers and the daemons to Spark as before.

The third planner, `lookup_data_sources`, runs none of the job's code: when
a session first touches its data source manager (registering or naming any
source), Spark forks a daemon and a worker that import every top-level
`pyspark_*` package to register their `DefaultSource`s, and keeps the
worker a minute and the daemon (47 + 53 MB) for the application's life. The
job names its own sources and never one found that way: `skip_source_lookup`
tells Spark's `DataSourceManager` that the lookup found nothing, before it
runs, so it never starts. `ISR_SOURCE_LOOKUP=1` lets Spark look them up.
"""

from __future__ import annotations

import os
import subprocess
import sys

ENV = "ISR_PLANNER_REUSE"
LOOKUP_ENV = "ISR_SOURCE_LOOKUP"
# Spark's object (4.x) whose `dataSourceBuilders` (None until looked up) holds
# the `pyspark_*` packages' sources its one lookup per JVM found.
DATA_SOURCE_MANAGER = "org.apache.spark.sql.execution.datasources.DataSourceManager$"
PLANNER_MODULES = "pyspark.sql.worker."
# The watcher: wait for the worker ($1) to be gone, then end its daemon ($2)
# unless the daemon forked another worker meanwhile or is no longer it.
END_DAEMON = """
while kill -0 "$1" 2>/dev/null; do sleep 0.2; done
sleep 1
[ -z "$(cat /proc/$2/task/$2/children 2>/dev/null)" ] || exit 0
grep -q pyspark.daemon /proc/$2/cmdline 2>/dev/null && kill -TERM "$2"
"""


def in_planner() -> bool:
    """True in a worker forked by a planner's daemon (`python -m
    pyspark.daemon pyspark.sql.worker.<step>`)."""
    return len(sys.argv) > 1 and sys.argv[1].startswith(PLANNER_MODULES)


def end_planner_after_call() -> None:
    if os.environ.get(ENV) == "1" or not in_planner():
        return
    try:  # PySpark's internals (pyproject pins pyspark; the test names a change)
        from pyspark.serializers import SpecialLengths
        from pyspark.sql.worker import utils
        write_int = utils.write_int
    except (ImportError, AttributeError):
        return  # another PySpark: leave its planners to Spark, planning must not fail
    if getattr(write_int, "ends_planner", False):
        return

    def ending_write_int(value: int, stream) -> None:
        # worker_run writes END_OF_STREAM last, and only there
        write_int(SpecialLengths.END_OF_DATA_SECTION
                  if value == SpecialLengths.END_OF_STREAM else value, stream)

    ending_write_int.ends_planner = True  # type: ignore[attr-defined]
    utils.write_int = ending_write_int
    _end_daemon_after(os.getpid(), os.getppid())


def _end_daemon_after(worker: int, daemon: int) -> None:
    subprocess.Popen(["sh", "-c", END_DAEMON, "end-planner-daemon", str(worker), str(daemon)],
                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                     stderr=subprocess.DEVNULL, start_new_session=True, close_fds=True)


def skip_source_lookup(spark) -> bool:
    """Record "no `pyspark_*` sources" as the driver JVM's lookup result unless
    it looked already (or `ISR_SOURCE_LOOKUP=1`); whether it did. Another
    Spark (no such object or field) is left to look them up."""
    if os.environ.get(LOOKUP_ENV) == "1":
        return False
    try:
        jvm = spark.sparkContext._jvm
        manager = getattr(getattr(jvm, DATA_SOURCE_MANAGER), "MODULE$")
        if not manager.dataSourceBuilders().isEmpty():
            return False  # looked up already: what it found stays registered
        nothing = jvm.org.apache.spark.api.python.PythonUtils.toScalaMap(jvm.java.util.HashMap())
        getattr(manager, "dataSourceBuilders_$eq")(jvm.scala.Some(nothing))
        return True
    except Exception:  # noqa: BLE001 - py4j's error for another Spark's internals
        return False
