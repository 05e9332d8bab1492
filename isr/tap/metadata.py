"""Leadership, committed ISR and broker lifecycle (docs/tap.md).

Exact: the KRaft metadata log as `kafka-dump-log --cluster-metadata-decoder`
prints it (DumpLogSegments, kafka.tools in core up to 4.2, org.apache.kafka.tools
in tools from 4.3; docs/tap.md cites each version):

    Dumping /var/lib/kafka/data/__cluster_metadata-0/00000000000000000000.log
    Log starting offset: 0                      (3.3+; `Starting offset: 0` before)
    baseOffset: 5 lastOffset: 6 count: 2 ... isControl: false ... CreateTime: MS size: ...
    | offset: 5 CreateTime: MS keySize: -1 valueSize: 58 sequence: -1 headerKeys: [] payload: {..}
    | offset: 6 CreateTime: MS ...

and with `--skip-record-metadata` each record is only its payload,
` payload: {..}` (up to 4.2) or `| payload: {..}` (4.3+): its offset is the
batch's baseOffset counted on, its time the batch's CreateTime (a KRaft batch
writes every record at the batch's append time, timestampDelta 0:
raft/.../BatchBuilder.java). A snapshot (`Snapshot end offset: N, epoch: E`)
holds the state at offset N, its records numbered from 0. The payload,
`{"type":"PARTITION_CHANGE_RECORD","version":0,"data":{..}}`, is written by
the generated JsonConverter of the record's schema
(metadata/src/main/resources/common/metadata/*.json). The partition state is
replayed as the controller does (PartitionRegistration.merge: a new leader
bumps the leader epoch; every change bumps the partition epoch).

Each log offset is applied once, in the order read: a record read again (a
dump written again) is skipped; a segment dumped after a later one is applied
when it comes, and counted. A snapshot's records give the state at its end
offset; log records below it are in the snapshot already and are skipped.

Sampled: `MetadataPoller` diffs polled Metadata (leader, leader epoch,
replicas, ISR) and DescribeCluster (brokers, fenced) snapshots.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass
from typing import Optional

import orjson

from isr.tap.lines import LineTap

TIMESTAMP = r"(?:CreateTime|LogAppendTime|NoTimestampType)"
RECORD = re.compile(r"^\|?\s*offset: (\d+) " + TIMESTAMP + r": (-?\d+) (.*)$")
PAYLOAD = re.compile(r"^\|?\s*payload: (.*)$")  # --skip-record-metadata
BATCH = re.compile(r"^baseOffset: (\d+) lastOffset: (\d+) .*? isControl: (true|false) .*?"
                   r"position: \d+ " + TIMESTAMP + r": (-?\d+) ")
LOG_START = re.compile(r"^(?:Log s|S)tarting offset: (\d+)$")
SNAPSHOT = re.compile(r"^Snapshot end offset: (\d+), epoch: \d+$")
SNAPSHOT_HEADER = re.compile(r"SnapshotHeader \{.*\"lastContainedLogTimestamp\":(\d+)")
OUT_OF_ORDER = "records applied after higher offsets (segments dumped out of order)"
IN_SNAPSHOT = "log records a snapshot read before already holds"
READ_BEFORE = "record read before (a dump written again)"
OLD_SNAPSHOT = "records of a snapshot older than what was applied"
NO_LEADER_CHANGE, NO_LEADER = -2, -1
UNKNOWN_EPOCH = -1  # the contract's "not known" broker epoch


@dataclass
class Registration:
    topic: str
    partition: int
    replicas: list[int]
    isr: list[int]
    leader: int
    leader_epoch: int
    partition_epoch: int


class Offsets:
    """A set of offsets kept as sorted disjoint ranges [lo, hi): a log read in
    order is one range."""

    def __init__(self) -> None:
        self.ranges: list[list[int]] = []

    @property
    def end(self) -> int:
        """One past the highest offset held (0 when empty)."""
        return self.ranges[-1][1] if self.ranges else 0

    def __contains__(self, offset: int) -> bool:
        i = bisect.bisect_right(self.ranges, [offset, float("inf")]) - 1
        return i >= 0 and self.ranges[i][0] <= offset < self.ranges[i][1]

    def add(self, offset: int) -> None:
        i = bisect.bisect_right(self.ranges, [offset, float("inf")])
        if i > 0 and self.ranges[i - 1][1] == offset:
            self.ranges[i - 1][1] = offset + 1
        else:
            self.ranges.insert(i, [offset, offset + 1])
            i += 1
        if i < len(self.ranges) and self.ranges[i][0] == self.ranges[i - 1][1]:
            self.ranges[i - 1][1] = self.ranges.pop(i)[1]


class MetadataEvents:
    """Turns partition and broker states into contract events; shared by the
    log reader (exact) and the poller (sampled)."""

    def __init__(self, cluster: str) -> None:
        self.cluster = cluster

    def partition(self, reg: Registration, ts: int, leader_changed: bool,
                  assignment_changed: bool, isr_changed: bool) -> list[dict]:
        if reg.leader < 0 or reg.leader_epoch < 0:
            return []  # leaderless: the fenced/unregistered broker event says it
        base = {"v": 1, "cluster": self.cluster, "ts": ts, "topic": reg.topic,
                "partition": reg.partition, "leader": reg.leader,
                "leader_epoch": reg.leader_epoch}
        out = []
        if leader_changed or assignment_changed:
            # The log start of the new epoch is not in the metadata: 0 (docs/tap.md).
            out.append({**base, "type": "leader", "replicas": reg.replicas, "isr": reg.isr,
                        "leader_epoch_start_offset": 0})
        if leader_changed or assignment_changed or isr_changed:
            out.append({**base, "type": "isr", "isr": reg.isr,
                        "partition_epoch": max(reg.partition_epoch, 0)})
        return out

    def broker(self, broker: int, epoch: int, state: str, ts: int) -> dict:
        return {"v": 1, "type": "broker", "cluster": self.cluster, "ts": ts,
                "broker": broker, "broker_epoch": max(epoch, -1), "state": state}


class MetadataLogTap(LineTap):
    """Lines of `kafka-dump-log --cluster-metadata-decoder` in, events out."""

    def __init__(self, cluster: str = "default", hold: bool = False) -> None:
        super().__init__()
        self.events = MetadataEvents(cluster)
        # A finished dump (not followed): its log records are applied in offset
        # order at the end, whatever order its segments were dumped in.
        self.hold = hold
        self.held: list[tuple[int, int, Optional[str]]] = []
        self.topics: dict[str, str] = {}  # topic id -> name
        self.partitions: dict[tuple[str, int], Registration] = {}
        self.broker_epochs: dict[int, int] = {}
        self.applied = Offsets()  # log offsets applied: a dump read again adds nothing twice
        self.snapshot_end = 0     # log offsets below it are in the snapshot applied
        self.in_snapshot: Optional[int] = None  # reading the records of a snapshot ending here
        self.snapshot_ts: Optional[int] = None  # its header's lastContainedLogTimestamp
        self.skip_snapshot = False
        self.batch_offset, self.batch_ts = 0, 0  # for --skip-record-metadata lines

    def topic_name(self, topic_id: str) -> Optional[str]:
        return self.topics.get(topic_id)

    def read(self, line: str) -> list[dict]:
        text = line.strip()
        if not text:
            return []  # a control record with --skip-record-metadata: its batch line said it
        m = RECORD.match(text)
        if m is not None:
            offset, ts, rest = int(m.group(1)), int(m.group(2)), m.group(3)
            payload = rest.partition(" payload: ")[2] if " payload: " in rest else None
            if payload is None:
                return self._control(offset, rest)
            return self._record(offset, ts, payload)
        m = PAYLOAD.match(text)
        if m is not None:
            offset, self.batch_offset = self.batch_offset, self.batch_offset + 1
            return self._record(offset, self.batch_ts, m.group(1))
        m = BATCH.match(text)
        if m is not None:
            self.batch_offset, self.batch_ts = int(m.group(1)), int(m.group(4))
            if m.group(3) == "true":
                for offset in range(int(m.group(1)), int(m.group(2)) + 1):
                    self._record(offset, 0, None)  # nothing to apply, but read
            return []
        return self._section(text)

    def _section(self, text: str) -> list[dict]:
        """`Log starting offset` / `Snapshot end offset`: what the records that
        follow are (the `Dumping FILE` line before them says nothing more)."""
        if LOG_START.match(text):
            self.in_snapshot = None
            return []
        if text.startswith("Dumping "):
            return []
        m = SNAPSHOT.match(text)
        if m is not None:
            end = int(m.group(1))
            self.in_snapshot, self.snapshot_ts = end, None
            # A snapshot no newer than what was applied would take the state back.
            self.skip_snapshot = end <= max(self.snapshot_end, self.applied.end)
            if not self.skip_snapshot:
                self.snapshot_end = end
            return []
        if text == "KRaft bootstrap snapshot":
            self.in_snapshot, self.snapshot_ts, self.skip_snapshot = 0, None, False
            return []
        return self.skip("not a metadata record line")

    def _control(self, offset: int, rest: str) -> list[dict]:
        """A control record (quorum leader change, snapshot header/footer): no
        metadata, but its offset is read; a snapshot's header says when its
        state was."""
        header = SNAPSHOT_HEADER.search(rest)
        if header is not None and self.in_snapshot is not None:
            self.snapshot_ts = int(header.group(1))
        return self._record(offset, 0, None)

    def _record(self, offset: int, ts: int, payload: Optional[str]) -> list[dict]:
        """`payload` None: a control record."""
        if self.in_snapshot is None:
            if self.hold:
                self.held.append((offset, ts, payload))
                return []
            return self._log_record(offset, ts, payload)
        if payload is None:
            return []
        if self.skip_snapshot:
            return self.skip(OLD_SNAPSHOT)
        # The state at the snapshot's end offset, as of its last record's time.
        return self._apply(payload, self.snapshot_ts if self.snapshot_ts is not None else ts)

    def _log_record(self, offset: int, ts: int, payload: Optional[str]) -> list[dict]:
        """Each log offset once; below a snapshot applied it is in the snapshot."""
        if offset in self.applied:
            return self.skip(READ_BEFORE) if payload is not None else []
        if offset < self.snapshot_end:
            return self.skip(IN_SNAPSHOT) if payload is not None else []
        if offset < self.applied.end and payload is not None:
            self.approximate[OUT_OF_ORDER] += 1
        self.applied.add(offset)
        return self._apply(payload, ts) if payload is not None else []

    def finish(self) -> list[dict]:
        held, self.held = sorted(self.held, key=lambda r: r[0]), []  # stable: a repeat stays
        return [ev for offset, ts, payload in held for ev in self._log_record(offset, ts, payload)]

    def _apply(self, payload: str, ts: int) -> list[dict]:
        try:
            record = orjson.loads(payload)
            kind, data = record["type"], record["data"]
            handler = HANDLERS.get(kind)
            if handler is None:
                return self.skip(f"{kind} (not about partitions or brokers)")
            return handler(self, data, ts)
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            return self.skip("unreadable record payload")

    # ------------------------------------------------------------ records
    def _topic(self, data: dict, ts: int) -> list[dict]:
        self.topics[data["topicId"]] = data["name"]
        return []

    def _remove_topic(self, data: dict, ts: int) -> list[dict]:
        name = self.topics.pop(data["topicId"], None)
        for key in [k for k in self.partitions if k[0] == name]:
            del self.partitions[key]
        return []

    def _partition(self, data: dict, ts: int) -> list[dict]:
        name = self.topics.get(data["topicId"])
        if name is None:
            return self.skip("partition of an unknown topic id")
        reg = Registration(name, data["partitionId"], list(data["replicas"]), list(data["isr"]),
                           data.get("leader", NO_LEADER), data.get("leaderEpoch", -1),
                           data.get("partitionEpoch", -1))
        old = self.partitions.get((name, reg.partition))
        self.partitions[(name, reg.partition)] = reg
        if old is None:
            return self.events.partition(reg, ts, True, True, True)
        # A snapshot newer than the records applied: only what differs.
        return self.events.partition(reg, ts, (reg.leader, reg.leader_epoch) !=
                                     (old.leader, old.leader_epoch),
                                     reg.replicas != old.replicas, reg.isr != old.isr)

    def _partition_change(self, data: dict, ts: int) -> list[dict]:
        name = self.topics.get(data["topicId"])
        reg = self.partitions.get((name, data["partitionId"])) if name else None
        if reg is None:
            return self.skip("change of a partition the dump did not create")
        leader = data.get("leader", NO_LEADER_CHANGE)
        leader_changed = leader != NO_LEADER_CHANGE
        if leader_changed:
            reg.leader, reg.leader_epoch = leader, reg.leader_epoch + 1
        assignment_changed = data.get("replicas") is not None and data["replicas"] != reg.replicas
        if assignment_changed:
            reg.replicas = list(data["replicas"])
        isr_changed = data.get("isr") is not None and data["isr"] != reg.isr
        if data.get("isr") is not None:
            reg.isr = list(data["isr"])
        reg.partition_epoch += 1
        return self.events.partition(reg, ts, leader_changed, assignment_changed, isr_changed)

    def _register(self, data: dict, ts: int) -> list[dict]:
        broker, epoch = data["brokerId"], data["brokerEpoch"]
        self.broker_epochs[broker] = epoch
        fenced = data.get("fenced", True)
        return [self.events.broker(broker, epoch, "registered", ts),
                self.events.broker(broker, epoch, "fenced" if fenced else "unfenced", ts)]

    def _registration_change(self, data: dict, ts: int) -> list[dict]:
        broker, epoch = data["brokerId"], data["brokerEpoch"]
        out = []
        fenced = data.get("fenced", 0)  # -1 unfenced, 0 no change, 1 fenced
        if fenced:
            out.append(self.events.broker(broker, epoch, "fenced" if fenced > 0 else "unfenced",
                                          ts))
        if data.get("inControlledShutdown", 0) == 1:
            out.append(self.events.broker(broker, epoch, "controlled_shutdown", ts))
        return out

    def _fence(self, data: dict, ts: int) -> list[dict]:
        return [self.events.broker(data["id"], data["epoch"], "fenced", ts)]

    def _unfence(self, data: dict, ts: int) -> list[dict]:
        return [self.events.broker(data["id"], data["epoch"], "unfenced", ts)]

    def _unregister(self, data: dict, ts: int) -> list[dict]:
        epoch = data.get("brokerEpoch", self.broker_epochs.get(data["brokerId"], 0))
        return [self.events.broker(data["brokerId"], epoch, "unregistered", ts)]


HANDLERS = {
    "TOPIC_RECORD": MetadataLogTap._topic,
    "REMOVE_TOPIC_RECORD": MetadataLogTap._remove_topic,
    "PARTITION_RECORD": MetadataLogTap._partition,
    "PARTITION_CHANGE_RECORD": MetadataLogTap._partition_change,
    "REGISTER_BROKER_RECORD": MetadataLogTap._register,
    "BROKER_REGISTRATION_CHANGE_RECORD": MetadataLogTap._registration_change,
    "FENCE_BROKER_RECORD": MetadataLogTap._fence,
    "UNFENCE_BROKER_RECORD": MetadataLogTap._unfence,
    "UNREGISTER_BROKER_RECORD": MetadataLogTap._unregister,
}


class MetadataPoller:
    """Polled snapshots in, the events of what changed between them out.

    Sampled, so approximate (docs/tap.md): times are poll times, changes
    between two polls are seen as one, broker epochs are not exposed (-1:
    unknown, which never makes a follower's fetch ISR-ineligible; with 0 no
    fetch of a real broker, epoch > 0, would ever be eligible again), and
    the leader epoch start offset is unknown (0)."""

    def __init__(self, cluster: str = "default") -> None:
        self.events = MetadataEvents(cluster)
        self.partitions: dict[tuple[str, int], Registration] = {}
        self.brokers: dict[int, bool] = {}  # id -> fenced
        self.topics: dict[str, str] = {}

    def topic_name(self, topic_id: str) -> Optional[str]:
        return self.topics.get(topic_id)

    def diff(self, cluster: dict, topics: list[dict], ts: int) -> list[dict]:
        """`cluster`: DescribeCluster (brokers with `broker_id`, optional
        `is_fenced`); `topics`: Metadata topics with partitions (`leader_id`,
        `leader_epoch`, `replica_nodes`, `isr_nodes`)."""
        from isr.tap.request_log import kafka_topic_id

        out: list[dict] = []
        seen = {}
        for b in cluster.get("brokers", ()):
            seen[b["broker_id"]] = bool(b.get("is_fenced", False))
        for broker, fenced in sorted(seen.items()):
            was = self.brokers.get(broker)
            if was is None:
                out.append(self.events.broker(broker, UNKNOWN_EPOCH, "registered", ts))
            if was is None or was != fenced:
                state = "fenced" if fenced else "unfenced"
                out.append(self.events.broker(broker, UNKNOWN_EPOCH, state, ts))
        for broker in sorted(set(self.brokers) - set(seen)):
            out.append(self.events.broker(broker, UNKNOWN_EPOCH, "unregistered", ts))
        self.brokers = seen
        for topic in sorted(topics, key=lambda t: t["name"]):
            if topic.get("error_code", 0) or topic.get("is_internal"):
                continue
            if topic.get("topic_id"):
                self.topics[kafka_topic_id(str(topic["topic_id"]))] = topic["name"]
            for p in sorted(topic["partitions"], key=lambda p: p["partition_index"]):
                out.extend(self._partition(topic["name"], p, ts))
        return out

    def _partition(self, name: str, p: dict, ts: int) -> list[dict]:
        key = (name, p["partition_index"])
        new = Registration(name, key[1], list(p["replica_nodes"]), list(p["isr_nodes"]),
                           p["leader_id"], p.get("leader_epoch", -1), -1)
        old = self.partitions.get(key)
        self.partitions[key] = new
        if old is None:
            return self.events.partition(new, ts, True, True, True)
        leader_changed = (new.leader, new.leader_epoch) != (old.leader, old.leader_epoch)
        return self.events.partition(new, ts, leader_changed, new.replicas != old.replicas,
                                     new.isr != old.isr)
