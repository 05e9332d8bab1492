"""The streaming job against a real broker (embedded Tansu) and real Spark
(local[2]): end to end, determinism across micro-batch sizes, bad input,
idle partitions, and replay --engine spark against --engine local."""

from __future__ import annotations

import json
import os
from pathlib import Path

import orjson
import pytest
import workload
from recording_sink import RecordingSink

from isr.config import load_settings
from isr.contract import Rejection, validate
from isr.contract.policies import POLICIES
from isr.pipeline.listeners import local_engine
from isr.pipeline.local import replay
from isr.pipeline.streaming import StreamingPipeline, run_to_kafka
from isr.stream import buckets, job
from isr.stream.packing import bucket_of, session_home
from isr.stream.replay_spark import replay_spark
from isr.sinks.kafka import read_to_end

pytestmark = pytest.mark.integration

BASE = [f"monitor.replica_lag_time_max_ms={workload.LAG_MS}", "monitor.allowed_lateness_ms=1000"]


def settings_for(broker, tmp_path, *extra):
    return workload.job_settings(broker.bootstrap, tmp_path, BASE, *extra)


def records(broker, topic):
    return [json.loads(m.value()) for m in read_to_end({"bootstrap.servers": broker.bootstrap},
                                                        {(topic, 0): 0})]


def open_rocksdb_instances(spark) -> list[str]:
    """The RocksDB state store instances the session's JVM holds open (each
    holds its working directory's LOCK file)."""
    fds = Path(f"/proc/{spark.sparkContext._gateway.proc.pid}/fd")
    if not fds.is_dir():
        pytest.skip("no /proc: the JVM's open files cannot be listed here")
    targets = []
    for fd in fds.iterdir():
        try:
            targets.append(os.readlink(fd))
        except OSError:
            pass  # closed meanwhile
    return sorted(t for t in targets if "StateStoreId(" in t and "/LOCK" in t)


MAINTENANCE = {"spark.sql.streaming.stateStore.maintenanceInterval": "20ms",
               "spark.sql.streaming.stateStore.maintenanceShutdownTimeout": "20"}


def test_closing_the_state_stores_does_not_wait_for_a_maintenance_run(spark, tmp_path):
    """A maintenance run in flight when the query ends waits for the stores'
    lock, which StateStore.stop() holds while it waits for the maintenance:
    the close took Spark's shutdown timeouts (here 20 s, then 60 s; 300 s
    then 60 s by default: `isr run` exited 6 minutes after its last batch).
    With the maintenance running every 20 ms, one is in flight at the close."""
    import time

    job.close_state_stores(spark)  # a maintenance started earlier takes the new settings
    for key, value in MAINTENANCE.items():
        spark.conf.set(key, value)
    try:
        rows = spark.readStream.format("rate").option("rowsPerSecond", 2000).load()
        query = (rows.groupBy((rows.value % 5000).alias("k")).count().writeStream
                 .format("noop").outputMode("update")
                 .option("checkpointLocation", str(tmp_path / "checkpoint"))
                 .trigger(processingTime="200 milliseconds").start())
        try:
            query.awaitTermination(6)
        finally:
            query.stop()
        began = time.monotonic()
        assert job.close_state_stores(spark)
        assert time.monotonic() - began < 10
        assert open_rocksdb_instances(spark) == []
    finally:
        for key in MAINTENANCE:
            spark.conf.unset(key)
        job.close_state_stores(spark)  # the next query's maintenance takes the defaults

@pytest.fixture(scope="module")
def workload_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("wl") / "events.jsonl"
    workload.write_file(path, workload.lines())
    return path


@pytest.fixture(scope="module")
def local_result(workload_file):
    return replay([str(workload_file)], load_settings(None, BASE).monitor)


