"""The Python Kafka source's read task split by stage, without Spark (issue
23, branch `floor`): what a read task's CPU goes to at the realistic 100 k
workload, beside bench_realistic_run.py's `--floor` runs.

Reads the topic bench_realistic_run.py loaded (2 partitions) in ranges of
`--range` records, as the job's read tasks do (`input.max_offsets_per_trigger`
100,000 = 50,000 a partition a batch), and charges process CPU (the
librdkafka threads included) and the bytes they hand on to, cumulatively:

- read: source.range_columns alone (the Kafka consumer: librdkafka's fetch,
  confluent_kafka's Message objects, the column lists);
- pack: the same plus Packer.pack (msgspec decode, the session shares, the
  rows, the Arrow IPC of each bucket's pack) and packed_batch (the Arrow
  batch Spark gets), i.e. source.packed_range;
- raw: the same with bench/floor/sitecustomize.py's raw pack (no decode).

What the job adds beyond this in the task workers (Spark's Python data
source runner turning the yielded batches into Arrow for the JVM, the bucket
tasks' pandas frames and the hand-over to the engine process) is the job's
task-worker CPU minus these.

    PYTHONPATH=/work/wt/floor /work/main/.venv/bin/python -P bench/floor/read_split.py \\
        --bootstrap 127.0.0.1:21101 --topic rr.real100k.session-20 --rounds 2
"""

from __future__ import annotations

import argparse
import gc
import time

from confluent_kafka import TopicPartition

from isr.kafka.client import consumer
from isr.stream import packing
from isr.stream.partitioning import bucket_labels
from isr.stream.source import KafkaRange, packed_range, range_columns


def ranges(bootstrap: str, topic: str, size: int) -> list[KafkaRange]:
    c = consumer({"bootstrap.servers": bootstrap})
    out = []
    try:
        for p in (0, 1):
            low, high = c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            for start in range(low, high, size):
                out.append(KafkaRange(topic, p, start, min(high, start + size),
                                      {"bootstrap.servers": bootstrap}, 60.0, True))
    finally:
        c.close()
    return out


def timed(label: str, rs: list[KafkaRange], each) -> float:
    gc.collect()
    t = time.process_time()
    n = size = 0
    for r in rs:
        for item in each(r):
            n += 1
            if isinstance(item, dict):  # range_columns: the record values
                size += sum(len(v) for v in item["value"] if v)
            else:  # an Arrow batch of PACKED_SCHEMA: its packs and summaries
                size += item.column("pack").nbytes + item.column("summary").nbytes
    cpu = time.process_time() - t
    print(f"  {label:5s} {cpu:6.2f} CPU s ({n} batches, {size / 1e6:.1f} MB of "
          f"{'values' if label == 'read' else 'packs'})", flush=True)
    return cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--range", type=int, default=50_000)
    ap.add_argument("--buckets", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    rs = ranges(args.bootstrap, args.topic, args.range)
    pack = {"labels": list(bucket_labels(args.buckets)), "max_future_ms": 60_000}
    real = packing.Packer.pack
    from importlib import util
    from pathlib import Path
    spec = util.spec_from_file_location("floor_shim", Path(__file__).with_name("sitecustomize.py"))
    shim = util.module_from_spec(spec)
    spec.loader.exec_module(shim)
    for k in range(args.rounds):
        print(f"round {k + 1}: {len(rs)} ranges of <= {args.range:,} records", flush=True)
        timed("read", rs, range_columns)
        packing.Packer.pack = real
        timed("pack", rs, lambda r: packed_range(r, pack, None))
        packing.Packer.pack = shim._raw_pack
        timed("raw", rs, lambda r: packed_range(r, pack, None))
        packing.Packer.pack = real


if __name__ == "__main__":
    main()
