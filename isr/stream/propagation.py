"""ZooKeeper-era propagation in the job (`monitor.propagation = "zk"`), on the
driver, after the buckets.

Its model is one per (policy, cluster, leader broker) over all the leader's
partitions (isr/model/propagation.py): a leader's batch waits for 5 s without
any change of *any* of its partitions. A leader's partitions lie in many
state buckets and no bucket sees another's changes within a micro-batch, so
no bucket can decide it (each would time its own share: one record per
bucket where `isr replay` writes one). The driver sees every bucket's output
of a micro-batch: the leader-driven `isr_change` records (every change below
the batch's watermark is among them, a decision leaves in its event's batch)
and the watermark every bucket reached. It feeds them to the same listener
`isr replay` runs (isr/engine/propagation.py), so the records are the same,
whatever the bucket count and the micro-batches.

Its state (the waiting partitions and times per leader, a few bytes per
leader) is written per micro-batch beside Spark's own in the checkpoint,
`<checkpoint>/isr-propagation/<batch id>`, through Hadoop's file systems
(local, HDFS, S3 alike); a batch run again after a restart starts from the
state of the batch before it, so it writes the same records.
"""

from __future__ import annotations

import json
from typing import Optional, Protocol

from isr.contract.records import (PROPAGATION_STATE, SUMMARY, WATERMARK, OutputRecord,
                                  to_record)
from isr.engine.propagation import ZkPropagation

STATE_DIR = "isr-propagation"
KEEP = 10  # states kept: a restart re-runs at most the batch after the last committed one


class Change:
    """What ZkPropagation takes of an `isr_change` record."""

    __slots__ = ("ts", "seq", "policy", "cluster", "leader", "topic", "partition", "cause")

    def __init__(self, d: dict) -> None:
        self.ts, self.policy, self.cluster = d["ts"], d["policy"], d["cluster"]
        self.leader, self.topic, self.partition = d["leader"], d["topic"], d["partition"]
        self.cause = d["cause"]
        # Changes of one ts reach the model in any order: its output does not
        # depend on it (it waits on the set of partitions and the latest ts).
        self.seq = 0


class StateStore(Protocol):
    def latest_before(self, batch_id: int) -> Optional[str]: ...
    def save(self, batch_id: int, state: str) -> None: ...


class PropagationStage:
    """Per micro-batch: the buckets' records in, the same plus the batch's
    `isr_propagation` records out."""

    def __init__(self, store: StateStore, several_policies: bool) -> None:
        self.store = store
        self.several = several_policies
        self.listener: Optional[ZkPropagation] = None
        self.batch_id: Optional[int] = None

    def _restore(self, batch_id: int) -> ZkPropagation:
        if self.listener is not None and self.batch_id == batch_id - 1:
            return self.listener
        listener = ZkPropagation()
        state = self.store.latest_before(batch_id)
        if state is not None:
            listener.from_state(json.loads(state))
        return listener

    def batch(self, batch_id: int, records: list[OutputRecord]) -> list[OutputRecord]:
        listener = self._restore(batch_id)
        # Rows written when the buckets ran propagation hand their states on
        # in the batch that migrates them (operator.py): merged here, once.
        for r in records:
            if r.kind == PROPAGATION_STATE:
                listener.absorb(json.loads(r.value))
        records = [r for r in records if r.kind != PROPAGATION_STATE]
        out: list = []
        changes = sorted((Change(json.loads(r.value)) for r in records
                          if r.kind == "isr_change"),
                         key=lambda c: (c.ts, c.policy, c.cluster, c.topic, c.partition))
        for change in changes:
            listener.on_change(None, change, out)
        ends = [r.ts for r in records if r.kind == SUMMARY]  # end of a bounded input
        marks = [r.ts for r in records if r.kind == WATERMARK]
        if ends:
            listener.on_time(max(ends), True, out)
        elif marks and min(marks) >= 0:  # every bucket reached the same one
            listener.on_time(min(marks), False, out)
        self.store.save(batch_id, json.dumps(listener.to_state()))
        self.listener, self.batch_id = listener, batch_id
        return records + [to_record(p, self.several) for p in out]


class HadoopStore:
    """The stage's states as small files in a directory of the checkpoint,
    through Spark's Hadoop file systems."""

    def __init__(self, spark, checkpoint: str) -> None:
        jvm = spark._jvm
        self._path = jvm.org.apache.hadoop.fs.Path
        self._io = jvm.org.apache.commons.io.IOUtils
        self.dir = self._path(checkpoint.rstrip("/") + "/" + STATE_DIR)
        self.fs = self.dir.getFileSystem(spark._jsc.hadoopConfiguration())

    def _ids(self) -> list[int]:
        if not self.fs.exists(self.dir):
            return []
        names = [s.getPath().getName() for s in self.fs.listStatus(self.dir)]
        return sorted(int(n) for n in names if n.isdigit())

    def latest_before(self, batch_id: int) -> Optional[str]:
        ids = [i for i in self._ids() if i < batch_id]
        if not ids:
            return None
        stream = self.fs.open(self._path(self.dir, str(ids[-1])))
        try:
            return bytes(self._io.toByteArray(stream)).decode("utf-8")
        finally:
            stream.close()

    def save(self, batch_id: int, state: str) -> None:
        tmp = self._path(self.dir, f".{batch_id}.tmp")
        out = self.fs.create(tmp, True)
        try:
            out.write(bytearray(state.encode("utf-8")))
        finally:
            out.close()
        final = self._path(self.dir, str(batch_id))
        self.fs.delete(final, False)  # a batch run again replaces its state
        self.fs.rename(tmp, final)
        for old in self._ids()[:-KEEP]:
            self.fs.delete(self._path(self.dir, str(old)), False)
