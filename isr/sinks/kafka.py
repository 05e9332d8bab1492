"""Exactly-once output to Kafka topics, from foreachBatch on the driver.

Every record carries headers `isr.query`, `isr.checkpoint` (the id of the
Spark checkpoint the query runs from), `isr.batch` and `isr.id` (the
decision's deterministic id). After a micro-batch's records are delivered
(idempotent producer, acks=all), one commit record {batch, offsets,
checkpoint} goes to the commit topic. On restart Spark re-runs the first
uncommitted batch with the same input and state, so it produces the same
records: the sink skips a batch its checkpoint has already committed, and for
a batch cut short by a crash it reads what reached the output topics after
the last commit and writes only the rest. Batch numbers of another
checkpoint (a new `stream.checkpoint_location` under the same query name)
never count: the sink says so in one line and starts its own. No Kafka
transactions are needed (the embedded broker does not hide aborted ones).

A Kafka that does not answer is waited for, up to `kafka.outage_timeout_s`;
then the batch fails with one line (KafkaUnavailable).
"""

from __future__ import annotations

import json
import sys
import threading
import time
from typing import Iterable, Optional

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from isr.config import OutputSettings, Settings
from isr.contract.records import OutputRecord
from isr.errors import KafkaUnavailable, SinkError
from isr.kafka.client import (KafkaTimeout, client_config, consumer, ensure_topics, producer,
                              riding_out, send, topic_partitions)
from isr.sinks.base import Sink

H_QUERY, H_CHECKPOINT, H_BATCH, H_ID = "isr.query", "isr.checkpoint", "isr.batch", "isr.id"
TRY_S = 30  # one producer's try at a batch
# The delivery reports served (Producer.poll) after this many records of a
# batch: librdkafka frees a delivered message's copy only then, so a batch
# that sends every partition's state held all 100 k copies until its flush
# (~0.12 GB of the Python driver at 100 k partitions, which stayed resident
# through the other sinks: docs/benchmarks.md, issue 23, branch `driverrss`).
POLL_EVERY = 1000


def _headers(msg) -> dict[str, str]:
    return {k: (v.decode() if isinstance(v, bytes) else v) for k, v in (msg.headers() or [])}


def read_to_end(conf: dict, starts: dict[tuple[str, int], int], timeout: float = 30.0):
    """Every message from the given offsets to the end of each partition
    (KafkaTimeout if an end is not seen within `timeout` of silence)."""
    if not starts:
        return
    c = consumer(conf, **{"auto.offset.reset": "earliest"})
    try:
        # A topic created again (a broker that lost its data) is shorter than
        # the offsets known: read it from its start.
        marks = {}
        for tp in starts:
            try:
                marks[tp] = c.get_watermark_offsets(TopicPartition(*tp), timeout=10)
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError._UNKNOWN_PARTITION:
                    raise
        if not marks:
            return  # none of them exists (yet): nothing to read
        c.assign([TopicPartition(t, p, o if o <= marks[(t, p)][1] else marks[(t, p)][0])
                  for (t, p), o in starts.items() if (t, p) in marks])
        waiting = set(marks)
        idle = 0.0
        while waiting:
            msg = c.poll(0.5)
            if msg is None:
                idle += 0.5
                if idle > timeout:
                    raise KafkaTimeout(f"no end of partition seen for {sorted(waiting)}")
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


def output_topics(conf: dict, out: OutputSettings):
    """What creates the output topics (at the start, and again after an
    outage in which they may have gone)."""
    def topics_setup() -> None:
        ensure_topics(conf, [out.changes_topic, out.state_topic, out.dead_letter_topic,
                             out.alerts_topic], out.partitions, out.replication_factor,
                      compacted=[out.state_topic, out.alerts_topic])
        # One partition: the sink reads its commits in the order they were written.
        ensure_topics(conf, [out.commit_topic], 1, out.replication_factor,
                      compacted=[out.commit_topic])
    return topics_setup


