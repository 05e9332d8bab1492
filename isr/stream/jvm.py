"""JVM options for Spark's short runs, in a module of its own: the demo and
the tests name them without importing pyspark; the driver's class archive."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

# A JVM that starts on about half the CPU: the client compiler only (C2's
# compilations are most of a starting JVM's CPU) and the serial collector.
# Measured on 2 shared cores: a local session's start and first query took
# 31.7 CPU-seconds of the JVM by default, 17.2 with these (docs/streaming.md).
# For short runs (the demo, the tests).
QUICK_START_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
# The driver JVM of every session `isr` starts (job.driver_java_options):
# the same options. Measured on the realistic clusters through `isr run`
# (issue 23, docs/benchmarks.md, branch `sparkcost`): with the JVM's
# defaults the compiler threads (C2 most) were ~35 % of the JVM's CPU and
# G1's threads ~12 %, and C2 kept compiling in every micro-batch (~1 CPU s
# a batch at 100 k partitions); with these the JVM took 37-42 % less CPU
# and the batches after the first were not slower. ISR_SPARK_JAVA_OPTIONS
# (or SPARK_SUBMIT_OPTS, JAVA_TOOL_OPTIONS, ...) choosing a compiler
# (-XX:TieredStopAtLevel=4) or a collector (-XX:+UseG1GC) replaces that one.
# And the serial collector's young generation at most 128 MB: by default it
# is half the old one, which the collector grows to ~1.7x the heap's live
# peak (the batch that collects every partition's state: 216-377 MB at
# 100 k partitions), so the heap reached 0.8-0.9 GB of the 1g; capped, the
# old generation may grow to ~0.9 GB (~0.68 GB before: more room for a
# bigger cluster's batch) and the heap stays ~0.2 GB smaller in such a run,
# with no more collector CPU the runs could see (docs/benchmarks.md, issue
# 23, branch `driverrss`). Another collector chosen drops it too
# (job.jvm_defaults): G1 sizes its young generation itself.
DRIVER_YOUNG = "-XX:MaxNewSize=128m"
# And at least 20 % of the heap free after a full collection (the JVM's
# default: 40 %): the old generation then grows to ~1.25x the live set
# instead of ~1.67x (the live peak, 216-377 MB at 100 k partitions, is the
# batch that sends every partition's state). Measured at 100 k partitions:
# the heap's largest size 0.60-0.63 GB instead of 0.63-0.70, the JVM's peak
# RSS 0.08-0.12 GB lower (with RocksDB's smaller budget), 0-3 more full
# collections, no CPU the runs could see (docs/benchmarks.md, issue 23, branch
# `jvmheap`; 20 % with MaxHeapFreeRatio=40, which also gave the room back
# after such a batch, tripled the full collections). -XX:MinHeapFreeRatio
# or MaxHeapFreeRatio given elsewhere replaces it (the JVM refuses a
# minimum above the maximum); another collector drops it too
# (job.jvm_defaults).
DRIVER_HEAP_FREE = "-XX:MinHeapFreeRatio=20"
DRIVER_JVM = f"{QUICK_START_JVM} {DRIVER_YOUNG} {DRIVER_HEAP_FREE}"


# ------------------------------------------------------------ class archive
# The driver JVM's class-data sharing archive (isr/jvmarchive.py): the ~20,000
# classes a session loads, mapped instead of read from Spark's jars. The
# first session that ends cleanly writes it; it waits for its JVM to exit
# (the JVM writes at its exit) at most this long, once.
ARCHIVE_WAIT_S = 120.0
# JVM options that choose class-data sharing themselves: ours stay out.
CDS_OPTIONS = ("-Xshare", "-XX:SharedArchiveFile", "-XX:ArchiveClassesAtExit",
               "-XX:+RecordDynamicDumpInfo", "-XX:+AutoCreateSharedArchive")


def spark_java() -> str | None:
    """The java spark-class runs: $JAVA_HOME/bin/java, else `java` on PATH."""
    import shutil

    home = os.environ.get("JAVA_HOME")
    return os.path.join(home, "bin", "java") if home else shutil.which("java")


def driver_archive(jars: Sequence[str]):
    """The driver's archive stem (jvmarchive.stem): keyed by the java binary,
    Spark's own jars and the session's spark.jars (the Kafka connector's),
    each jar by its path, size and time. None without a java."""
    from pyspark.find_spark_home import _find_spark_home

    from isr import jvmarchive
    from isr.kafka.jars import cache_root

    java = spark_java()
    if not java or not os.path.exists(java):
        return None
    spark_jars = sorted(str(p) for p in Path(_find_spark_home(), "jars").glob("*.jar"))
    return jvmarchive.stem(cache_root() / "spark-classes", "driver", java,
                           jvmarchive.files_key(spark_jars), jvmarchive.files_key(jars))


def driver_archive_options(jars: Sequence[str], chosen: Sequence[str],
                           write: bool = True) -> list[str]:
    """The driver JVM's options for its class archive: map the kept one, or
    else, if `write`, write one at this session's end (unless another live
    session is writing it now). None when ISR_CLASS_ARCHIVE=0 or when `chosen` (the
    JVM options given elsewhere) set class-data sharing themselves."""
    from isr import jvmarchive

    if not jvmarchive.enabled() or any(o.startswith(CDS_OPTIONS) for o in chosen):
        return []
    try:
        stem = driver_archive(jars)
        if stem is None:
            return []
        return jvmarchive.options(stem, write and _may_write(stem))
    except (OSError, ImportError):  # no cache to write, no pyspark: start as before
        return []


def _may_write(stem: Path) -> bool:
    """Whether this session may write the archive of `stem` if none is kept:
    no other live session writes it now (what dead ones left is removed),
    and the cache can be written."""
    from isr import jvmarchive

    for left in jvmarchive.abandoned(stem.parent):
        jvmarchive.drop(left)
    if any(stem.parent.glob(f"{stem.name}.*.partial")):
        return False  # another session writes it now
    stem.parent.mkdir(parents=True, exist_ok=True)
    return os.access(stem.parent, os.W_OK)


def keep_archive_at_exit(spark) -> None:
    """If this session's driver JVM writes the class archive (its command
    line says), wait for it when this process exits and keep the archive."""
    import atexit

    from isr import jvmarchive

    proc = getattr(getattr(spark.sparkContext, "_gateway", None), "proc", None)
    if proc is None:  # under spark-submit: not our JVM
        return
    try:
        with open(f"/proc/{proc.pid}/cmdline", "rb") as f:
            args = f.read().decode(errors="replace").split("\0")
    except OSError:
        return
    written = jvmarchive.written_by(args)
    if written is not None and written not in _WRITERS:
        _WRITERS.add(written)
        try:
            written.touch()  # the sessions starting meanwhile see a writer
        except OSError:
            pass
        atexit.register(_keep_archive, proc, written)


_WRITERS: set = set()  # the archives this process's JVMs write (one wait each)


def _keep_archive(proc, written) -> None:
    """At exit: close the JVM's stdin, as our exit would (PySpark's gateway
    then calls System.exit), wait for it to write the archive, keep it. A
    run stopped by Ctrl-C or SIGTERM does not wait: what its JVM leaves is
    removed by the next session's start (jvmarchive.abandoned)."""
    import subprocess

    from isr import jvmarchive
    from isr.signals import stop_requested

    if stop_requested():
        return
    try:
        from pyspark import SparkContext

        if SparkContext._active_spark_context is not None:
            # first: its accumulator server would print the JVM's going as an EOFError
            SparkContext._active_spark_context.stop()
    except Exception:  # noqa: BLE001 - a JVM gone already: nothing to write
        return
    import sys

    # once per Java and jars: say why this exit takes longer (20 CPU s or so)
    print("isr: writing the Spark driver's class archive once, for faster starts "
          "(ISR_CLASS_ARCHIVE=0 skips it)", file=sys.stderr, flush=True)
    try:
        proc.stdin.close()
        code = proc.wait(timeout=ARCHIVE_WAIT_S)
    except (subprocess.TimeoutExpired, KeyboardInterrupt, OSError, ValueError):
        return
    if code == 0:
        jvmarchive.keep(written)
    else:
        jvmarchive.drop(written)
