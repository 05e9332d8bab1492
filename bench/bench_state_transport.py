"""What the partition_state records of a run cost between the buckets'
engine and the driver's sinks, per record: the engine process's pickling of
its reply (engineproc), the worker's unpickling, OutputRecord._make, the
pandas frame and the Arrow table Spark takes from it, and the driver's
collect_records. Best of 5, CPU seconds (time.process_time) per record.

    python bench/bench_live_bucket.py FILE --set monitor.replica_lag_time_max_ms=10000 \\
        --batch 20000 --end --dump /tmp/x/records.jsonl
    python -P bench/bench_state_transport.py /tmp/x/records.jsonl
"""
import pickle
import sys
import time

import orjson
import pandas as pd, pyarrow as pa
from isr.contract.records import OutputRecord
rows = []
for line in open(sys.argv[1], "rb"):
    r = orjson.loads(line)
    if r[2] == "partition_state":
        rows.append(OutputRecord(*r[2:]))
N = len(rows)
def t(name, f, reps=5):
    best = 1e9
    for _ in range(reps):
        a = time.process_time(); out = f(); b = time.process_time()
        best = min(best, b - a)
    print(f"{name:50s} {best/N*1e6:7.2f} us/state")
    return out
tuples = [tuple(r) for r in rows]
blob = t("engine: pickle.dumps(tuples)", lambda: pickle.dumps(tuples, protocol=5))
back = t("worker: pickle.loads", lambda: pickle.loads(blob))
made = t("worker: OutputRecord._make", lambda: [OutputRecord._make(r) for r in back])
cols = list(OutputRecord._fields)
frame = t("worker: pd.DataFrame(rows)", lambda: pd.DataFrame(made, columns=cols))
t("worker: pd.DataFrame(tuples)", lambda: pd.DataFrame(back, columns=cols))
def bycol():
    c = list(zip(*back))
    return pd.DataFrame(dict(zip(cols, c)))
t("worker: pd.DataFrame(columns)", bycol)
schema = pa.schema([("kind", pa.string()), ("key", pa.string()), ("id", pa.string()), ("ts", pa.int64()), ("value", pa.string())])
tab = t("worker: arrow from pandas (Spark's)", lambda: pa.Table.from_pandas(frame, schema=schema, preserve_index=False))
from isr.stream.job import collect_records
class DF:
    def toArrow(self): return tab
t("driver: collect_records", lambda: collect_records(DF()))