def test_end_to_end_kafka_in_kafka_out_equals_local_replay(broker, spark, tmp_path,
                                                            local_result):
    s = settings_for(broker, tmp_path, 'output.sinks=["recording_sink:RecordingSink"]')
    broker.create_topics(s.input.topics, 2)
    workload.produce(broker.bootstrap, s.input.topics[0], workload.lines())
    # The pipeline `isr run` runs: its sinks opened before, closed after.
    assert StreamingPipeline(s).run(spark, {"availableNow": True}) == 0
    calls = RecordingSink.last.calls
    assert calls[:2] == ["open", "started"] and calls[-1] == "close" and "write_batch" in calls
    # ... and its state stores are closed: the JVM is not left to exit with
    # RocksDB instances open (job.close_state_stores)
    assert open_rocksdb_instances(spark) == []

    changes = records(broker, s.output.changes_topic)
    # The stream has decided everything before its last watermark; a bounded
    # replay also flushes the last allowed_lateness_ms of input.
    watermark = max(e["ts"] for e in workload.events()) - 1000
    final = [json.loads(d.model_dump_json()) for d in local_result.decisions
             if d.ts < watermark]
    expected = [d for d in final if d["type"] == "isr_change"]
    assert sorted(changes, key=lambda d: d["id"]) == sorted(expected, key=lambda d: d["id"])
    assert len({d["id"] for d in changes}) == len(changes)  # written once
    # A sink named in one line of configuration got what the Kafka sink wrote.
    recorded = [json.loads(r.value) for r in RecordingSink.last.records()
                if r.kind == "isr_change"]
    assert sorted(recorded, key=lambda d: d["id"]) == sorted(changes, key=lambda d: d["id"])
    # Alerts: the same transitions at the same event times as the local replay.
    alerts = records(broker, s.output.alerts_topic)
    expected_alerts = [d for d in final if d["type"] == "alert"]
    assert {a["labels"]["alertname"] for a in expected_alerts} >= {"UnderReplicated",
                                                                   "AtMinIsr"}
    assert sorted(alerts, key=lambda d: d["id"]) == sorted(expected_alerts,
                                                           key=lambda d: d["id"])

    # The idle partition (1) was shrunk by watermark-driven checks only.
    idle = [d for d in changes if d["partition"] == 1]
    assert [(d["ts"] - workload.T0, d["replicas"]) for d in idle] == [(25000, [4]), (30000, [3])]
    # The fenced broker (a cluster-wide event) reached every partition.
    assert {(d["partition"], d["cause"]) for d in changes if d["replicas"] == [4]
            and d["ts"] == workload.T0 + 40250} == {(2, "controller")}

    dead = records(broker, s.output.dead_letter_topic)
    assert sorted(d["reason"] for d in dead) == sorted(d.reason for d in local_result.dead_letters)
    assert {d["reason_class"] for d in dead} == {"not_json", "unknown_type", "invalid"}
    assert all(d["source"].startswith(s.input.topics[0] + "/") for d in dead)

    states = {}
    for st in records(broker, s.output.state_topic):
        states[(st["topic"], st["partition"])] = st
    assert set(states) == {("orders", p) for p in range(4)}
    assert states[("orders", 1)]["isr"] == [2]


