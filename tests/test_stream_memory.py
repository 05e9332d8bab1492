"""The memory of the sessions `isr` starts (job.spark_session): defaults
that stream.spark_conf overrides, some only where the tasks run in the
driver's JVM (docs/operations.md, "Memory"); the driver's collected batch."""

import json
import os
import subprocess
import sys

import pytest

from isr.contract.records import OutputRecord
from isr.stream import job

SCRIPT = """
import json, sys
from isr.config import load_settings
from isr.stream.job import spark_session
s = load_settings(None, sys.argv[2:])
spark = spark_session(s, sys.argv[1], "memory-defaults")
conf = spark.sparkContext.getConf()
print(json.dumps({k: conf.get(k, None) for k in (
    "spark.task.maxDirectResultSize", "spark.sql.streaming.stateStore.rocksdb.maxMemoryUsageMB")}))
spark.stop()
"""


def session_conf(tmp_path, master: str, *conf: str) -> dict:
    out = subprocess.run([sys.executable, "-c", SCRIPT, master, *conf], env=dict(os.environ),
                         cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_local_sessions_task_results_go_to_the_driver_directly(tmp_path):
    """A bucket's result (~60 MB at 100 k partitions when every partition's
    state goes out) reaches the driver as it is, not stored in the block
    manager and read back (Spark's 1 MB default): the driver JVM's heap
    peaked ~110 MB lower. stream.spark_conf says otherwise."""
    got = session_conf(tmp_path, "local[1]")
    assert got == {"spark.task.maxDirectResultSize": "128m",
                   "spark.sql.streaming.stateStore.rocksdb.maxMemoryUsageMB": "16"}
    got = session_conf(tmp_path, "local[1]",
                       'stream.spark_conf={"spark.task.maxDirectResultSize"="1m"}')
    assert got["spark.task.maxDirectResultSize"] == "1m"


def test_a_cluster_keeps_sparks_task_result_path():
    """On a cluster a direct result is an RPC message from an executor: the
    local default is not applied there; the others are."""
    for master in ("spark://h:7077", "yarn", "k8s://https://h:6443"):
        conf = job.memory_defaults_for(master)
        assert "spark.task.maxDirectResultSize" not in conf
        assert conf["spark.sql.streaming.stateStore.rocksdb.maxMemoryUsageMB"] == "16"
    assert job.memory_defaults_for("local[2]")["spark.task.maxDirectResultSize"] == "128m"
    assert job.memory_defaults_for(None)["spark.task.maxDirectResultSize"] == "128m"


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


class Collected:
    """What collect_records calls on a micro-batch's DataFrame: toArrow(),
    whose table nothing else holds (as Spark's)."""

    def __init__(self, table) -> None:
        self.table = table

    def toArrow(self):  # noqa: N802 - Spark's name
        table, self.table = self.table, None
        return table


def test_a_collected_batch_keeps_its_records_in_order():
    pa = pytest.importorskip("pyarrow")
    rows = [("partition_state", f"c/t/{i}", f"id{i}", i, f'{{"partition":{i}}}')
            for i in range(25)]
    columns = list(zip(*rows))
    chunks = [pa.record_batch([pa.array(c[i:i + 10]) for c in columns],
                              names=list(OutputRecord._fields)) for i in range(0, 25, 10)]
    records = job.collect_records(Collected(pa.Table.from_batches(chunks)))
    assert records == [OutputRecord(*r) for r in rows]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/statm")
def test_a_collected_batchs_arrow_buffers_leave_the_driver_before_the_sinks_run(monkeypatch):
    """A batch that sends every partition's state is ~0.1 GB of Arrow at
    100 k partitions: once its records are made, that memory leaves the
    process; Arrow's allocator kept it for reuse, resident beside the
    records while the sinks ran (the Python driver's peak)."""
    pa = pytest.importorskip("pyarrow")
    monkeypatch.delenv("ISR_MALLOC_TRIM", raising=False)
    n, value = 8_000, "x" * 8_000  # 64 MB of values in 8 record batches
    chunks = [pa.record_batch([pa.array(["partition_state"] * 1_000), pa.array(["k"] * 1_000),
                               pa.array(["i"] * 1_000), pa.array([0] * 1_000, pa.int64()),
                               pa.array([value] * 1_000)], names=list(OutputRecord._fields))
              for _ in range(n // 1_000)]
    df = Collected(pa.Table.from_batches(chunks))
    del chunks
    held = rss_mb()  # the batch as Arrow
    records = job.collect_records(df)
    assert len(records) == n and records[-1].value == value
    # the records' 64 MB of values replaced the Arrow batch's, not joined it
    assert rss_mb() < held + 24
