"""The Python sources' planner workers end with their call (stream/planners.py):
a real local Spark session plans a query of the `isr_lines` source; the
workers Spark forked to create the data source and to plan its read are gone
once the query ran, where Spark would keep them a minute for reuse."""

import json
import os
import subprocess
import sys

SCRIPT = """
import json, os, sys, time
from isr.config import Settings
from isr.stream.files import LinesDataSource
from isr.stream.job import spark_session

path = sys.argv[1]
spark = spark_session(Settings(), "local[1]", "planners")
spark.dataSource.register(LinesDataSource)
query = (spark.readStream.format("isr_lines").option("paths", json.dumps([path]))
         .option("end_ts", "1700000010000").load()
         .writeStream.format("noop").trigger(availableNow=True)
         .option("checkpointLocation", os.path.join(os.path.dirname(path), "cp")).start())
query.awaitTermination()

def children():
    kids = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            ppid = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
            cmd = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\\0")
        except OSError:
            continue
        kids.setdefault(ppid, []).append((int(pid), [c.decode() for c in cmd if c]))
    return kids

def planners():
    kids, seen, todo = children(), {}, [os.getpid()]
    while todo:
        for pid, cmd in kids.get(todo.pop(), []):
            todo.append(pid)
            if len(cmd) > 3 and cmd[2] == "pyspark.daemon" and cmd[3].startswith("pyspark.sql.worker."):
                seen.setdefault(cmd[3], 0)
                seen[cmd[3]] += sum(1 for _ in kids.get(pid, []))
    return seen

time.sleep(3)  # the JVM's destroy of a worker: the daemon kills it at once
print(json.dumps(planners()))
spark.stop()
"""

STEPS = ("pyspark.sql.worker.create_data_source", "pyspark.sql.worker.plan_data_source_read")


def planner_workers(tmp_path, **env) -> dict:
    events = tmp_path / "events.jsonl"
    events.write_text(json.dumps({"v": 1, "type": "broker", "cluster": "default",
                                  "ts": 1700000010000, "broker": 1, "broker_epoch": 10,
                                  "state": "registered"}) + "\n")
    out = subprocess.run([sys.executable, "-c", SCRIPT, str(events)],
                         env={**os.environ, **env}, cwd=tmp_path, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_sources_planner_workers_end_with_their_call(tmp_path):
    got = planner_workers(tmp_path)
    assert set(STEPS) <= set(got), got  # the planners ran, each under its daemon
    assert {step: got[step] for step in STEPS} == {step: 0 for step in STEPS}


def test_isr_planner_reuse_leaves_them_to_spark(tmp_path):
    got = planner_workers(tmp_path, ISR_PLANNER_REUSE="1")
    assert {step: got.get(step) for step in STEPS} == {step: 1 for step in STEPS}
