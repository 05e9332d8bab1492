"""The packing stage offline, without Spark: a file's records through the
job's packing function (packing.make_packer, as mapInArrow calls it after
Spark's Kafka source), or through `session_shares` alone.

    python bench/bench_packing.py FILE [--skip N] [--records N] [--reps N] [--shares]
    python bench/bench_packing.py FILE --source [--range N] [--kafka HOST:PORT --topic T]

The records [skip, skip + records) of FILE go to 2 input partitions by
their routing key (crc32, as bench_live_bucket.py), each cut into Arrow
batches of 10,000 (spark.sql.execution.arrow.maxRecordsPerBatch) with the
Kafka source's columns and a batch clock far ahead (nothing is `future`);
2 buckets. One warm-up pass (the caches a reused worker has), then `--reps`
timed passes: the least CPU seconds of them, and an md5 of every packed
column (the same file and arguments must give the same md5 on two trees).
`--shares`: only the fetch_session events, decoded once, through
session_shares(event, 2) per pass.

`--source`: the Python Kafka source's read tasks instead (`input.source =
"python"`, every job's packing): `source.packed_range` of ranges of
`--range` records (100,000 max offsets per trigger over the 2 input
partitions: 50,000) for 2 buckets, with the batch clock of a live job. The
records come as `source.range_columns` gives them (its lists by column,
ARROW_BATCH_ROWS at a time), made once from the file (keys = the
contract's routing keys, offsets from 0 per input partition), so only the
packing is timed; with `--kafka BOOTSTRAP --topic T` they are read from
that topic instead (its partitions' first records, as bench_realistic_run.py
loads the file: the real range_columns, the Kafka read timed too). The md5
is of every packed row's bucket, pack and summary bytes.

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
from typing import Iterator

import orjson
import pyarrow as pa

from isr.contract.decode import decode_many
from isr.contract.events import routing_key
from isr.stream import source
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


def source_columns(partition: list[bytes], keys: list[bytes]) -> dict[str, list]:
    """One input partition's records as range_columns' lists by column."""
    n = len(partition)
    return {"key": keys, "value": partition, "offset": list(range(n)),
            "timestamp": [1_700_000_000_000_000] * n}


def source_pass(ranges: list, columns: dict, pack: dict, clock_ms: int) -> list:
    """`packed_range` of each range; without `columns` (--kafka) range_columns
    reads Kafka itself."""
    real = source.range_columns

    def from_lists(r, fields=("key", "value", "offset", "timestamp")
                   ) -> Iterator[dict[str, list]]:
        records = columns[r.partition]
        for lo in range(r.start, r.end, source.ARROW_BATCH_ROWS):
            hi = min(r.end, lo + source.ARROW_BATCH_ROWS)
            yield {name: records[name][lo:hi] for name in fields}

    out = []
    source.range_columns = from_lists if columns else real
    try:
        for r in ranges:
            out.extend(source.packed_range(r, pack, clock_ms))
    finally:
        source.range_columns = real
    return out


def source_setup(args, lines: list[bytes]):
    """(ranges, columns by partition or None) for --source."""
    conf = {}
    if args.kafka:
        from confluent_kafka import Consumer, TopicPartition

        conf = {"bootstrap.servers": args.kafka}
        c = Consumer({**conf, "group.id": "bench", "log_level": 0})
        md = c.list_topics(args.topic, timeout=10).topics[args.topic]
        sizes = {p: min(c.get_watermark_offsets(TopicPartition(args.topic, p), timeout=10)[1],
                        args.records // len(md.partitions)) for p in sorted(md.partitions)}
        c.close()
        columns = None
    else:
        parts: list[list] = [[], []]
        keys: list[list] = [[], []]
        for line in lines:
            key = routing_key(orjson.loads(line))
            p = zlib.crc32(key) % 2
            parts[p].append(line)
            keys[p].append(key)
        columns = {p: source_columns(parts[p], keys[p]) for p in (0, 1)}
        sizes = {p: len(parts[p]) for p in (0, 1)}
    ranges = [source.KafkaRange(args.topic or "in", p, lo, min(n, lo + args.range), conf,
                                30.0, True, lo + args.range < n)
              for p, n in sizes.items() for lo in range(0, n, args.range)]
    return ranges, columns


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("file")
    ap.add_argument("--skip", type=int, default=0)
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--shares", action="store_true")
    ap.add_argument("--source", action="store_true")
    ap.add_argument("--range", type=int, default=50_000)
    ap.add_argument("--kafka", default=None)
    ap.add_argument("--topic", default=None)
    args = ap.parse_args()
    lines = [] if args.kafka else read(args.file, args.skip, args.records)
    if args.source:
        ranges, columns = source_setup(args, lines)
        pack = {"labels": list(range(BUCKETS)), "max_future_ms": 60_000, "live": True}

        def one_pass():
            return source_pass(ranges, columns, pack, CLOCK_US // 1000)

        def digest(out) -> str:
            h = hashlib.md5()
            for batch in out:
                for row in zip(*(c.to_pylist() for c in batch.columns)):
                    h.update(repr(row).encode())
            return h.hexdigest()
        what = (f"{sum(r.end - r.start for r in ranges):,} records in {len(ranges)} "
                f"ranges{' from Kafka' if args.kafka else ''}")
    elif args.shares:
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
