"""The output record: one decision (or dead letter) as the job writes it.

Every engine produces these; the Kafka sink, the Prometheus metrics, the
job's foreachBatch and `isr replay --engine spark` read them by field name.
`kind` is a decision type, or one of the job's own `INTERNAL_KINDS` (they
carry bookkeeping from the stateful stage to the driver and are never written
to Kafka).
"""

from __future__ import annotations

from typing import Iterator, NamedTuple, Sequence

import orjson

from isr.contract.decisions import (Alert, DeadLetter, IsrChange, IsrPropagation,
                                    PartitionState, partition_state_json)

SUMMARY = "summary"  # end of a bounded input: a bucket's model statistics
WATERMARK = "watermark"  # the watermark a bucket reached in the batch (ts)
# The states of every partition a bucket's batch touched, as a JSON list of
# partition_state objects: the metrics' feed, whatever output.state_interval_ms
# lets through to the state topic. A state the batch also writes as a
# partition_state record is listed as that record's id (a JSON string), not
# again: read them with metrics_states.
PARTITION_METRICS = "partition_metrics"
# The ZooKeeper-era propagation state a bucket's row held when the buckets
# ran it (before it moved to the driver, stream/propagation.py): handed to
# the driver's stage once, in the batch that migrates the row.
PROPAGATION_STATE = "propagation_state"
INTERNAL_KINDS = frozenset({SUMMARY, WATERMARK, PARTITION_METRICS, PROPAGATION_STATE})


class OutputRecord(NamedTuple):
    kind: str   # isr_change | partition_state | isr_propagation | alert | dead_letter | internal
    key: str    # the Kafka message key (compaction and per-partition order)
    id: str     # deterministic: the same decision always has the same id
    ts: int     # event time of the decision (-1 for dead letters)
    value: str  # the record as JSON


# Spark's DDL for the same fields (the stateful stage's output schema).
SPARK_SCHEMA = "kind string, key string, id string, ts long, value string"


def metrics_states(records: Sequence["OutputRecord"]) -> Iterator[dict]:
    """The partition states a batch's PARTITION_METRICS records list, in
    order, each element read from the record itself or, when it is a
    string, from the batch's partition_state record of that id: when every
    partition's state goes out, each bucket's result carried every state
    twice (~27 MB of JSON each at 50 k partitions a bucket; the driver JVM
    held that result twice in its heap: docs/benchmarks.md, issue 23, branch
    `jvmrss`)."""
    shared: dict[str, str] | None = None
    for r in records:
        if r.kind != PARTITION_METRICS:
            continue
        for state in orjson.loads(r.value):
            if state.__class__ is str:
                if shared is None:  # (only a batch that shares one builds the index)
                    shared = {s.id: s.value for s in records if s.kind == "partition_state"}
                state = orjson.loads(shared[state])
            yield state


def partition_key(d) -> str:
    return _partition_key(d.cluster, d.topic, d.partition)


def _partition_key(cluster: str, topic: str, partition: int) -> str:
    return f"{cluster}/{topic}/{partition}"


def state_key(s: PartitionState, several_policies: bool) -> str:
    return _state_key(s.cluster, s.topic, s.partition, s.policy, several_policies)


def _state_key(cluster: str, topic: str, partition: int, policy: str,
               several_policies: bool) -> str:
    key = _partition_key(cluster, topic, partition)
    return f"{key}@{policy}" if several_policies else key


def state_record(fields: dict, several_policies: bool = False) -> OutputRecord:
    """`to_record(PartitionState.model_validate(fields), several_policies)`
    without the pydantic object: `fields` are a model's state_fields, whose
    JSON partition_state_json writes as the PartitionState would (the
    Spark job's partition_state records; tests/test_contract_states.py)."""
    ts = fields["ts"]
    key = _state_key(fields["cluster"], fields["topic"], fields["partition"], fields["policy"],
                     several_policies)
    return OutputRecord("partition_state", key, f"{key}@{ts}", ts,
                        partition_state_json(fields).decode())


def to_record(d, several_policies: bool = False) -> OutputRecord:
    """The record for one decision (several_policies: partition_state keys
    carry the policy, so that each policy keeps its own compacted state)."""
    if isinstance(d, IsrChange):
        return OutputRecord("isr_change", partition_key(d), d.id, d.ts, d.model_dump_json())
    if isinstance(d, PartitionState):
        key = state_key(d, several_policies)
        return OutputRecord("partition_state", key, f"{key}@{d.ts}", d.ts, d.model_dump_json())
    if isinstance(d, IsrPropagation):
        key = f"{d.cluster}/broker-{d.broker}"
        return OutputRecord("isr_propagation", key, f"{key}/{d.policy}@{d.ts}", d.ts,
                            d.model_dump_json())
    if isinstance(d, Alert):
        return OutputRecord("alert", d.fingerprint, d.id, d.ts, d.model_dump_json())
    if isinstance(d, DeadLetter):
        return OutputRecord("dead_letter", d.source, f"{d.source}@{d.offset}", -1,
                            d.model_dump_json())
    raise TypeError(f"not an output record: {type(d).__name__}")
