"""How a micro-batch's output records reach the driver: `collect()` (rows
pickled in the JVM) against `toArrow()` (job.collect_records), the CPU of
the driver's Python and of the JVM for each, on a cached DataFrame of
partition_state-like records.

    cd /tmp && PYTHONPATH=TREE python bench/bench_collect.py 200000 --port 21530
"""

from __future__ import annotations

import argparse
import os
import time

from pyspark.sql import SparkSession

from isr.contract.records import OutputRecord
from isr.stream.job import collect_records

VALUE = ("concat('{\"v\":1,\"type\":\"partition_state\",\"cluster\":\"c\",\"topic\":\"t\","
         "\"partition\":', cast(id as string), ',\"isr\":[1,2,3],\"leader\":1,"
         "\"policy\":\"kafka\",\"hw\":', cast(id * 7 as string), '}') as value")


def jvm_cpu(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("records", type=int)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--port", type=int, default=0, help="spark.driver.port (the block manager's is +10)")
    args = p.parse_args()
    builder = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
    if args.port:
        builder = (builder.config("spark.driver.port", str(args.port))
                   .config("spark.blockManager.port", str(args.port + 10)))
    spark = builder.getOrCreate()
    pid = int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())
    df = spark.range(args.records).selectExpr(
        "'partition_state' as kind", "concat('c/t/', cast(id as string)) as key",
        "sha2(cast(id as string), 256) as id", "id * 1000 as ts", VALUE).cache()
    df.count()
    ways = {"collect": lambda: [OutputRecord(*r) for r in df.collect()],
            "toArrow": lambda: collect_records(df)}
    assert ways["collect"]() == ways["toArrow"](), "the two ways differ"
    for _ in range(args.rounds):
        for name, way in ways.items():
            j0, p0 = jvm_cpu(pid), time.process_time()
            way()
            j, py = jvm_cpu(pid) - j0, time.process_time() - p0
            print(f"{name:8s} python {py:5.2f} s  jvm {j:5.2f} s  total {py + j:5.2f} s "
                  f"per {args.records} records", flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
