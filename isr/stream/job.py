"""The streaming job: Kafka topics in, stateful leader model on Spark,
decisions out (to Kafka, or to any `write_batch(batch_id, records)` sink).

    isr_kafka source: read, decode, judge, pack per bucket           [source.py, packing.py]
    (built-in `kafka` or a file source: key, value, topic, partition, offset
      -> mapInArrow: decode, judge, pack per bucket (Arrow IPC)     [packing.py])
      -> groupBy(bucket).applyInPandasWithState(LocalEngine)        [operator.py]
      -> foreachBatch -> (ZooKeeper-era propagation, per leader)   [propagation.py]
                      -> write_batch(batch_id, records): the sinks  [pipeline/streaming.py]
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Callable, Optional, Sequence

from isr.config import Settings
from isr.contract.records import SPARK_SCHEMA, OutputRecord
from isr.stream.operator import STATE_SCHEMA, job_processor_config, make_state_function
from isr.stream.packing import PACKED_SCHEMA, make_packer
from isr.stream.propagation import HadoopStore, PropagationStage
from isr.stream.buckets import AUTO, SHUFFLE_PARTITIONS, resolve
from isr.stream.partitioning import bucket_labels
from isr.stream import trim

STATE_STORE_PROVIDERS = {
    "rocksdb": "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
    "hdfs": "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider",
}
# WARN for the rest, ERROR for Spark's and Hadoop's chatty loggers (shipped as package data).
SPARK_LOG4J2 = Path(__file__).with_name("spark-log4j2.properties")


def driver_java_options(jars: Sequence[str] = (), write_archive: bool = False) -> str:
    """The session's driver JVM options: a deeper stack (Spark matches
    stop-time exception messages with a recursive regex; a Python traceback
    in them overflowed the default stack), our log4j2 configuration
    (absent when the package is imported from a zip), the JIT compiler,
    collector and young generation of jvm.DRIVER_JVM (the client compiler,
    the serial collector, at most 128 MB young), each unless
    ISR_SPARK_JAVA_OPTIONS (appended last) or an environment variable of
    JVM_OPTION_VARIABLES chooses its own, and the
    class archive of a JVM with these `jars` in spark.jars, written by this
    JVM if there is none and `write_archive` (jvm.driver_archive_options).
    spark.driver.extraJavaOptions in stream.spark_conf replaces them all."""
    from isr.stream.jvm import driver_archive_options

    options = ["-Xss16m"]
    if SPARK_LOG4J2.is_file():
        options.append(f"-Dlog4j2.configurationFile={SPARK_LOG4J2.as_uri()}")
    extra = os.environ.get("ISR_SPARK_JAVA_OPTIONS", "")  # e.g. -XX:StartFlightRecording=...
    # what else reaches the JVM's command line or the JVM itself
    elsewhere = " ".join(os.environ.get(name, "") for name in JVM_OPTION_VARIABLES)
    options.extend(jvm_defaults(extra.split() + elsewhere.split()))
    options.extend(driver_archive_options(jars, extra.split() + elsewhere.split(), write_archive))
    if extra:
        options.append(extra)
    return " ".join(options)


# Environment variables whose JVM options reach the driver JVM besides
# spark.driver.extraJavaOptions (spark-submit's and the JVM's own).
JVM_OPTION_VARIABLES = ("SPARK_SUBMIT_OPTS", "JDK_JAVA_OPTIONS", "JAVA_TOOL_OPTIONS",
                        "_JAVA_OPTIONS")


# The options that size the young generation (jvm.DRIVER_YOUNG's family).
YOUNG_GENERATION = ("-Xmn", "-XX:NewSize", "-XX:MaxNewSize", "-XX:NewRatio")

# The heap's free-ratio bounds (jvm.DRIVER_HEAP_FREE): one family, as the
# JVM refuses a MinHeapFreeRatio above the MaxHeapFreeRatio.
HEAP_FREE = ("-XX:MinHeapFreeRatio", "-XX:MaxHeapFreeRatio")

COLLECTOR = re.compile(
    r"-XX:\+Use(Serial|Parallel|ParallelOld|G1|Z|Shenandoah|Epsilon|ConcMarkSweep)GC")


def jvm_defaults(extra: list[str]) -> list[str]:
    """jvm.DRIVER_JVM's options that `extra` (JVM options) does not override:
    its compiler choice (-XX:TieredStopAtLevel, -XX:[+-]TieredCompilation),
    its collector (-XX:+Use...GC: two collectors refuse to start), its
    young generation's size (-Xmn, -XX:NewSize, MaxNewSize, NewRatio) or its
    heap's free ratio (-XX:MinHeapFreeRatio, MaxHeapFreeRatio); the last two
    are sized for the serial collector, so another collector drops them too."""
    from isr.stream.jvm import DRIVER_JVM

    def family(option: str) -> str:
        if option.startswith(("-XX:TieredStopAtLevel", "-XX:+TieredCompilation",
                              "-XX:-TieredCompilation")):
            return "compiler"
        if COLLECTOR.fullmatch(option):
            return "collector"
        if option.startswith(YOUNG_GENERATION):
            return "young"
        if option.startswith(HEAP_FREE):
            return "heap free"
        return option

    chosen = {family(o) for o in extra}
    if any(COLLECTOR.fullmatch(o) and o != "-XX:+UseSerialGC" for o in extra):
        chosen |= {"young", "heap free"}
    return [o for o in DRIVER_JVM.split() if family(o) not in chosen]


# Memory defaults (docs/operations.md, "Memory"); stream.spark_conf overrides each.
# - The driver JVM's heap stays at Spark's 1g: it must hold a batch's
#   peaks (the buckets' task results, ~2.4 KB per partition whose state
#   goes out in the batch, on top of ~0.1 GB: 216-377 MB live at 100 k
#   partitions); 512m lost a task result there and 768m did not, too thin a
#   margin for a default (docs/operations.md, "Memory"). What the heap
#   commits below it is bounded by jvm.DRIVER_YOUNG and DRIVER_HEAP_FREE instead. Give
#   spark.driver.memory in stream.spark_conf (or spark-submit's
#   --driver-memory) to change it.
# - RocksDB's memtables and block cache: one budget for every state store
#   instance of the JVM instead of 64 MB write buffers per instance. 16 MB:
#   the store holds one row per bucket (a few MB each, ~67 bytes a
#   partition); with 128 MB the memtables kept ~64 MB of rows already
#   committed (Spark's reported state memory 67 MB at 100 k partitions, 15
#   MB with 16: docs/benchmarks.md, issue 23, branch `jvmheap`). The cache
#   is not a hard limit (a larger row is still read).
# - glibc malloc in the Python workers: blocks of 1 MB and more (state
#   rows, Arrow buffers, packed batches) are mmapped and given back when
#   freed, instead of the dynamic threshold moving them into the heap, where
#   their pages stayed (engineproc.py sets it for the engine processes too).
MEMORY_DEFAULTS = {
    "spark.sql.streaming.stateStore.rocksdb.boundedMemoryUsage": "true",
    "spark.sql.streaming.stateStore.rocksdb.maxMemoryUsageMB": "16",
    "spark.executorEnv.MALLOC_MMAP_THRESHOLD_": "1048576",
}

# Memory defaults where the tasks run in the driver's JVM (local mode), as
# MEMORY_DEFAULTS. A task's result up to this size goes to the driver as it
# is, instead of through the block manager (Spark's 1 MB: a copy stored and
# read back in the heap while the batch is collected). The buckets' results
# reach ~60 MB each at 100 k partitions when every partition's state goes
# out: the heap's live peak fell 324 -> 213 MB and the JVM's peak RSS by
# ~0.15 GB (docs/benchmarks.md, issue 23, branch `rsscap`). Spark caps it at
# spark.rpc.message.maxSize (128m); a bigger result takes the block manager
# as before. Not on a cluster, where a direct result is an RPC message.
LOCAL_MEMORY_DEFAULTS = {"spark.task.maxDirectResultSize": "128m"}


def memory_defaults_for(master: Optional[str]) -> dict[str, str]:
    """MEMORY_DEFAULTS, and LOCAL_MEMORY_DEFAULTS for a local master (None:
    PySpark's own, local[*], unless spark-submit's session is used, whose
    core settings are fixed already)."""
    local = master is None or master.startswith("local")
    return {**MEMORY_DEFAULTS, **(LOCAL_MEMORY_DEFAULTS if local else {})}


# The driver JVM's glibc malloc: a few arenas instead of 8 per core (each of
# the JVM's threads that mallocs, RocksDB's and the Arrow/compression
# buffers, took one: ~290 MB resident in 64 MB arenas at 100 k partitions).
# Hadoop's YARN containers get MALLOC_ARENA_MAX=4 for the same reason. Set in
# this process's environment, which the JVM it launches inherits; an
# existing value is kept.
MEMORY_ENV = {"MALLOC_ARENA_MAX": "2"}


def spark_session(settings: Settings, master: Optional[str] = None, app_name: str = "isr-monitor",
                  memory_defaults: bool = True, write_archive: bool = False):
    """A session for `isr run` / tests; under spark-submit the existing one is used.
    `memory_defaults`: memory_defaults_for(master) unless stream.spark_conf says otherwise
    (`isr replay --engine spark` goes without: its bounded batches were
    measured with Spark's defaults). `write_archive`: whether this session,
    if there is no class archive yet, writes it at its end: one that runs
    streaming queries and ends by itself (the archive holds the classes the
    writer loaded; a run stopped by a signal leaves its JVM writing for
    nothing)."""
    from pyspark.sql import SparkSession

    # Python workers must run this interpreter (the venv), not the system one.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if memory_defaults:  # read by glibc when the JVM starts (local mode: ours)
        for key, value in MEMORY_ENV.items():
            os.environ.setdefault(key, value)
    jars: list[str] = []
    if settings.input.source == "kafka":
        from isr.stream.connector import kafka_jars

        jars = kafka_jars()
    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master)
    if settings.stream.state_buckets != AUTO:
        builder = builder.config(SHUFFLE_PARTITIONS, str(settings.stream.state_buckets))
    builder = (builder
               .config("spark.sql.streaming.stateStore.providerClass",
                       STATE_STORE_PROVIDERS[settings.stream.state_store])
               .config("spark.ui.enabled", os.environ.get("ISR_SPARK_UI", "false"))
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.driver.extraJavaOptions", driver_java_options(jars, write_archive))
               # pandas warns inside Spark's own worker code; not ours to fix.
               .config("spark.executorEnv.PYTHONWARNINGS", "ignore::FutureWarning")
               .config("spark.sql.execution.arrow.pyspark.enabled", "true")
               # RocksDB commits write a changelog; a snapshot is uploaded only
               # every few batches: ~0.35 s instead of ~0.7 s a commit here.
               .config("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled",
                       "true"))
    if jars:
        builder = builder.config("spark.jars", ",".join(jars))
    for key, value in {**(memory_defaults_for(master) if memory_defaults else {}),
                       **settings.stream.spark_conf}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    from isr.stream.jvm import keep_archive_at_exit

    keep_archive_at_exit(spark)  # if its JVM writes the class archive
    from isr.stream.planners import skip_source_lookup

    skip_source_lookup(spark)  # before any source is registered or named
    if os.environ.get("ISR_SPARK_LOG_LEVEL"):  # else spark-log4j2.properties' levels
        set_log_level(spark, os.environ["ISR_SPARK_LOG_LEVEL"])
    return spark


# Spark's object that holds the state stores a JVM has loaded.
STATE_STORE_OBJECT = "org.apache.spark.sql.execution.streaming.state.StateStore"


def close_state_stores(spark) -> bool:
    """Close the state stores this JVM holds once no query of the session is
    running; whether it did. Spark closes a loaded store only when its
    maintenance (every spark.sql.streaming.stateStore.maintenanceInterval,
    60 s) finds it inactive, and nothing of Spark's closes them at exit: a
    run shorter than that (--available-now) ended with its RocksDB
    instances open, their background threads running, when the JVM's exit()
    destroyed RocksDB's static objects, which RocksDB warns is undefined
    (facebook/rocksdb#11374, #14850): a JVM that exits while a RocksDB
    thread is at work aborts (bench/RocksDBExitRace.java), as spark-submit
    once did in CI (docs/real-kafka.md, "Known issues"). In local mode the
    executors' stores are in this JVM; a cluster's executors keep theirs.

    The maintenance stops first (`stop_maintenance`): StateStore.stop()
    holds the stores' lock while it waits for the maintenance threads, and a
    maintenance run in flight waits for that lock to unload the stores the
    finished query left inactive, so the stop waited out Spark's shutdown
    timeouts (spark.sql.streaming.stateStore.maintenanceShutdownTimeout,
    300 s, then 60 s): `isr run` took 6 minutes to exit after a run longer
    than one maintenance interval (docs/operations.md, "Known issues")."""
    try:
        if spark.streams.active:  # another query's stores are in use
            return False
        jvm = spark.sparkContext._jvm
        stop_maintenance(jvm)
        getattr(jvm, STATE_STORE_OBJECT).stop()  # unloads (closes) each
        return True
    except Exception:  # noqa: BLE001 - the JVM is gone already (Ctrl-C): nothing left open
        return False


def stop_maintenance(jvm) -> None:
    """Stop the state stores' maintenance without holding their lock, so a
    run in flight finishes (Spark's StateStore.stopMaintenanceTaskWithoutLock,
    public in the JVM, which Spark's own tests call for this deadlock). A
    Spark without it keeps the old way: StateStore.stop() alone."""
    state_store = getattr(jvm.org.apache.spark.sql.execution.streaming.state, "StateStore$")
    try:
        getattr(state_store, "MODULE$").stopMaintenanceTaskWithoutLock()
    except Exception:  # noqa: BLE001 - Py4JError: no such method in this Spark
        pass


def set_log_level(spark, level: str) -> None:
    """One level for every logger: sc.setLogLevel alone sets the root's and
    would leave the loggers spark-log4j2.properties names at theirs (INFO
    for debugging would show nothing of Spark's)."""
    spark.sparkContext.setLogLevel(level)
    try:
        jvm = spark.sparkContext._jvm
        jvm.org.apache.logging.log4j.core.config.Configurator.setAllLevels(
            "", jvm.org.apache.logging.log4j.Level.toLevel(level))  # "": the root and below
    except Exception:  # noqa: BLE001 - another logging backend: the root's level is set
        pass


def source_options(settings: Settings) -> dict[str, str]:
    """Options for either source, in Spark's Kafka source's option names. The
    client properties are librdkafka's for the Python source, the Java
    client's for Spark's own connector (kafka.client.spark_kafka_options)."""
    from isr.kafka.client import client_config, spark_kafka_options

    inp = settings.input
    if inp.source == "python":
        opts = {f"kafka.{k}": v for k, v in client_config(settings.kafka).items()}
    else:
        opts = spark_kafka_options(settings.kafka)
    if inp.topic_pattern:
        opts["subscribePattern"] = inp.topic_pattern
    else:
        opts["subscribe"] = ",".join(inp.topics)
    opts["startingOffsets"] = inp.starting_offsets
    if inp.max_offsets_per_trigger:
        opts["maxOffsetsPerTrigger"] = str(inp.max_offsets_per_trigger)
    opts["failOnDataLoss"] = str(inp.fail_on_data_loss).lower()
    if inp.source == "python":
        opts["isr.outageTimeoutS"] = str(settings.kafka.outage_timeout_s)
    return opts


def packing_reader(reader, settings: Settings, live: bool):
    """A Python source's reader (isr_kafka, isr_lines) that packs what it
    reads for the settings' buckets (source.pack_option)."""
    from isr.stream.source import pack_option

    return reader.option("isr.pack", pack_option(
        bucket_labels(settings.stream.state_buckets), settings.monitor.max_future_ms, live))


def read_source(spark, settings: Settings, pack_live: Optional[bool] = None):
    """The input stream's records (SOURCE_COLUMNS). `pack_live` (not None):
    the Python source packs them for the buckets as it reads (one row per
    bucket per batch read: PACKED_SCHEMA) and `packed` is not needed;
    `pack_live` says whether it is a live stream (packed's `live`)."""
    from isr.stream.source import SOURCE_COLUMNS, IsrKafkaDataSource

    if settings.input.source == "python":
        spark.dataSource.register(IsrKafkaDataSource)
        fmt = "isr_kafka"
    else:
        fmt = "kafka"  # needs the connector's jars (connector.py)
    reader = spark.readStream.format(fmt)
    for k, v in source_options(settings).items():
        reader = reader.option(k, v)
    pack = pack_live is not None and fmt == "isr_kafka"
    if pack:
        reader = packing_reader(reader, settings, pack_live)  # type: ignore[arg-type]  # (pack)
    try:
        df = reader.load()
    except Exception as exc:  # noqa: BLE001 - Spark's AnalysisException
        if fmt == "kafka" and "kafka" in str(exc).lower():
            from isr.stream.connector import missing_message

            raise RuntimeError(missing_message()) from exc
        raise
    if pack:
        return df
    if fmt == "kafka":  # no word on backlogs: its partitions never hold the watermark
        from pyspark.sql import functions as F
        df = df.withColumn("behind", F.lit(False))
    return df.select(*SOURCE_COLUMNS)


def packed(df, settings: Settings, live: bool):
    """The Python packing stage (packing.py): every record decoded and judged,
    one row per bucket per input task. `live`: add the micro-batch's clock
    (Spark replaces current_timestamp() by the batch's timestamp and keeps it
    in its offset log) for the future test; a replay has none."""
    from pyspark.sql import functions as F

    labels = bucket_labels(settings.stream.state_buckets)
    if live:
        df = df.select("*", F.current_timestamp().alias("clock"))
    return df.mapInArrow(make_packer(labels, settings.monitor.max_future_ms, live),
                         PACKED_SCHEMA)


def decisions_stream(packed_df, settings: Settings, partition_metrics: bool = False,
                     checkpoint: str = ""):
    """The buckets over packed rows (PACKED_SCHEMA). `partition_metrics`: they
    also report partitions' states for the metrics (records.PARTITION_METRICS:
    those whose health changed, the busy ones once per
    metrics.busy_refresh_interval_ms, the quiet ones once per
    metrics.refresh_interval_ms). `checkpoint`: the query's, which keys the
    workers' engine cache (statelog.py)."""
    from pyspark.sql.streaming.state import GroupStateTimeout

    return packed_df.groupBy("bucket").applyInPandasWithState(
        make_state_function(job_processor_config(settings, partition_metrics),
                            bucket_labels(settings.stream.state_buckets), identity=checkpoint),
        SPARK_SCHEMA, STATE_SCHEMA, "append", GroupStateTimeout.NoTimeout)


def collect_records(df) -> list[OutputRecord]:
    """A micro-batch's output records on the driver, in the order
    `df.collect()` gives them. Collected as Arrow (`toArrow`): `collect()`
    pickles every row field by field in the JVM (net.razorvine's Pickler,
    the JVM's largest share in a steady batch, docs/benchmarks.md) and
    makes a Row of each in Python.

    The records are made one Arrow record batch at a time (Spark's, ≤ 10,000
    rows each), each let go of once made, and Arrow's allocator gives the
    freed buffers back before the sinks run: it keeps freed segments for
    reuse, so the whole table stayed resident beside the records and the
    sinks' copies (~0.12 GB at 100 k partitions when every partition's
    state goes out: docs/benchmarks.md, issue 23, branch `driverrss`)."""
    batches = df.toArrow().to_batches()  # (the table: only these hold its buffers)
    batches.reverse()  # popped from the end in the table's order
    records: list[OutputRecord] = []
    while batches:
        records.extend(_records_of(batches.pop()))
    trim.give_back()  # Arrow's freed segments (and the C heap's) before the sinks run
    return records


def _records_of(batch) -> list[OutputRecord]:
    """One Arrow record batch's rows as OutputRecords."""
    return list(map(OutputRecord._make, zip(
        *[batch.column(name).to_pylist() for name in OutputRecord._fields])))


# How Spark writes the checkpoint's files (the offset and commit logs, the
# state stores' changelogs and snapshots): by default through Hadoop's
# FileContext, whose rename of a local file asks for each path's link status
# by running `readlink` in a new process (Hadoop's RawLocalFileSystem without
# its native library, which pyspark does not ship): ~33 processes a
# micro-batch here. Through the FileSystem API a local rename is Java's
# File.renameTo (rename(2), atomic as FileContext's is), and no process runs.
CHECKPOINT_FILE_MANAGER = "spark.sql.streaming.checkpointFileManagerClass"
FILE_SYSTEM_MANAGER = ("org.apache.spark.sql.execution.streaming.checkpointing."
                       "FileSystemBasedCheckpointFileManager")
# Set in the session when job.start chose FILE_SYSTEM_MANAGER, so that a
# later query of the session on another file system gets Spark's default back.
CHOSEN_BY_JOB = "spark.isr.checkpointFileManager.local"


def choose_checkpoint_file_manager(spark, checkpoint: str) -> bool:
    """For a checkpoint on the local file system, Spark writes the
    checkpoint's files through the FileSystem API (CHECKPOINT_FILE_MANAGER)
    unless a manager was chosen in the session's configuration
    (stream.spark_conf, spark-submit's --conf); whether it does. Elsewhere
    (HDFS, object stores) Spark's default stays: HDFS's FileContext rename is
    the atomic one Spark relies on there."""
    chosen = spark.conf.get(CHECKPOINT_FILE_MANAGER, None)
    ours = spark.conf.get(CHOSEN_BY_JOB, None) == "true"
    if chosen is not None and not ours:
        return chosen == FILE_SYSTEM_MANAGER  # the operator's choice
    if local_file_system(spark, checkpoint):
        spark.conf.set(CHECKPOINT_FILE_MANAGER, FILE_SYSTEM_MANAGER)
        spark.conf.set(CHOSEN_BY_JOB, "true")
        return True
    if ours:
        spark.conf.unset(CHECKPOINT_FILE_MANAGER)
        spark.conf.unset(CHOSEN_BY_JOB)
    return False


def local_file_system(spark, path: str) -> bool:
    """Whether Hadoop takes `path` for a local one (file://, or no scheme
    with fs.defaultFS local), by its URI alone: no file system is opened."""
    jvm = spark.sparkContext._jvm
    uri = jvm.org.apache.hadoop.fs.Path(path).toUri()
    scheme = uri.getScheme() or jvm.org.apache.hadoop.fs.FileSystem.getDefaultUri(
        spark.sparkContext._jsc.hadoopConfiguration()).getScheme()
    return scheme == "file"


def start(spark, settings: Settings, write_batch: Callable, source_df=None,
          trigger: Optional[dict] = None, checkpoint: Optional[str] = None, live: bool = True,
          partition_metrics: bool = False, packed_source: Optional[Callable] = None):
    """Start the query; `write_batch(batch_id, records)` receives each
    micro-batch's output records (OutputRecord) on the driver. `live`: the
    input is a live stream (future times are judged by the batch's clock);
    a replay of files judges them by event time before (replay_spark.py).
    The input: `source_df` (SOURCE_COLUMNS, packed by a stage), or
    `packed_source(settings)`, a source that packs as it reads for the
    settings' buckets (known only here), else the configured input."""
    checkpoint = checkpoint or settings.stream.checkpoint_location
    choose_checkpoint_file_manager(spark, checkpoint)  # before the query is made
    buckets = resolve(spark, settings.stream.state_buckets, checkpoint)
    spark.conf.set(SHUFFLE_PARTITIONS, str(buckets))  # one task per bucket
    settings = settings.model_copy(update={
        "stream": settings.stream.model_copy(update={"state_buckets": buckets})})
    if packed_source is not None:
        packed_df = packed_source(settings)
    elif source_df is None and settings.input.source == "python":
        packed_df = read_source(spark, settings, pack_live=live)  # packs as it reads
    else:
        packed_df = packed(read_source(spark, settings) if source_df is None else source_df,
                           settings, live)
    out = decisions_stream(packed_df, settings, partition_metrics, checkpoint)
    stage = None
    if settings.monitor.propagation == "zk":  # per leader, across buckets: on the driver
        stage = PropagationStage(HadoopStore(spark, checkpoint), len(settings.monitor.policy) > 1)

    def each_batch(df, batch_id: int) -> None:
        records = collect_records(df)
        write_batch(batch_id, records if stage is None else stage.batch(batch_id, records))
        del records
        trim.give_back()  # the collected batch (trim.py)

    trigger = trigger or {"processingTime": settings.stream.trigger_interval}
    return (out.writeStream.foreachBatch(each_batch)
            .queryName(settings.stream.query_name)
            .option("checkpointLocation", checkpoint)
            .trigger(**trigger)
            .start())
