"""The Spark path composed from the configuration: the configured Kafka
source, the packing stage, the state buckets' engines with the standard
listeners (stream/job.py builds the query), and the configured sinks
(pipeline/sinks.py), which are opened before the query starts and closed
when the run ends. `isr run`, the spark-submit job and both demos run it."""

from __future__ import annotations

import json
from typing import Any, Callable, Optional

from isr.config import Settings
from isr.pipeline.sinks import Outputs, configured_sinks
from isr.sinks.base import Sink
from isr.stream import job
from isr.signals import Stopped, call_until
from isr.stream.running import quiet_py4j, run_until_stopped


class StreamingPipeline:
    """source -> decode -> sequencer -> engine -> listeners -> sinks, on Spark.

    `start` opens the sinks and starts the query; `close` closes the sinks
    (once); `run` does both around waiting for the query (Ctrl-C, SIGTERM,
    a failure: stream/running.py)."""

    def __init__(self, settings: Settings, tally: Optional[Sink] = None,
                 sinks: Optional[list[Sink]] = None) -> None:
        """`tally` (stream.tally.RunTally): counts what the job read and wrote,
        for the end-of-run summary. `sinks`: instead of the configured ones
        (creating the output topics is part of building them)."""
        self.settings = settings
        self.tally = tally
        self.outputs = Outputs(configured_sinks(settings, tally) if sinks is None else sinks)
        self.query: Any = None  # the StreamingQuery, once started
        self._spark = None  # the session start() ran the query in
        self._closed = False

    def start(self, spark=None, trigger: Optional[dict] = None, master: Optional[str] = None,
              stop: Optional[Callable[[], bool]] = None):
        """Start the query (a new session on `master` if no `spark` is given).
        `stop`: a stop flag (a command whose SIGTERM handler only sets one):
        planning the query waits for it too, and raises signals.Stopped if it
        comes first; the query the planning may still start is stopped."""
        settings = self.settings
        spark = self._spark = spark or job.spark_session(settings, master)
        self.outputs.open(settings, lambda on_progress: watch_progress(
            spark, settings.stream.query_name, on_progress))

        def plan():
            query = job.start(spark, settings, self.outputs.write_batch, trigger=trigger,
                              partition_metrics=self.outputs.wants_partition_metrics)
            if self._closed:  # given up meanwhile: no batch may reach a closed sink
                query.stop()
            return query

        if stop is None:
            self.query = plan()
        else:
            try:
                self.query = call_until(plan, stop, "isr-query-start")
            except Stopped:
                quiet_py4j()  # its calls fail as the process ends: not the user's concern
                raise
        self.outputs.started(self.query.id)  # the checkpoint's id: the same across restarts
        return self.query

    def run(self, spark, trigger: Optional[dict] = None, name: str = "isr") -> int:
        """Start, wait until the query ends or is stopped, close: the exit code
        of stream/running.run_until_stopped."""
        try:
            self.start(spark, trigger)
            return run_until_stopped(self.query, name, self.tally, spark)
        finally:
            self.close()

    def close(self) -> None:
        """The run ended: the query stops if it still runs (no batch may reach
        a closed sink, nor write to a checkpoint being removed), the JVM's
        state stores close (job.close_state_stores), then every sink closes
        (its producer flushed, its server and threads stopped), once."""
        if self._closed:
            return
        self._closed = True
        if self.query is not None and self.query.isActive:
            try:
                self.query.stop()
            except Exception:  # noqa: BLE001 - stopping is all that is asked
                pass
        if self._spark is not None:  # before the process, and its JVM, exit
            job.close_state_stores(self._spark)
        self.outputs.close()

    def __enter__(self) -> "StreamingPipeline":
        return self

    def __exit__(self, *_exc) -> None:
        self.close()


def run_to_kafka(settings: Settings, spark=None, trigger: Optional[dict] = None,
                 master: Optional[str] = None, tally: Optional[Sink] = None):
    """Start the configured pipeline and return its query (tests, and callers
    that wait for the query themselves; its sinks stay open)."""
    return StreamingPipeline(settings, tally).start(spark, trigger, master)


def watch_progress(spark, query_name: str, on_progress: Callable[[dict], None]) -> None:
    """Call `on_progress(progress as a dict)` after each micro-batch of the query.

    The JVM hands each event to `ProgressJson`, which asks it for the
    progress's JSON only (two calls). PySpark's own listener adapter turns
    every event into Python objects first, field by field: each Java map and
    list it iterates ends in a Java exception, which PySpark's error handler
    checks against its exception classes through py4j, and each such check
    looked up `py4j.reflection.TypeUtil` by name, a search of every jar on
    the JVM's class path that finds nothing twice (docs/benchmarks.md, issue
    23, branch `sparkcost`: ~160 such checks per micro-batch)."""
    from pyspark.sql.streaming import StreamingQueryListener

    class Listener(StreamingQueryListener):
        def onQueryStarted(self, event):  # noqa: N802 - Spark's names
            pass

        def onQueryProgress(self, event):  # noqa: N802 - not called: ProgressJson is
            pass

        def onQueryIdle(self, event):  # noqa: N802
            pass

        def onQueryTerminated(self, event):  # noqa: N802
            pass

        @property
        def _jlistener(self):  # what PySpark's addListener registers in the JVM
            if not hasattr(self, "_jlistenerobj"):
                self._jlistenerobj = spark.sparkContext._jvm.PythonStreamingQueryListenerWrapper(
                    ProgressJson(query_name, on_progress))
            return self._jlistenerobj

    spark.streams.addListener(Listener())


class ProgressJson:
    """A Python implementation (py4j) of Spark's
    PythonStreamingQueryListener that passes the query's progress reports
    on as dicts (the JVM's `StreamingQueryProgress.json`, as PySpark's
    `progress.json` gives it) and ignores the other events."""

    def __init__(self, query_name: str, on_progress: Callable[[dict], None]) -> None:
        self.query_name, self.on_progress = query_name, on_progress

    def onQueryStarted(self, jevent) -> None:  # noqa: N802 - Spark's names
        pass

    def onQueryProgress(self, jevent) -> None:  # noqa: N802
        progress = json.loads(jevent.progress().json())
        if progress.get("name") == self.query_name:
            self.on_progress(progress)

    def onQueryIdle(self, jevent) -> None:  # noqa: N802
        pass

    def onQueryTerminated(self, jevent) -> None:  # noqa: N802
        pass

    class Java:
        implements = ["org.apache.spark.sql.streaming.PythonStreamingQueryListener"]
