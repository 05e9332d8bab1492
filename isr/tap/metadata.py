"""Leadership, committed ISR and broker lifecycle (docs/tap.md).

Exact: the KRaft metadata log as `kafka-dump-log --cluster-metadata-decoder`
prints it (core/src/main/scala/kafka/tools/DumpLogSegments.scala): one line per
record, `| offset: N CreateTime: MS keySize: .. valueSize: .. sequence: ..
headerKeys: [] payload: {"type":"PARTITION_CHANGE_RECORD","version":0,"data":{..}}`,
`data` written by the generated JsonConverter of the record's schema
(metadata/src/main/resources/common/metadata/*.json). The partition state is
replayed as the controller does (PartitionRegistration.merge: a new leader
bumps the leader epoch; every change bumps the partition epoch).

Sampled: `MetadataPoller` diffs polled Metadata (leader, leader epoch,
replicas, ISR) and DescribeCluster (brokers, fenced) snapshots.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

import orjson

from isr.tap.lines import LineTap

RECORD = re.compile(r"^\|?\s*offset: (\d+) CreateTime: (-?\d+) .*? payload: (\{.*\})\s*$")
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

    def __init__(self, cluster: str = "default") -> None:
        super().__init__()
        self.events = MetadataEvents(cluster)
        self.topics: dict[str, str] = {}  # topic id -> name
        self.partitions: dict[tuple[str, int], Registration] = {}
        self.broker_epochs: dict[int, int] = {}
        self.offset = -1  # the last record applied: a dump read again adds nothing twice

    def topic_name(self, topic_id: str) -> Optional[str]:
        return self.topics.get(topic_id)

    def read(self, line: str) -> list[dict]:
        m = RECORD.match(line.strip())
        if m is None:
            return self.skip("not a metadata record line")
        offset = int(m.group(1))
        if offset <= self.offset:
            return self.skip("record read before (a dump written again)")
        self.offset = offset
        try:
            record = orjson.loads(m.group(3))
            kind, data = record["type"], record["data"]
            handler = HANDLERS.get(kind)
            if handler is None:
                return self.skip(f"{kind} (not about partitions or brokers)")
            return handler(self, data, int(m.group(2)))
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
        self.partitions[(name, reg.partition)] = reg
        return self.events.partition(reg, ts, True, True, True)

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
