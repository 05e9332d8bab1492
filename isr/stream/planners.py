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
runner and the read tasks are untouched. `ISR_PLANNER_REUSE=1` leaves the
workers to Spark as before. The daemons (47 MB each) stay: Spark starts them
with its own daemon module, whatever `spark.python.daemon.module` says.
"""

from __future__ import annotations

import os
import sys

ENV = "ISR_PLANNER_REUSE"
PLANNER_MODULES = "pyspark.sql.worker."


def in_planner() -> bool:
    """True in a worker forked by a planner's daemon (`python -m
    pyspark.daemon pyspark.sql.worker.<step>`)."""
    return len(sys.argv) > 1 and sys.argv[1].startswith(PLANNER_MODULES)


def end_planner_after_call() -> None:
    if os.environ.get(ENV) == "1" or not in_planner():
        return
    from pyspark.serializers import SpecialLengths
    from pyspark.sql.worker import utils

    write_int = utils.write_int
    if getattr(write_int, "ends_planner", False):
        return

    def ending_write_int(value: int, stream) -> None:
        # worker_run writes END_OF_STREAM last, and only there
        write_int(SpecialLengths.END_OF_DATA_SECTION
                  if value == SpecialLengths.END_OF_STREAM else value, stream)

    ending_write_int.ends_planner = True  # type: ignore[attr-defined]
    utils.write_int = ending_write_int
