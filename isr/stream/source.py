"""A Kafka streaming source on Spark's Python Data Source API (confluent-kafka).

Where Spark's built-in `kafka` format cannot be used (its jar is not in the
pyspark wheel), `format("isr_kafka")` reads the same topics with the same
option names and the same columns (key, value, topic, partition, offset,
timestamp). Offsets are a JSON dict {"topic/partition": next offset} kept in
Spark's checkpoint; each micro-batch reads one input partition per Kafka
partition offset range, as Arrow record batches.
"""

from __future__ import annotations

import time
from typing import Iterator, Optional

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

SCHEMA = ("key binary, value binary, topic string, partition int, offset long, "
          "timestamp timestamp")
ARROW_BATCH_ROWS = 8192
# A read that makes no progress for this long fails the task (Spark retries it).
STALL_TIMEOUT_S = 60.0


def record_batch(keys: list, values: list, topic: str, partition: int, offsets: list,
                 timestamps_us: Optional[list] = None):
    """One Arrow batch with the Kafka sources' columns (SCHEMA)."""
    import pyarrow as pa

    n = len(offsets)
    ts_type = pa.timestamp("us", tz="UTC")
    return pa.RecordBatch.from_arrays(
        [pa.array(keys, pa.binary()), pa.array(values, pa.binary()),
         pa.array([topic] * n, pa.string()), pa.array([partition] * n, pa.int32()),
         pa.array(offsets, pa.int64()),
         pa.nulls(n, ts_type) if timestamps_us is None else pa.array(timestamps_us, ts_type)],
        names=["key", "value", "topic", "partition", "offset", "timestamp"])


def _key(topic: str, partition: int) -> str:
    return f"{topic}/{partition}"


def _split(key: str) -> tuple[str, int]:
    topic, _, partition = key.rpartition("/")
    return topic, int(partition)


def client_options(options: dict) -> dict[str, str]:
    """Kafka client properties from `kafka.`-prefixed options, as Spark's connector."""
    return {k[len("kafka."):]: str(v) for k, v in options.items() if k.startswith("kafka.")}


def share_limit(lags: dict[str, int], max_rows: int) -> dict[str, int]:
    """Split a per-trigger row limit over partitions in proportion to their lag,
    deterministically, always making progress."""
    total = sum(lags.values())
    if total <= max_rows:
        return dict(lags)
    shares = {k: (lag * max_rows) // total for k, lag in lags.items()}
    left = max_rows - sum(shares.values())
    for k in sorted(lags):  # hand out what rounding left, in a fixed order
        if left <= 0:
            break
        if shares[k] < lags[k]:
            shares[k] += 1
            left -= 1
    return shares


class KafkaRange(InputPartition):
    def __init__(self, topic: str, partition: int, start: int, end: int, conf: dict) -> None:
        super().__init__((topic, partition, start, end))
        self.topic, self.partition, self.start, self.end, self.conf = (
            topic, partition, start, end, conf)


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options) -> None:
        # Spark hands options over case-insensitively (keys lower-cased).
        self.options = {str(k).lower(): v for k, v in dict(options).items()}
        self.conf = client_options(self.options)
        if "bootstrap.servers" not in self.conf:
            raise ValueError("isr_kafka: option kafka.bootstrap.servers is required")
        self.topics = [t for t in self.options.get("subscribe", "").split(",") if t]
        self.pattern: Optional[str] = self.options.get("subscribepattern")
        if not self.topics and not self.pattern:
            raise ValueError("isr_kafka: set option subscribe or subscribePattern")
        self.starting = self.options.get("startingoffsets", "earliest")
        if self.starting not in ("earliest", "latest"):
            raise ValueError("isr_kafka: startingOffsets must be earliest or latest")
        limit = self.options.get("maxoffsetspertrigger")
        self.max_offsets = int(limit) if limit else None
        self.latest: dict[str, int] = {}
        self.target: Optional[dict[str, int]] = None  # Trigger.AvailableNow

    # ------------------------------------------------------------ offsets
    def _partitions(self) -> list[tuple[str, int]]:
        from isr.kafka.client import topic_partitions
        return topic_partitions(self.conf, self.topics, self.pattern)

    def _ends(self, known: dict[str, int]) -> dict[str, int]:
        from isr.kafka.client import end_offsets
        tps = self._partitions()
        ends = end_offsets(self.conf, tps, {_split(k): v for k, v in known.items()})
        return {_key(t, p): v for (t, p), v in ends.items()}

    def initialOffset(self) -> dict:
        if self.starting == "latest":
            return self._ends({})
        return {_key(t, p): 0 for t, p in self._partitions()}

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        ends = self._ends(start) if self.target is None else dict(self.target)
        self.latest = ends
        # A partition that appeared after the query started is read from its start.
        begin = {k: start.get(k, 0 if self.starting == "earliest" else ends[k]) for k in ends}
        if isinstance(limit, ReadMaxRows):
            lags = {k: max(0, ends[k] - begin[k]) for k in ends}
            shares = share_limit(lags, limit.max_rows)
            ends = {k: begin[k] + shares[k] for k in ends}
        return {**start, **ends}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.max_offsets) if self.max_offsets else ReadAllAvailable()

    def reportLatestOffset(self) -> Optional[dict]:
        return self.latest or None

    def prepareForTriggerAvailableNow(self) -> None:
        self.target = self._ends({})

    def partitions(self, start: dict, end: dict) -> list[KafkaRange]:
        ranges = []
        for key in sorted(end):
            begin = start.get(key, 0)
            if end[key] > begin:
                topic, partition = _split(key)
                ranges.append(KafkaRange(topic, partition, begin, end[key], self.conf))
        return ranges

    def commit(self, end: dict) -> None:
        pass  # offsets live in Spark's checkpoint, not in a consumer group

    # ------------------------------------------------------------ data
    def read(self, partition: KafkaRange) -> Iterator:
        return read_range(partition)


