"""The packing stage offline, without Spark: a file's records through the
job's packing function (packing.make_packer, as mapInArrow calls it after
Spark's Kafka source), or through `session_shares` alone.

    python bench/bench_packing.py FILE [--skip N] [--records N] [--reps N] [--shares]

The records [skip, skip + records) of FILE go to 2 input partitions by
their routing key (crc32, as bench_live_bucket.py), each cut into Arrow
batches of 10,000 (spark.sql.execution.arrow.maxRecordsPerBatch) with the
Kafka source's columns and a batch clock far ahead (nothing is `future`);
2 buckets. One warm-up pass (the caches a reused worker has), then `--reps`
timed passes: the least CPU seconds of them, and an md5 of every packed
column (the same file and arguments must give the same md5 on two trees).
`--shares`: only the fetch_session events, decoded once, through
session_shares(event, 2) per pass.

Instruction counts, two trees: the difference between `--reps 1` and
`--reps 0` under cachegrind is one pass:

    REPS=0,1: valgrind --tool=cachegrind --cache-sim=no --cachegrind-out-file=/dev/null \\
        python bench/bench_packing.py FILE --skip 200000 --records 100000 --reps R
"""

from __future__ import annotations

import argparse
import hashlib
import time
import zlib

import orjson
import pyarrow as pa

from isr.contract.decode import decode_many
from isr.contract.events import routing_key
from isr.stream.packing import make_packer, session_shares

BATCH = 10_000
BUCKETS = 2
CLOCK_US = 1_900_000_000_000_000  # far ahead of the files' ts: nothing is future


def read(path: str, skip: int, records: int) -> list[bytes]:
    lines = []
    with open(path, "rb") as f:
        for i, line in enumerate(f):
            if i >= skip + records:
                break
            if i >= skip:
                lines.append(line.rstrip(b"\n"))
    return lines


def arrow_batches(partition: int, lines: list[bytes]) -> list:
    """One input partition's records as the Kafka source's Arrow batches."""
    out = []
    for lo in range(0, len(lines), BATCH):
        values = lines[lo:lo + BATCH]
        m = len(values)
        out.append(pa.RecordBatch.from_pydict({
            "key": pa.array([None] * m, pa.binary()), "value": pa.array(values, pa.binary()),
            "topic": pa.array(["in"] * m), "partition": pa.array([partition] * m, pa.int32()),
            "offset": pa.array(range(lo, lo + m), pa.int64()),
            "behind": pa.array([False] * m),
            "clock": pa.array([CLOCK_US] * m, pa.timestamp("us", tz="UTC"))}))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("file")
    ap.add_argument("--skip", type=int, default=0)
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--shares", action="store_true")
    args = ap.parse_args()
    lines = read(args.file, args.skip, args.records)
    if args.shares:
        events = [e for e in decode_many([x for x in lines if b"fetch_session" in x])]

        def one_pass():
            return [session_shares(e, BUCKETS) for e in events]

        def digest(out) -> str:
            return hashlib.md5(b"".join(b"".join(s) for s in out)).hexdigest()
        what = f"{len(events):,} fetch_session events"
    else:
        parts: list[list] = [[], []]
        for line in lines:
            parts[zlib.crc32(routing_key(orjson.loads(line))) % 2].append(line)
        inputs = [arrow_batches(p, ls) for p, ls in enumerate(parts)]

        def one_pass():
            out = []
            for batches in inputs:  # one task per input partition, its own packer
                out.extend(make_packer(list(range(BUCKETS)), 60_000, True)(iter(batches)))
            return out

        def digest(out) -> str:
            h = hashlib.md5()
            for batch in out:
                for column in batch.columns:
                    for v in column.to_pylist():
                        h.update(repr(v).encode())
            return h.hexdigest()
        what = f"{len(lines):,} records"
    md5 = digest(one_pass())  # the warm-up pass
    cpu = []
    for _ in range(args.reps):
        t = time.process_time()
        one_pass()
        cpu.append(time.process_time() - t)
    print(f"{what}: CPU s per pass, least of {args.reps}: {min(cpu) if cpu else 0:.3f} "
          f"({' '.join(f'{c:.3f}' for c in cpu)}); md5 {md5}")


if __name__ == "__main__":
    main()