class KafkaSink(Sink):
    @classmethod
    def from_settings(cls, settings: Settings) -> "KafkaSink":
        """The [output] topics of the [kafka] cluster, created if missing."""
        conf = client_config(settings.kafka)
        topics_setup = output_topics(conf, settings.output)
        topics_setup()
        return cls(conf, settings.output, settings.stream.query_name,
                   settings.kafka.outage_timeout_s, topics_setup)

    def __init__(self, conf: dict, output: OutputSettings, query_name: str,
                 outage_s: float = 300.0, topics_setup=None) -> None:
        """`topics_setup()`: creates the output topics (again, after an outage
        in which they may have gone); None: nothing to do."""
        self.conf = conf
        self.output = output
        self.query = query_name
        self.outage_s = outage_s
        self.topics_setup = topics_setup
        self.topics = {
            "isr_change": output.changes_topic,
            "isr_propagation": output.changes_topic,
            "partition_state": output.state_topic,
            "dead_letter": output.dead_letter_topic,
            "alert": output.alerts_topic,
        }
        self._producer = self._new_producer()
        self._committed: Optional[tuple[int, dict[str, int]]] = None
        self._recovered = False
        self._checkpoint: Optional[str] = None
        self._bound = threading.Event()
        self._waited = False  # Kafka went away since the last batch: topics may be gone

    def _on_error(self, err) -> None:
        if err.code() in (KafkaError._ALL_BROKERS_DOWN, KafkaError._TRANSPORT):
            self._waited = True

    def bind(self, checkpoint_id: str) -> None:
        """The id of the checkpoint the query runs from (StreamingQuery.id); a
        batch is written only once it is known."""
        self._checkpoint = checkpoint_id
        self._bound.set()

    started = bind  # type: ignore[assignment]  # (its one argument is given positionally)

    def close(self) -> None:
        """The run ended: each batch was flushed when written; whatever a
        stopped batch left in the producer goes out now (or is written again
        by that batch on the next start: its records carry their ids)."""
        self._producer.flush(5)

    # ------------------------------------------------------------ commits
    def _last_commit(self) -> tuple[int, dict[str, int]]:
        """This checkpoint's last commit (batch, offsets). Without one, batch
        -1 and the offsets of the last commit of any checkpoint (the output
        before them is not this checkpoint's)."""
        tps = self._ride("sink", lambda: topic_partitions(self.conf, [self.output.commit_topic]))
        mine, latest = None, None
        for msg in self._read(tps and {tp: 0 for tp in tps}):
            key = (msg.key() or b"").decode("utf-8", "replace")
            if key != self.query and not key.startswith(self.query + "@"):
                continue
            record = json.loads(msg.value())
            latest = record
            if record.get("checkpoint") == self._checkpoint:
                mine = record
        if latest is not None and latest.get("checkpoint") != self._checkpoint:
            print(f"isr: sink: the last commit of query {self.query} in "
                  f"{self.output.commit_topic} is batch {latest['batch']} of checkpoint "
                  f"{latest.get('checkpoint', '(unnamed)')}; this checkpoint is "
                  f"{self._checkpoint}, which writes its own batches from "
                  f"{mine['batch'] + 1 if mine else 0}", file=sys.stderr)
        if mine is not None:
            return mine["batch"], mine["offsets"]
        return -1, latest["offsets"] if latest is not None else {}

    def _already_written(self, batch_id: int, offsets: dict[str, int]) -> set[str]:
        """Ids of this batch's records that a crashed attempt delivered."""
        tps = self._ride("sink", lambda: topic_partitions(
            self.conf, sorted(set(self.topics.values()))))
        starts = {tp: offsets.get(f"{tp[0]}/{tp[1]}", 0) for tp in tps}
        ids = set()
        for msg in self._read(starts):
            h = _headers(msg)
            if (h.get(H_QUERY) == self.query and h.get(H_CHECKPOINT) == self._checkpoint
                    and h.get(H_BATCH) == str(batch_id)):
                ids.add(h.get(H_ID))
        return ids  # type: ignore[return-value]  # (each of our records has its id)

    def _read(self, starts):
        return self._ride("sink", lambda: list(read_to_end(self.conf, starts or {})))

    def _ride(self, what: str, call):
        return riding_out(what, self.outage_s, call)

    # ------------------------------------------------------------ write
    def write_batch(self, batch_id: int, records: Iterable[OutputRecord]) -> int:
        """Write one micro-batch's output records; returns how many were
        produced (0 for a batch already committed). Kafka not taking them is
        waited out up to the outage budget: each try with a new producer,
        writing only what the tries before did not (their records are found
        by id, as after a crash)."""
        if not self._bound.wait(120):
            raise SinkError("the sink was never told its checkpoint id")
        self._producer.poll(0)  # hear of a broker that went away meanwhile
        if self._waited and self.topics_setup is not None:
            self._ride("sink", self.topics_setup)  # Kafka came back: are the topics there?
            self._waited = False
        if self._committed is None:
            self._committed = self._last_commit()
        last_batch, committed = self._committed
        if batch_id <= last_batch:
            return 0
        records = list(records)
        skip: set[str] = set()
        if not self._recovered:
            skip = self._already_written(batch_id, committed)
            self._recovered = True
        offsets = dict(committed)
        started = time.monotonic()
        while True:
            try:
                produced = self._write(batch_id, records, skip, offsets)
                self._committed = (batch_id, offsets)
                return produced
            except _Undelivered as exc:
                waited = time.monotonic() - started
                if waited > self.outage_s:
                    raise KafkaUnavailable(f"sink: records not delivered for {waited:.0f} s "
                                           f"(kafka.outage_timeout_s = {self.outage_s:g}): "
                                           f"{exc}") from None
                print(f"isr: sink: Kafka did not take batch {batch_id} ({exc}); trying again "
                      f"with a new producer, for up to {self.outage_s:g} s", file=sys.stderr)
                self._waited = True
                self._producer = self._new_producer()
                if self.topics_setup is not None:
                    self._ride("sink", self.topics_setup)
                skip = self._already_written(batch_id, committed)

    def _write(self, batch_id: int, records: list[OutputRecord], skip: set[str],
               offsets: dict[str, int]) -> int:
        errors: list = []

        def delivered(err, msg) -> None:
            if err is not None:
                errors.append(err)
                return
            key = f"{msg.topic()}/{msg.partition()}"
            offsets[key] = max(offsets.get(key, 0), msg.offset() + 1)

        produced = 0
        headers_base = [(H_QUERY, self.query), (H_CHECKPOINT, self._checkpoint),
                        (H_BATCH, str(batch_id))]
        for r in records:
            topic = self.topics.get(r.kind)  # (internal records have no topic)
            if topic is None or r.id in skip:
                continue
            self._produce(topic, r.key, r.value, headers_base + [(H_ID, r.id)], delivered)
            produced += 1
            if produced % POLL_EVERY == 0:
                self._producer.poll(0)  # the delivered ones' copies freed
        self._flush(errors)
        commit = json.dumps({"batch": batch_id, "offsets": offsets,
                             "checkpoint": self._checkpoint}, sort_keys=True)
        # Keyed per checkpoint: a compacted commit topic keeps each one's last.
        self._produce(self.output.commit_topic, f"{self.query}@{self._checkpoint}", commit,
                      headers_base, delivered)
        self._flush(errors)
        return produced

    def _produce(self, topic, key, value, headers, callback) -> None:
        send(self._producer, topic, value, key, headers=headers, on_delivery=callback)

    def _flush(self, errors: list) -> None:
        """Every record delivered, or _Undelivered (retriable: Kafka away, a
        record timed out), or SinkError (it never will be: a record too
        large, no rights)."""
        remaining = self._producer.flush(TRY_S + 5)
        if remaining:
            raise _Undelivered(f"{remaining} record(s) still queued after {TRY_S + 5} s")
        if errors:
            first = errors[0]
            if first.retriable() or first.code() == KafkaError._MSG_TIMED_OUT:
                raise _Undelivered(f"{first.str()} ({len(errors)} records)")
            raise SinkError(f"sink: delivery failed: {first.str()} ({len(errors)} records)")

    def _new_producer(self):
        # A record is tried this long by one producer; a new one takes over
        # after (a broker that lost its state does not know the old one's id).
        return producer(self.conf, **{"message.timeout.ms": TRY_S * 1000,
                                      "error_cb": self._on_error})


class _Undelivered(Exception):
    """Records that Kafka did not take in one try."""