def read_range(r: KafkaRange) -> Iterator:
    """The records [start, end) of one Kafka partition as Arrow record batches."""
    from confluent_kafka import KafkaError, TopicPartition

    from isr.kafka.client import consumer

    c = consumer(r.conf, **{"enable.partition.eof": True, "auto.offset.reset": "earliest"})
    columns: dict[str, list] = {n: [] for n in ("key", "value", "offset", "timestamp")}

    def flush():
        batch = record_batch(columns["key"], columns["value"], r.topic, r.partition,
                             columns["offset"], columns["timestamp"])
        for values in columns.values():
            values.clear()
        return batch

    try:
        c.assign([TopicPartition(r.topic, r.partition, r.start)])
        position, last_progress = r.start, time.monotonic()
        while position < r.end:
            messages = c.consume(num_messages=min(ARROW_BATCH_ROWS, r.end - position),
                                 timeout=1.0)
            for m in messages:
                err = m.error()
                if err is not None:
                    if err.code() != KafkaError._PARTITION_EOF:
                        raise RuntimeError(f"isr_kafka: reading {r.topic}/{r.partition}: {err}")
                    if m.offset() >= r.end:  # the range ends in control records
                        position = r.end
                    continue
                offset = m.offset()
                if offset >= r.end:
                    position = r.end
                    break
                columns["key"].append(m.key())
                columns["value"].append(m.value())
                columns["offset"].append(offset)
                columns["timestamp"].append(m.timestamp()[1] * 1000)
                position = offset + 1
            if messages:
                last_progress = time.monotonic()
            elif time.monotonic() - last_progress > STALL_TIMEOUT_S:
                raise RuntimeError(f"isr_kafka: no progress reading {r.topic}/{r.partition} "
                                   f"at offset {position} (end {r.end})")
            if len(columns["offset"]) >= ARROW_BATCH_ROWS:
                yield flush()
        if columns["offset"]:
            yield flush()
    finally:
        c.close()


class IsrKafkaDataSource(DataSource):
    """`spark.readStream.format("isr_kafka").option("kafka.bootstrap.servers", ...)
    .option("subscribe", "topic").load()`"""

    @classmethod
    def name(cls) -> str:
        return "isr_kafka"

    def schema(self) -> str:
        return SCHEMA

    def streamReader(self, schema) -> KafkaStreamReader:
        return KafkaStreamReader(self.options)
