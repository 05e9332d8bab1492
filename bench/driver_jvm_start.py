"""CPU seconds of Spark's driver JVM per start (issue 23, branch `jvmstart`):
after the session is up, after `replay_spark` of a file, and at its exit
(os.wait4, Spark's shutdown hooks included). Starts the session as `isr
replay --engine spark` does; compare with the class archive off and on:

    for a in 0 1; do ISR_CLASS_ARCHIVE=$a python bench/driver_jvm_start.py EVENTS [KEY=VALUE ...]; done

KEY=VALUE: settings (input.source=kafka puts the Kafka connector's jars in
spark.jars). Prints one JSON line.
"""

from __future__ import annotations

import json
import os
import sys
import time


def cpu(pid: int) -> float:
    """utime + stime of `pid`, seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    from isr.config import load_settings
    from isr.stream.job import spark_session
    from isr.stream.replay_spark import replay_spark

    events, extra = sys.argv[1], sys.argv[2:]
    settings = load_settings(None, ["monitor.policy=kafka",
                                    "monitor.replica_lag_time_max_ms=10000", *extra])
    started = time.monotonic()
    spark = spark_session(settings, settings.stream.master, "isr-replay", memory_defaults=False)
    proc = spark.sparkContext._gateway.proc
    session = cpu(proc.pid)
    up = time.monotonic()
    replay_spark([events], settings, spark=spark)
    query = cpu(proc.pid)
    replayed = time.monotonic()
    with open(f"/proc/{proc.pid}/cmdline", "rb") as f:
        archive = [a.decode() for a in f.read().split(b"\0") if b"Archive" in a]
    spark.stop()
    proc.stdin.close()  # what the end of the Python process does: the gateway exits
    _, status, usage = os.wait4(proc.pid, 0)
    print(json.dumps({"session": round(session, 2), "query": round(query, 2),
                      "exit": round(usage.ru_utime + usage.ru_stime, 2), "status": status,
                      "wall": [round(up - started, 1), round(replayed - started, 1),
                               round(time.monotonic() - started, 1)],
                      "archive": archive}))


if __name__ == "__main__":
    main()
