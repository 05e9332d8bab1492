"""Exactly-once output to Kafka topics, from foreachBatch on the driver.

Every record carries headers `isr.query`, `isr.batch` and `isr.id` (the
decision's deterministic id). After a micro-batch's records are delivered
(idempotent producer, acks=all), one commit record {batch, offsets} goes to
the commit topic. On restart Spark re-runs the first uncommitted batch with
the same input and state, so it produces the same records: the sink skips a
batch it has already committed, and for a batch cut short by a crash it
reads what reached the output topics after the last commit and writes only
the rest. No Kafka transactions are needed (the embedded broker does not
hide aborted ones).
"""

from __future__ import annotations

import json
from typing import Iterable, Optional

from confluent_kafka import KafkaError, TopicPartition

from isr.config import OutputSettings
from isr.contract.records import OutputRecord
from isr.kafka.client import consumer, producer, send, topic_partitions

H_QUERY, H_BATCH, H_ID = "isr.query", "isr.batch", "isr.id"


class SinkError(RuntimeError):
    pass


def _headers(msg) -> dict[str, str]:
    return {k: (v.decode() if isinstance(v, bytes) else v) for k, v in (msg.headers() or [])}


def read_to_end(conf: dict, starts: dict[tuple[str, int], int], timeout: float = 30.0):
    """Every message from the given offsets to the end of each partition."""
    if not starts:
        return
    c = consumer(conf, **{"auto.offset.reset": "earliest"})
    try:
        c.assign([TopicPartition(t, p, o) for (t, p), o in starts.items()])
        waiting = set(starts)
        idle = 0.0
        while waiting:
            msg = c.poll(0.5)
            if msg is None:
                idle += 0.5
                if idle > timeout:
                    raise SinkError(f"no end of partition seen for {sorted(waiting)}")
                continue
            idle = 0.0
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    waiting.discard((msg.topic(), msg.partition()))
                    continue
                raise SinkError(f"reading {msg.topic()}/{msg.partition()}: {err}")
            yield msg
    finally:
        c.close()


class KafkaSink:
    def __init__(self, conf: dict, output: OutputSettings, query_name: str) -> None:
        self.conf = conf
        self.output = output
        self.query = query_name
        self.topics = {
            "isr_change": output.changes_topic,
            "isr_propagation": output.changes_topic,
            "partition_state": output.state_topic,
            "dead_letter": output.dead_letter_topic,
            "alert": output.alerts_topic,
        }
        self._producer = producer(conf)
        self._committed: Optional[tuple[int, dict[str, int]]] = None
        self._recovered = False

    # ------------------------------------------------------------ commits
    def _last_commit(self) -> tuple[int, dict[str, int]]:
        tps = topic_partitions(self.conf, [self.output.commit_topic])
        last = (-1, {})
        for msg in read_to_end(self.conf, {tp: 0 for tp in tps}):
            if msg.key() == self.query.encode():
                record = json.loads(msg.value())
                last = (record["batch"], record["offsets"])
        return last

    def _already_written(self, batch_id: int, offsets: dict[str, int]) -> set[str]:
        """Ids of this batch's records that a crashed attempt delivered."""
        tps = topic_partitions(self.conf, sorted(set(self.topics.values())))
        starts = {tp: offsets.get(f"{tp[0]}/{tp[1]}", 0) for tp in tps}
        ids = set()
        for msg in read_to_end(self.conf, starts):
            h = _headers(msg)
            if h.get(H_QUERY) == self.query and h.get(H_BATCH) == str(batch_id):
                ids.add(h.get(H_ID))
        return ids

    # ------------------------------------------------------------ write
    def write_batch(self, batch_id: int, records: Iterable[OutputRecord]) -> int:
        """Write one micro-batch's output records; returns how many were
        produced (0 for a batch already committed)."""
        if self._committed is None:
            self._committed = self._last_commit()
        last_batch, offsets = self._committed
        if batch_id <= last_batch:
            return 0
        skip: set[str] = set()
        if not self._recovered:
            skip = self._already_written(batch_id, offsets)
            self._recovered = True
        offsets = dict(offsets)
        errors: list[str] = []

        def delivered(err, msg) -> None:
            if err is not None:
                errors.append(str(err))
                return
            key = f"{msg.topic()}/{msg.partition()}"
            offsets[key] = max(offsets.get(key, 0), msg.offset() + 1)

        produced = 0
        headers_base = [(H_QUERY, self.query), (H_BATCH, str(batch_id))]
        for r in records:
            topic = self.topics.get(r.kind)  # (internal records have no topic)
            if topic is None or r.id in skip:
                continue
            self._produce(topic, r.key, r.value, headers_base + [(H_ID, r.id)], delivered)
            produced += 1
        self._flush(errors)
        commit = json.dumps({"batch": batch_id, "offsets": offsets}, sort_keys=True)
        self._produce(self.output.commit_topic, self.query, commit, headers_base, None)
        self._flush(errors)
        self._committed = (batch_id, offsets)
        return produced

    def _produce(self, topic, key, value, headers, callback) -> None:
        send(self._producer, topic, value, key, headers=headers, on_delivery=callback)

    def _flush(self, errors: list[str]) -> None:
        remaining = self._producer.flush(60)
        if remaining:
            raise SinkError(f"{remaining} records not delivered within 60 s")
        if errors:
            raise SinkError(f"delivery failed: {errors[0]} ({len(errors)} records)")
