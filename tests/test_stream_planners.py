"""The Python sources' planner workers end with their call, and their daemons
after them (stream/planners.py): a real local Spark session plans a query of
the `isr_lines` source; the workers Spark forked to create the data source and
to plan its read, and the daemons that forked them, are gone once the query
ran, where Spark would keep the workers a minute and the daemons for the
application's life. A second query of the same application plans again
(Spark starts the daemons anew). The lookup of `pyspark_*` packages' sources
never starts its daemon (planners.skip_source_lookup)."""

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
def run(n):
    query = (spark.readStream.format("isr_lines").option("paths", json.dumps([path]))
             .option("end_ts", "1700000010000").load()
             .writeStream.format("noop").trigger(availableNow=True)
             .option("checkpointLocation", os.path.join(os.path.dirname(path), f"cp{n}")).start())
    query.awaitTermination()
    return sum(p["numInputRows"] for p in query.recentProgress)

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

got = []
for n in range(int(sys.argv[2])):
    rows = run(n)
    time.sleep(5)  # the worker's destroy, then the watcher's second
    got.append([rows, planners()])
print(json.dumps(got))
spark.stop()
"""

STEPS = ("pyspark.sql.worker.create_data_source", "pyspark.sql.worker.plan_data_source_read")
LOOKUP = "pyspark.sql.worker.lookup_data_sources"


def planner_workers(tmp_path, queries=1, **env) -> list:
    events = tmp_path / "events.jsonl"
    events.write_text(json.dumps({"v": 1, "type": "broker", "cluster": "default",
                                  "ts": 1700000010000, "broker": 1, "broker_epoch": 10,
                                  "state": "registered"}) + "\n")
    out = subprocess.run([sys.executable, "-c", SCRIPT, str(events), str(queries)],
                         env={**os.environ, **env}, cwd=tmp_path, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_sources_planner_workers_and_daemons_end_with_their_call(tmp_path):
    got = planner_workers(tmp_path, queries=2)
    # each query read the line, its planning done anew by new daemons, and
    # no planner's daemon stays: not even the lookup's (Spark keeps it for
    # the application's life), which never started
    assert [[rows > 0, sorted(daemons)] for rows, daemons in got] \
        == [[True, []], [True, []]]


def test_isr_planner_reuse_and_source_lookup_leave_them_to_spark(tmp_path):
    got = planner_workers(tmp_path, ISR_PLANNER_REUSE="1", ISR_SOURCE_LOOKUP="1")
    assert [[rows > 0, {step: daemons.get(step) for step in (*STEPS, LOOKUP)}]
            for rows, daemons in got] == [[True, {step: 1 for step in (*STEPS, LOOKUP)}]]
