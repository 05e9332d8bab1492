"""The Kafka source's offset question (`latestOffset`: the input's
partitions and their ends) with new clients each time against kept ones
(isr.kafka.client.OffsetProbe), and a read task's range with a new
consumer against a kept one, on a real Apache Kafka cluster
(isr/kafka/cluster.py: 1 KRaft controller + 3 brokers, started on
--port-base and left running; `--stop` stops it). docs/benchmarks.md,
"The source's offset questions, and the trigger at 20 k".

    PYTHONPATH=. python bench/bench_source_offsets.py FILE [--port-base 23600] [--stop]

FILE: events, one per line (its first 42,000 lines go into a 2-partition
topic once; the kept clients' third row writes one `{}` record more to each
partition before each question).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from confluent_kafka import TopicPartition

from isr.kafka.client import (OffsetProbe, consumer, ensure_topics, producer, topic_partitions,
                              watermarks)
from isr.kafka.cluster import ClusterConfig, KafkaCluster
from isr.stream.source import READ_AHEAD, KafkaRange, range_columns

TOPIC, LINES, RANGE = "offsets-bench", 42_000, 3_500


def timed(label: str, call, n: int, before=lambda: None) -> None:
    spent = []
    for _ in range(n):
        before()  # (not timed)
        t = time.perf_counter()
        call()
        spent.append(time.perf_counter() - t)
    spent.sort()
    print(f"{label}: median {spent[n // 2] * 1000:.1f} ms, min {spent[0] * 1000:.1f}, "
          f"max {spent[-1] * 1000:.1f} ({n} times)")


def fill(conf: dict, path: str) -> None:
    ensure_topics(conf, [TOPIC], 2, 1)
    if sum(e for _l, e in watermarks(conf, [(TOPIC, 0), (TOPIC, 1)]).values()) >= LINES:
        return
    p = producer(conf)
    with open(path, "rb") as f:
        for i, line in zip(range(LINES), f):
            p.produce(TOPIC, line.rstrip(b"\n"), partition=i % 2)
            if i % 10_000 == 0:
                p.poll(0)
    p.flush()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    ap.add_argument("--port-base", type=int, default=23600)
    ap.add_argument("--dir", default="/tmp/bench-source-offsets")
    ap.add_argument("--stop", action="store_true", help="stop the cluster at the end")
    args = ap.parse_args()
    cluster = KafkaCluster(ClusterConfig(dir=Path(args.dir), port_base=args.port_base,
                                         jmx_exporter=False, detach=True,
                                         broker_heap="-Xms256m -Xmx1g"))
    if not cluster.running():
        cluster.start()
    conf = {"bootstrap.servers": cluster.bootstrap}
    try:
        fill(conf, args.file)
        timed("partitions + ends, new clients", lambda: watermarks(
            conf, topic_partitions(conf, [TOPIC])), 15)
        timed("partitions alone, new admin client", lambda: topic_partitions(conf, [TOPIC]), 15)
        with OffsetProbe(conf) as probe:
            timed("partitions + ends, kept clients (OffsetProbe)",
                  lambda: probe.watermarks(probe.partitions([TOPIC])), 15)
            timed("partitions alone, kept admin client", lambda: probe.partitions([TOPIC]), 15)
            writer = producer(conf)

            def write_one_each() -> None:  # a new end on both partitions: fetched
                for partition in (0, 1):
                    writer.produce(TOPIC, b"{}", partition=partition)
                writer.flush()

            timed("partitions + ends, kept clients, a record written before each",
                  lambda: probe.watermarks(probe.partitions([TOPIC])), 15, write_one_each)
        starts = iter(range(0, 10**9, RANGE))

        def new_consumer() -> None:
            s = next(starts) % (LINES // 2 - RANGE)
            r = KafkaRange(TOPIC, 0, s, s + RANGE, conf, 30.0, True)
            assert sum(len(c["offset"]) for c in range_columns(r, ("value", "offset"))) == RANGE

        kept = consumer({**READ_AHEAD, **conf}, **{"auto.offset.reset": "error"})

        def kept_consumer() -> None:
            s = next(starts) % (LINES // 2 - RANGE)
            kept.assign([TopicPartition(TOPIC, 0, s)])
            got = 0
            while got < RANGE:
                got += sum(1 for m in kept.consume(RANGE - got, timeout=1.0)
                           if m.error() is None and m.offset() < s + RANGE)

        timed(f"a read task's range of {RANGE:,}, new consumer", new_consumer, 10)
        timed(f"a read task's range of {RANGE:,}, kept consumer", kept_consumer, 10)
        kept.close()
    finally:
        if args.stop:
            cluster.stop(quiet=True)


if __name__ == "__main__":
    main()
