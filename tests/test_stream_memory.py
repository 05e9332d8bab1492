"""The memory settings of the sessions `isr` starts (job.spark_session):
defaults that stream.spark_conf overrides, some only where the tasks run in
the driver's JVM (docs/operations.md, "Memory")."""

import json
import os
import subprocess
import sys

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
                   "spark.sql.streaming.stateStore.rocksdb.maxMemoryUsageMB": "128"}
    got = session_conf(tmp_path, "local[1]",
                       'stream.spark_conf={"spark.task.maxDirectResultSize"="1m"}')
    assert got["spark.task.maxDirectResultSize"] == "1m"


def test_a_cluster_keeps_sparks_task_result_path():
    """On a cluster a direct result is an RPC message from an executor: the
    local default is not applied there; the others are."""
    for master in ("spark://h:7077", "yarn", "k8s://https://h:6443"):
        conf = job.memory_defaults_for(master)
        assert "spark.task.maxDirectResultSize" not in conf
        assert conf["spark.sql.streaming.stateStore.rocksdb.maxMemoryUsageMB"] == "128"
    assert job.memory_defaults_for("local[2]")["spark.task.maxDirectResultSize"] == "128m"
    assert job.memory_defaults_for(None)["spark.task.maxDirectResultSize"] == "128m"