def test_throttled_partition_state_still_ends_with_every_partitions_latest_state(
        broker, spark, tmp_path):
    """output.state_interval_ms longer than the run: after a partition's first
    record only ISR changes make one go out, and the run's last batch (the
    Python source knows it under --available-now) sends the rest. The state
    topic then ends with exactly the state a local engine reaches at the same
    watermark."""
    s = settings_for(broker, tmp_path, "output.state_interval_ms=600000",
                     "input.max_offsets_per_trigger=150")
    topic = s.input.topics[0]
    broker.create_topics([topic], 1)
    events = workload.events()
    workload.produce(broker.bootstrap, topic, [json.dumps(e).encode() for e in events])
    run_to_kafka(s, spark=spark, trigger={"availableNow": True}).awaitTermination()

    engine = local_engine(s.monitor)
    for seq, e in enumerate(events):
        engine.submit(validate(e), seq)
    engine.advance_watermark()
    expected = {(m.topic, m.partition): json.loads(m.view().model_dump_json())
                for m in engine.models()}
    written = records(broker, s.output.state_topic)
    latest = {(st["topic"], st["partition"]): st for st in written}
    assert latest == expected
    # Throttled: a partition's first state, one per change of its ISR or
    # leader, and its last at the end of the run; not one per batch.
    batches = -(-len(events) // 150)
    assert len(written) < 4 * batches / 2
    for part in range(4):
        mine = [(st["isr"], st["leader"]) for st in written if st["partition"] == part]
        assert all(a != b for a, b in zip(mine[:-2], mine[1:-1]))
    for c in records(broker, s.output.changes_topic):  # each ISR change went out at once
        assert any(st["partition"] == c["partition"] and st["isr"] == c["isr_after"]
                   for st in written)


def test_late_events_are_dead_lettered_and_later_events_still_decided(broker, spark, tmp_path):
    s = settings_for(broker, tmp_path)
    topic = s.input.topics[0]
    broker.create_topics([topic], 1)
    first = [json.dumps(e).encode() for e in workload.events(seconds=30, partitions=1)]
    workload.produce(broker.bootstrap, topic, first)
    run_to_kafka(s, spark=spark, trigger={"availableNow": True}).awaitTermination()
    late = {"v": 1, "type": "append", "ts": workload.T0 + 1000, "topic": "orders",
            "partition": 0, "leader": 1, "leader_epoch": 1, "leader_leo": 5}
    # After the late one, later events still move the watermark and decide:
    # replica 2 stopped fetching when the first input ended (30 s).
    later = {"v": 1, "type": "fetch", "ts": workload.T0 + 90_000, "topic": "orders",
             "partition": 0, "leader": 1, "leader_epoch": 1, "replica": 2,
             "fetch_offset": 180, "leader_leo": 180}
    workload.produce(broker.bootstrap, topic, [json.dumps(late).encode(),
                                               json.dumps(later).encode()])
    run_to_kafka(s, spark=spark, trigger={"availableNow": True}).awaitTermination()
    (dead,) = records(broker, s.output.dead_letter_topic)
    assert dead["reason_class"] == "late" and "before the watermark" in dead["reason"]
    assert json.loads(dead["raw"]) == late
    changes = records(broker, s.output.changes_topic)
    assert [(c["ts"] - workload.T0, c["action"], c["replicas"]) for c in changes] == [
        (25000, "shrink", [3]), (40000, "shrink", [2])]


def test_replay_engine_spark_is_byte_identical_to_local(spark, workload_file):
    settings = load_settings(None, BASE + ["monitor.policy=kafka,kip16,kip501",
                                           "monitor.propagation=zk"])
    local = replay([str(workload_file)], settings.monitor)
    remote = replay_spark([str(workload_file)], settings, spark=spark)
    dump = lambda rs: "".join(r.model_dump_json() + "\n" for r in rs)  # noqa: E731
    assert dump(remote.decisions) == dump(local.decisions)
    assert dump(remote.states) == dump(local.states)
    assert dump(remote.dead_letters) == dump(local.dead_letters)
    assert [vars(r) for r in remote.summary] == [vars(r) for r in local.summary]
    assert any(d.type == "isr_propagation" for d in local.decisions)


def test_replay_engine_spark_drops_an_overlong_line_as_local_does(spark, workload_file,
                                                                   tmp_path):
    """input.max_line_bytes: the same too_long dead letter (its length, nothing
    of the line held) and the same decisions as --engine local."""
    lines = workload_file.read_bytes().splitlines(True)
    path = tmp_path / "long.jsonl"
    path.write_bytes(b"".join(lines[:3]) + b"x" * 5000 + b"\n" + b"".join(lines[3:]))
    settings = load_settings(None, BASE + ["input.max_line_bytes=4096"])
    local = replay([str(path)], settings.monitor, max_line_bytes=4096)
    remote = replay_spark([str(path)], settings, spark=spark, max_offsets_per_trigger=400)
    assert [(d.offset, d.raw_size, d.raw) for d in local.dead_letters
            if d.reason_class == "too_long"] == [(4, 5000, "")]
    assert [d.model_dump_json() for d in remote.dead_letters] == [
        d.model_dump_json() for d in local.dead_letters]
    assert [d.model_dump_json() for d in remote.decisions] == [
        d.model_dump_json() for d in local.decisions]
    assert remote.stats.lines == local.stats.lines


@pytest.mark.parametrize("limit", [37, 400])
def test_decisions_do_not_depend_on_micro_batch_size(spark, workload_file, local_result, limit):
    settings = load_settings(None, BASE)
    remote = replay_spark([str(workload_file)], settings, spark=spark,
                          max_offsets_per_trigger=limit)
    assert [d.model_dump_json() for d in remote.decisions] == [
        d.model_dump_json() for d in local_result.decisions]
    assert [s.model_dump_json() for s in remote.states] == [
        s.model_dump_json() for s in local_result.states]


def test_the_session_commits_rocksdb_changelogs_and_takes_spark_conf_from_settings(spark):
    from isr.config import Settings

    key = "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"
    assert spark.conf.get(key) == "true"  # the job's default: cheaper commits
    settings = Settings.model_validate({"stream": {"spark_conf": {"spark.isr.test.marker": "on"}}})
    session = job.spark_session(settings)  # the running session, given the settings
    assert session is spark and spark.conf.get("spark.isr.test.marker") == "on"


def test_a_local_checkpoints_files_are_renamed_by_the_file_system_api(spark, tmp_path):
    """A query on a local checkpoint writes its logs through Spark's
    FileSystem-based manager (a rename without Hadoop's `readlink`
    processes); one on another file system gets Spark's default back; an
    operator's choice stays."""
    from pyspark.sql import functions as F

    def manager(checkpoint: str) -> str:
        query = (spark.readStream.format("rate").option("rowsPerSecond", 1).load()
                 .select(F.col("value")).writeStream.format("noop")
                 .option("checkpointLocation", checkpoint).start())
        try:
            return query._jsq.streamingQuery().offsetLog().fileManager().getClass().getSimpleName()
        finally:
            query.stop()

    assert job.choose_checkpoint_file_manager(spark, str(tmp_path / "cp"))
    assert manager(str(tmp_path / "cp")) == "FileSystemBasedCheckpointFileManager"
    assert job.choose_checkpoint_file_manager(spark, f"file://{tmp_path}/cp2")
    assert not job.choose_checkpoint_file_manager(spark, "hdfs://namenode:8020/isr/cp")
    assert spark.conf.get(job.CHECKPOINT_FILE_MANAGER, None) is None
    assert manager(str(tmp_path / "cp3")) == "FileContextBasedCheckpointFileManager"
    conf = spark.sparkContext._jsc.hadoopConfiguration()  # a path without a scheme:
    default_fs = conf.get("fs.defaultFS")                 # Hadoop's default file system's
    conf.set("fs.defaultFS", "hdfs://namenode:8020")
    try:
        assert not job.local_file_system(spark, "/isr/cp")
        assert job.local_file_system(spark, "file:///isr/cp")
    finally:
        conf.set("fs.defaultFS", default_fs)
    assert job.local_file_system(spark, "/isr/cp")
    spark.conf.set(job.CHECKPOINT_FILE_MANAGER, "com.example.Manager")  # an operator's
    try:
        assert not job.choose_checkpoint_file_manager(spark, str(tmp_path / "cp4"))
        assert spark.conf.get(job.CHECKPOINT_FILE_MANAGER) == "com.example.Manager"
    finally:
        spark.conf.unset(job.CHECKPOINT_FILE_MANAGER)


@pytest.mark.parametrize("buckets", [2, 4, 7])
def test_every_bucket_gets_its_own_stateful_task(spark, buckets):
    """Spark hash-partitions the stateful operator's input by key; bucket keys
    0..n-1 piled up in a few tasks (for 4 buckets, three in one task), so the
    buckets' work ran one after the other. The labels must spread one per
    task, exactly as Spark partitions them."""
    from pyspark.sql import functions as F

    from isr.stream.packing import unpack
    from isr.stream.partitioning import bucket_labels, spark_hash_int

    labels = bucket_labels(buckets)
    placed = (spark.createDataFrame([(label,) for label in labels], "bucket int")
              .repartition(buckets, "bucket")  # the partitioning the operator requires
              .select("bucket", F.spark_partition_id().alias("task")).collect())
    assert {r.bucket: r.task for r in placed} == {label: i for i, label in enumerate(labels)}
    # The job keys its state by these labels: every event in one bucket,
    # broker events in every bucket, none lost.
    source = spark.createDataFrame(
        [(str(i + 1).encode(), line, "events.jsonl", -1, i, False)
         for i, line in enumerate(workload.lines())],
        "key binary, value binary, topic string, partition int, offset long, behind boolean")
    settings = load_settings(None, BASE + [f"stream.state_buckets={buckets}"])
    rows = job.packed(source, settings, live=False).select("bucket", "pack").collect()
    assert {r.bucket for r in rows} == set(labels)
    tables = [unpack([r.pack]) for r in rows]
    brokers = sum(1 for line in workload.lines() if b'"type": "broker"' in line
                  or b'"type":"broker"' in line)
    assert brokers > 0
    assert sum(t.num_rows for t in tables) == len(workload.lines()) + (buckets - 1) * brokers
    ints = spark.range(-300, 300).select(F.col("id").cast("int").alias("i"))
    assert {r.i: r.h for r in ints.select("i", F.hash("i").alias("h")).collect()} == {
        i: spark_hash_int(i) for i in range(-300, 300)}


def test_auto_buckets_follow_the_cores_but_keep_an_existing_checkpoints_count(
        broker, spark, tmp_path):
    """stream.state_buckets = auto: a new checkpoint gets one bucket per core
    (local[2]: 2); one written with 3 buckets restarts with 3, not with a
    layout error."""
    s = settings_for(broker, tmp_path, "stream.state_buckets=3")
    topic = s.input.topics[0]
    broker.create_topics([topic], 1)
    events = [json.dumps(e).encode() for e in workload.events(seconds=30, partitions=2)]
    workload.produce(broker.bootstrap, topic, events[:len(events) // 2])
    run_to_kafka(s, spark=spark, trigger={"availableNow": True}).awaitTermination()
    auto = s.model_copy(update={"stream": s.stream.model_copy(update={"state_buckets": "auto"})})
    checkpoint = auto.stream.checkpoint_location
    assert buckets.resolve(spark, "auto", checkpoint) == 3
    workload.produce(broker.bootstrap, topic, events[len(events) // 2:])
    q = run_to_kafka(auto, spark=spark, trigger={"availableNow": True})
    q.awaitTermination()
    assert q.exception() is None
    # Partition 0's stuck follower and partition 1's stalled one, each once.
    assert sorted((c["partition"], c["ts"] - workload.T0, c["replicas"]) for c in
                  records(broker, s.output.changes_topic)) == [(0, 25000, [3]), (1, 25000, [4])]
    assert buckets.resolve(spark, "auto", str(tmp_path / "new")) == 2  # local[2]


def test_the_python_source_packing_as_it_reads_decides_as_the_packing_stage(
        broker, spark, tmp_path):
    """input.source = "python" packs in the reader (one row per bucket per
    batch read); the same records through the raw source and the packing
    stage (the path of Spark's own kafka source) give the same output."""
    s = settings_for(broker, tmp_path, "input.max_offsets_per_trigger=400")
    topic = s.input.topics[0]
    broker.create_topics([topic], 2)
    workload.produce(broker.bootstrap, topic, workload.lines())
    outputs = []
    for name, source_df in (("reader", None), ("stage", job.read_source(spark, s))):
        rows = []
        job.start(spark, s, lambda _i, batch: rows.extend(batch), source_df=source_df,
                  trigger={"availableNow": True},
                  checkpoint=str(tmp_path / name)).awaitTermination()
        outputs.append(sorted((r.kind, r.id, r.value) for r in rows
                              if r.kind in ("isr_change", "alert", "dead_letter",
                                            "partition_state")))
    assert outputs[0] == outputs[1]
    kinds = {kind for kind, _id, _value in outputs[0]}
    assert kinds == {"isr_change", "alert", "dead_letter", "partition_state"}


def test_fifty_thousand_partitions_with_few_events_each_decide_as_the_local_engine(
        spark, tmp_path):
    """Cluster scale, few events per partition: 50 k partitions through Spark
    in 4 micro-batches give the local engine's decisions and final states. In
    1 of 100 partitions follower 3 never fetches and is shrunk by the
    watermark's checks alone."""
    events = []
    for p in range(50_000):
        base = {"v": 1, "topic": f"t{p % 50}", "partition": p // 50, "leader": 1,
                "leader_epoch": 1}
        t = workload.T0 + 1000 + p % 1000
        events.append({**base, "type": "leader", "ts": workload.T0, "replicas": [1, 2, 3],
                       "isr": [1, 2, 3], "leader_epoch_start_offset": 0})
        events.append({**base, "type": "append", "ts": t, "leader_leo": 5})
        for r in (2, 3) if p % 100 else (2,):
            events.append({**base, "type": "fetch", "ts": t + 1, "replica": r,
                           "fetch_offset": 5, "leader_leo": 5})
    events.sort(key=lambda e: e["ts"])  # within the allowed lateness, as a cluster writes them
    events.append({"v": 1, "type": "append", "ts": workload.T0 + 30_000, "topic": "t1",
                   "partition": 0, "leader": 1, "leader_epoch": 1, "leader_leo": 5})
    path = tmp_path / "wide.jsonl"
    path.write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in events))
    settings = load_settings(None, BASE)
    local = replay([str(path)], settings.monitor)
    remote = replay_spark([str(path)], settings, spark=spark, max_offsets_per_trigger=50_000)
    shrinks = [d for d in local.decisions if d.type == "isr_change"]
    assert len(shrinks) == 500 and len(local.states) == 50_000 and not local.dead_letters
    assert [d.model_dump_json() for d in remote.decisions] == [
        d.model_dump_json() for d in local.decisions]
    assert [s.model_dump_json() for s in remote.states] == [
        s.model_dump_json() for s in local.states]


# ---------------------------------------------------------------- fetch sessions
# Every policy, 3 buckets: each leader's sessions span buckets (workload.session_events).
SESSION_BASE = BASE + ["monitor.policy=" + ",".join(POLICIES), "stream.state_buckets=3"]


@pytest.fixture(scope="module")
def session_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("sessions") / "sessions.jsonl"
    workload.write_file(path, workload.session_lines())
    return path


@pytest.fixture(scope="module")
def session_replay(session_file):
    return replay([str(session_file)], load_settings(None, SESSION_BASE).monitor)


@pytest.mark.parametrize("limit", [250, 700])
def test_replay_engine_spark_applies_fetch_sessions_as_local_does(spark, session_file,
                                                                  session_replay, limit):
    """Full and incremental requests, a forgotten partition, a skipped epoch,
    an unknown session, a partition changing leader, an invalid request:
    the job's buckets (each with its share of every request) decide, end in
    the states and count what one engine does, whatever the micro-batches."""
    local = session_replay
    # Leader 1's sessions span buckets, and its home bucket (which counts its
    # skipped epoch) holds none of its partitions: it has the headers only.
    assert {bucket_of("default", "orders", p, 3) for p in (0, 4, 8)} == {0, 2}
    assert session_home("default", 1, 3) == 1
    remote = replay_spark([str(session_file)], load_settings(None, SESSION_BASE), spark=spark,
                          max_offsets_per_trigger=limit)
    dump = lambda rs: "".join(r.model_dump_json() + "\n" for r in rs)  # noqa: E731
    assert dump(remote.decisions) == dump(local.decisions)
    assert dump(remote.states) == dump(local.states)
    assert dump(remote.dead_letters) == dump(local.dead_letters)
    assert [vars(r) for r in remote.summary] == [vars(r) for r in local.summary]
    # Each anomaly counted once, though every bucket met it.
    assert remote.stats.session_anomalies == local.stats.session_anomalies == {
        "session_epoch_skipped": 1, "unknown_session": 1}
    (dead,) = remote.dead_letters  # the invalid request: one dead letter, not one per bucket
    assert (dead.reason_class, dead.offset) == ("invalid", 41)
    # The anomalies and the stopped fetches decide: shrinks and alerts.
    shrunk = {(d.policy, d.partition) for d in local.decisions if d.type == "isr_change"}
    assert {("kafka", 0), ("kafka", 6), ("kip16", 1), ("legacy", 9)} <= shrunk
    assert any(d.type == "alert" for d in local.decisions)


def test_the_job_applies_fetch_sessions_across_a_restart_from_its_checkpoint(
        broker, spark, tmp_path):
    """Half the session input, the job stops; the rest, the job restarts from
    its checkpoint (sessions, pending fetches and queued requests in each
    bucket's state): the changes, alerts, dead letters and final states of
    one local engine over the whole input."""
    s = settings_for(broker, tmp_path, *SESSION_BASE[len(BASE):],
                     "input.max_offsets_per_trigger=300")
    topic = s.input.topics[0]
    broker.create_topics([topic], 1)
    lines = workload.session_lines()
    half = len(lines) // 2
    for part in (lines[:half], lines[half:]):
        workload.produce(broker.bootstrap, topic, part)
        q = run_to_kafka(s, spark=spark, trigger={"availableNow": True})
        q.awaitTermination()
        assert q.exception() is None

    engine = local_engine(s.monitor)
    events = [validate(json.loads(line)) for line in lines]
    for seq, ev in enumerate(events):
        if not isinstance(ev, Rejection):
            engine.submit(ev, seq)
    engine.advance_watermark()  # where the stream's last watermark is
    expected = sorted((json.loads(d.model_dump_json()) for d in engine.take_decisions()),
                      key=lambda d: d["id"])
    changes = sorted(records(broker, s.output.changes_topic), key=lambda d: d["id"])
    assert changes == [d for d in expected if d["type"] == "isr_change"]
    assert len(changes) >= 20
    alerts = sorted(records(broker, s.output.alerts_topic), key=lambda d: d["id"])
    assert alerts == [d for d in expected if d["type"] == "alert"]
    (dead,) = records(broker, s.output.dead_letter_topic)
    assert dead["raw"] == workload.BAD_SESSION.decode() and dead["reason_class"] == "invalid"
    latest = {(st["policy"], st["topic"], st["partition"]): st
              for st in records(broker, s.output.state_topic)}
    assert latest == {(m.rules.policy, m.topic, m.partition): json.loads(m.view().model_dump_json())
                      for m in engine.models()}


# ---------------------------------------------------------------- ZooKeeper-era propagation
def _zk_lines() -> list[bytes]:
    """Leader 1 leads orders-0..5 (3 buckets hold them); follower 3 stops
    fetching them at +1 s to +4.5 s (a partition per 700 ms) and resumes at
    +30 s: per policy six shrinks, then six expands, of one leader."""
    t0, lines = workload.T0, []
    for p in range(6):
        lines.append({"v": 1, "type": "leader", "ts": t0, "topic": "orders", "partition": p,
                      "leader": 1, "leader_epoch": 1, "replicas": [1, 2, 3], "isr": [1, 2, 3],
                      "leader_epoch_start_offset": 0})
    for t in range(t0 + 500, t0 + 60_000, 500):
        for p in range(6):
            base = {"v": 1, "topic": "orders", "partition": p, "leader": 1, "leader_epoch": 1}
            leo = (t - t0) // 100
            lines.append({**base, "type": "append", "ts": t, "leader_leo": leo})
            for r in (2, 3):
                if r == 3 and t0 + 1000 + 700 * p <= t < t0 + 30_000:
                    continue
                lines.append({**base, "type": "fetch", "ts": t + 1, "replica": r,
                              "fetch_offset": leo, "leader_leo": leo})
    lines.sort(key=lambda e: e["ts"])
    return [orjson.dumps(e) for e in lines]


@pytest.mark.parametrize("limit", [400, 3000])
def test_replay_engine_spark_propagates_per_leader_across_buckets_as_local_does(
        spark, tmp_path, limit):
    """`monitor.propagation = "zk"`, 3 buckets: one leader's changed
    partitions lie in every bucket, yet the job writes one isr_propagation per
    leader batch, at the times and with the partitions `isr replay` writes,
    whatever the micro-batches (the stage's state carried between them)."""
    path = tmp_path / "zk.jsonl"
    path.write_bytes(b"".join(line + b"\n" for line in _zk_lines()))
    opts = BASE + ["monitor.propagation=zk", "monitor.policy=" + ",".join(POLICIES),
                   "stream.state_buckets=3"]
    assert {bucket_of("default", "orders", p, 3) for p in range(6)} == {0, 1, 2}
    local = replay([str(path)], load_settings(None, opts).monitor)
    remote = replay_spark([str(path)], load_settings(None, opts), spark=spark,
                          max_offsets_per_trigger=limit)
    dump = lambda rs: "".join(r.model_dump_json() + "\n" for r in rs)  # noqa: E731
    assert dump(remote.decisions) == dump(local.decisions)
    propagated = [d for d in local.decisions if d.type == "isr_propagation"]
    # Per policy: the six shrinks in one record, the six expands in another.
    assert len(propagated) == 2 * len(POLICIES)
    assert all(len(p.partitions) == 6 for p in propagated)


def test_the_propagation_state_is_kept_per_batch_in_the_checkpoint(spark, tmp_path):
    """The driver stage's state store (Hadoop's file system, here a local
    checkpoint): a batch run again after a restart reads the state of the
    batch before it, a batch's state written again replaces it, the last 10
    are kept."""
    from isr.stream.propagation import KEEP, STATE_DIR, HadoopStore

    store = HadoopStore(spark, str(tmp_path / "checkpoint"))
    assert store.latest_before(0) is None  # a new checkpoint
    for batch_id in range(15):
        store.save(batch_id, f"[{batch_id}]")
    store.save(14, "[14, 'again']")
    restarted = HadoopStore(spark, f"file://{tmp_path}/checkpoint/")
    assert restarted.latest_before(15) == "[14, 'again']"
    assert restarted.latest_before(14) == "[13]"
    assert sorted(p.name for p in (tmp_path / "checkpoint" / STATE_DIR).iterdir()
                  if not p.name.startswith(".")) == sorted(str(i) for i in range(15 - KEEP, 15))


def test_watch_progress_passes_on_the_named_querys_progress_as_spark_writes_it(spark, tmp_path):
    """watch_progress's listener (ProgressJson) asks the JVM for each
    progress's JSON, not PySpark's field-by-field conversion: the named
    query's reports arrive as Spark's JSON, another query's do not."""
    import time

    from isr.pipeline.streaming import watch_progress

    src = tmp_path / "in"
    src.mkdir()
    (src / "a.txt").write_text("x\ny\nz\n")
    got: list[dict] = []
    other: list[dict] = []
    watch_progress(spark, "progress_json", got.append)
    watch_progress(spark, "nobody", other.append)
    query = (spark.readStream.format("text").load(str(src)).writeStream
             .format("memory").queryName("progress_json")
             .option("checkpointLocation", str(tmp_path / "cp"))
             .trigger(availableNow=True).start())
    query.awaitTermination(120)
    deadline = time.monotonic() + 30  # the listener bus is asynchronous
    while time.monotonic() < deadline and not any(p.get("numInputRows") for p in got):
        time.sleep(0.2)
    assert got and other == []
    assert all(p["name"] == "progress_json" and p["runId"] == str(query.runId) for p in got)
    assert sum(p["numInputRows"] for p in got) == 3
    assert {"batchId", "durationMs", "sources", "stateOperators", "sink"} <= set(got[-1])
