"""The Spark stateful glue: one state key (bucket) holds the leader models of
many partitions as one compressed engine snapshot.

Per call it restores the bucket's LocalEngine, decodes and validates the rows
(bad ones become dead letters), hands the good ones to the engine, advances it
to Spark's watermark, and returns the decisions, the changed partitions'
states and the dead letters as rows. No rule lives here.
"""

from __future__ import annotations

import json
import zlib
from typing import Iterator, Optional

from isr.config import MonitorSettings
from isr.contract import Rejection, decode
from isr.contract.decisions import DeadLetter, IsrChange, IsrPropagation, PartitionState
from isr.engine.local import LocalEngine

# Columns the operator receives (after the pre-stage in job.py).
INPUT_COLUMNS = ["bucket", "ts", "seq", "key", "value", "topic", "partition", "offset",
                 "broadcast", "end_ts", "et"]
OUTPUT_SCHEMA = "kind string, key string, id string, ts long, value string"
STATE_SCHEMA = "engine binary"
# A value that is not an event but the end of a bounded input (replay).
END_OF_INPUT = b"\x00isr:end-of-input"


def source_name(topic: str, partition: int) -> str:
    """A Kafka partition as topic/partition; a file (partition -1) by its name."""
    return topic if partition < 0 else f"{topic}/{partition}"


def decision_key(d) -> str:
    return f"{d.cluster}/{d.topic}/{d.partition}"


def state_key(s: PartitionState, several_policies: bool) -> str:
    key = f"{s.cluster}/{s.topic}/{s.partition}"
    return f"{key}@{s.policy}" if several_policies else key


def output_row(d, several_policies: bool = False) -> tuple:
    """(kind, key, id, ts, value) for one output record."""
    if isinstance(d, IsrChange):
        return ("isr_change", decision_key(d), d.id, d.ts, d.model_dump_json())
    if isinstance(d, PartitionState):
        key = state_key(d, several_policies)
        return ("partition_state", key, f"{key}@{d.ts}", d.ts, d.model_dump_json())
    if isinstance(d, IsrPropagation):
        key = f"{d.cluster}/broker-{d.broker}"
        return ("isr_propagation", key, f"{key}/{d.policy}@{d.ts}", d.ts, d.model_dump_json())
    if isinstance(d, DeadLetter):
        return ("dead_letter", d.source, f"{d.source}@{d.offset}", -1, d.model_dump_json())
    raise TypeError(f"not an output record: {type(d).__name__}")


def dead_letter(source: str, offset: int, raw, reason: str, reason_class: str) -> DeadLetter:
    text = raw if isinstance(raw, str) else bytes(raw).decode("utf-8", "backslashreplace")
    return DeadLetter(reason=reason, reason_class=reason_class, raw=text, source=source,
                      offset=offset)


class BucketProcessor:
    """What one call of the stateful function does, without Spark types, so
    it can be tested and benchmarked on its own."""

    def __init__(self, monitor: MonitorSettings) -> None:
        self.monitor = monitor
        self.several = len(monitor.policy) > 1

    def restore(self, blob: Optional[bytes]) -> LocalEngine:
        if blob is None:
            return LocalEngine(self.monitor, external_watermark=True)
        return LocalEngine.restore(self.monitor, zlib.decompress(blob), external_watermark=True)

    @staticmethod
    def save(engine: LocalEngine) -> bytes:
        return zlib.compress(engine.snapshot(), 1)

    def process(self, bucket: int, engine: LocalEngine, columns: dict, watermark: int
                ) -> list[tuple]:
        """Apply one batch of rows (column lists) at Spark's `watermark`."""
        out: list[tuple] = []
        dead: list[DeadLetter] = []

        def on_reject(origin, reason: str) -> None:
            source, offset, raw = origin
            dead.append(dead_letter(source, offset, raw, reason, "model"))

        engine.on_reject = on_reject
        end_ts = None
        rows = zip(columns["value"], columns["seq"], columns["topic"], columns["partition"],
                   columns["offset"], columns["broadcast"], columns["end_ts"], columns["key"])
        for value, seq, topic, partition, offset, broadcast, row_end, key in rows:
            if value == END_OF_INPUT:
                end_ts = row_end
                continue
            if partition < 0:  # a file: report its line number, not the row index
                offset = int(key)
            # A broadcast row (broker event) reaches every bucket; only bucket 0
            # reports it as a dead letter.
            report = not broadcast or bucket == 0
            event = decode(value)
            source = source_name(topic, partition)
            if isinstance(event, Rejection):
                if report:
                    dead.append(dead_letter(source, offset, value, event.reason,
                                            event.reason_class))
                continue
            origin = (source, offset, bytes(value).decode("utf-8", "backslashreplace"))
            outcome = engine.submit(event, seq, origin)
            if outcome.status == "late" and report:
                dead.append(dead_letter(source, offset, value, outcome.reason, "late"))
        if end_ts is not None:
            engine.finish(until=end_ts)
            states = [m.view() for p in engine.policies
                      for _, m in sorted(engine.partitions[p].items())]
            engine.touched.clear()
            out.append(("summary", str(bucket), f"summary/{bucket}", end_ts,
                        json.dumps(engine.model_stats())))
        else:
            engine.advance_watermark(watermark)
            states = None
        decisions = engine.take_decisions()
        if states is None:
            states = engine.take_touched_states()
        out.extend(output_row(d, self.several) for d in decisions)
        out.extend(output_row(s, self.several) for s in states)
        out.extend(output_row(d) for d in dead)
        engine.on_reject = None
        return out


def make_state_function(monitor: MonitorSettings):
    """The function for applyInPandasWithState (grouped by bucket)."""
    settings_json = monitor.model_dump_json()

    def process_bucket(key, pdfs: Iterator, state) -> Iterator:
        import pandas as pd

        processor = _processor(settings_json)
        bucket = int(key[0])
        engine = processor.restore(state.get[0] if state.exists else None)
        watermark = state.getCurrentWatermarkMs()
        # All chunks of the batch at once: one partition_state per changed
        # partition per batch, not per chunk.
        columns: dict[str, list] = {c: [] for c in INPUT_COLUMNS[:-1]}
        for pdf in pdfs:
            for c, values in columns.items():
                values.extend(pdf[c].tolist())
        rows = processor.process(bucket, engine, columns, watermark)
        state.update((processor.save(engine),))
        # Called again whenever the watermark moves, rows or not: that is
        # what runs the checks of partitions that get no events.
        state.setTimeoutTimestamp(max(watermark, 0) + 1)
        if rows:
            yield pd.DataFrame(rows, columns=["kind", "key", "id", "ts", "value"])

    return process_bucket


_PROCESSORS: dict[str, BucketProcessor] = {}


def _processor(settings_json: str) -> BucketProcessor:
    """One processor per Python worker and configuration (validated once)."""
    p = _PROCESSORS.get(settings_json)
    if p is None:
        p = _PROCESSORS[settings_json] = BucketProcessor(
            MonitorSettings.model_validate_json(settings_json))
    return p
