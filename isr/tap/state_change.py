"""Leaders and ISRs from state-change.log (logger `state.change.logger`;
docs/tap.md cites every wording with its tag).

The lines this tap reads, and what each means in the contract:
- a broker became leader (Partition.makeLeader, 2.6+, INFO):
  `[Broker id=N] Leader t-p [with topic id T] starts at leader epoch E from
  offset O with [partition epoch PE, ]high watermark H[,] ISR [..] ...` - a
  `leader` event with the exact epoch start offset and HW;
- the controller sent a leader its LeaderAndIsr request (0.9-2.5, TRACE, which
  those versions' log4j.properties turns on): `... sending become-leader
  LeaderAndIsr request STATE to broker B for partition P`, and the leader's
  `Broker B received` (0.9-0.11) / `[Broker id=B] Received` (1.0+) `LeaderAndIsr
  request STATE ...` - a `leader` event (the epoch start offset is not in
  it: 0, as from the metadata log);
- the controller elected a leader or changed the ISR (ZooKeeper mode, 1.1+):
  `Changed partition t-p from X to OnlinePartition with state
  LeaderAndIsr(...)` and `Partition t-p state changed to (Leader:L,ISR:..,..)
  after removing replica R from the ISR ...`, and a leader that learned a new
  ISR without a new epoch (3.3+, `Skipped the become-leader state change ...
  since it is already the leader ... ISR [..]`) - `isr` events;
- `Changed partition t-p state from NonExistentPartition to NewPartition with
  assigned replicas 1,2,3` and the partition states a follower skips (3.3+):
  the assignment, which the leader lines do not have.
A `leader` event needs the replicas: a leader line of a partition whose
assignment no line has given yet takes them from `--replicas` (a metadata
dump or the cluster), else becomes an `isr` event, counted.
"""

from __future__ import annotations

import re
from typing import Optional

from isr.tap.assignment import Replicas
from isr.tap.lines import Log4jTap, LogLine

BROKER = re.compile(r"^\[Broker id=(\d+)\] (.*)$")                       # 1.0+
CONTROLLER = re.compile(r"^\[Controller id=(\d+)(?: epoch=\d+)?\] (.*)$")  # 1.0+
OLD_CONTROLLER = re.compile(r"^Controller (\d+) epoch \d+ (.*)$")          # 0.9-0.11

IDS = r"([\d, ]*)"
LEADER_STARTS = re.compile(
    r"^Leader (\S+) (?:with topic id \S+ )?starts at leader epoch (\d+) from offset (\d+) with "
    r"(?:partition epoch (\d+), )?high watermark (\d+),? ISR \[" + IDS + r"\],? "
    r"adding ?[rR]eplicas \[" + IDS + r"\] (?:and )?removing ?[rR]eplicas \[" + IDS + r"\]")
ALREADY_LEADER = re.compile(
    r"^Skipped the become-leader state change for (\S+) with topic id .*? "
    r"(?:partition state|partition registration) (.*) since it is already the leader with leader "
    r"epoch (\d+)\. Current high watermark \d+, ISR \[" + IDS + r"\]")
FOLLOWER_SKIPPED = re.compile(
    r"^Skipped the become-follower state change for (\S+) with topic id .*? "
    r"(?:partition state|partition registration) (.*) since ")
BECOME_LEADER_REQUEST = re.compile(
    r"^[Ss]ending become-leader LeaderAndIsr request (.*) to broker (\d+) for partition (\S+)$")
RECEIVED_REQUEST = re.compile(
    r"^(?:Broker (\d+) received|Received) LeaderAndIsr request (.*) correlation id \d+ from "
    r"controller \d+ epoch \d+ for partition (\S+)$")
ONLINE = re.compile(r"^[Cc]hanged partition (\S+) from \w+ to OnlinePartition with state (.*)$")
REMOVED = re.compile(r"^Partition (\S+) state changed to (\(Leader:.*?\)) after removing "
                     r"replica \d+ from the ISR")
ASSIGNED = re.compile(r"^[Cc]hanged partition (\S+) state from NonExistentPartition to "
                      r"NewPartition with assigned replicas ([\d,]*)")

# The partition states these lines print, whatever their class's toString:
# `(Leader:1,ISR:1,2,LeaderEpoch:5,ControllerEpoch:3)` (+ `,AllReplicas:1,2,3`),
# `LeaderAndIsr(leader=1, leaderEpoch=5, isr=List(1, 2), zkVersion=7)`,
# `PartitionState(controllerEpoch=3, leader=1, leaderEpoch=5, isr=[1, 2], zkVersion=7,
# replicas=[1, 2, 3])`, `LeaderAndIsrPartitionState(... isr=[1, 2], ... replicas=[1, 2, 3] ...)`,
# `LeaderAndIsr(leader=1, leaderEpoch=5, isrWithBrokerEpoch=List(BrokerState(brokerId=1, ..)), ..,
# partitionEpoch=7)`, `PartitionRegistration(replicas=[1, 2, 3], .., isr=[1, 2], .., leader=1, ..)`.
NAMED = {
    "leader": re.compile(r"(?:\(Leader:|(?<![A-Za-z])leader=)(-?\d+)"),
    "leader_epoch": re.compile(r"(?:LeaderEpoch:|(?<![A-Za-z])leaderEpoch=)(\d+)"),
    "isr": re.compile(r"(?:\bISR:|(?<![A-Za-z])isr=(?:List\(|Set\()?\[?)([\d, ]*)"),
    "replicas": re.compile(r"(?:AllReplicas:|(?<![A-Za-z])replicas=\[?)([\d, ]*)"),
    "version": re.compile(r"(?:ZkVersion:|zkVersion=|partitionEpoch=)(\d+)"),
}
BROKER_STATE = re.compile(r"BrokerState\(brokerId=(\d+)")

WITHOUT_REPLICAS = ("leader lines written as isr events (no line gave the partition's replicas; "
                    "see --replicas)")


def ids(text: str) -> list[int]:
    return [int(x) for x in re.split(r"[,\s]+", text) if x]


def partition_of(text: str) -> Optional[tuple[str, int]]:
    """`t-p` (1.0+) or `[t,p]` (0.9-0.11)."""
    m = re.match(r"^\[(.+),(\d+)\]$", text) or re.match(r"^(.+)-(\d+)$", text)
    return (m.group(1), int(m.group(2))) if m else None


def partition_state(text: str) -> dict:
    """leader, leader_epoch, isr, replicas, version: those the state shows."""
    out: dict = {}
    for name, pattern in NAMED.items():
        m = pattern.search(text)
        if m is not None:
            out[name] = ids(m.group(1)) if name in ("isr", "replicas") else int(m.group(1))
    if "isr" not in out and "isrWithBrokerEpoch=" in text:
        out["isr"] = [int(b) for b in BROKER_STATE.findall(text.split("isrWithBrokerEpoch=")[1]
                                                             .split("), leader")[0])]
    return out


class StateChangeTap(Log4jTap):
    """state-change.log lines in, `leader` and `isr` events out."""

    def __init__(self, cluster: str = "default", timezone: str = "UTC",
                 replicas_of: Optional[Replicas] = None) -> None:
        super().__init__(timezone)
        self.cluster = cluster
        self.replicas: dict[tuple[str, int], list[int]] = {}  # as this log's lines gave them
        self.replicas_of = replicas_of  # --replicas DUMP|BOOTSTRAP, for the others

    def entry(self, parsed: LogLine) -> list[dict]:
        text = parsed.message
        m = BROKER.match(text) or CONTROLLER.match(text) or OLD_CONTROLLER.match(text)
        broker = int(m.group(1)) if m and text.startswith("[Broker") else None
        body = m.group(2) if m else text
        # Most lines are about something else: their first word rules them out.
        for pattern, handler in self.HANDLERS.get(body.split(" ", 1)[0].lower(), ()):
            found = pattern.match(body)
            if found is not None:
                return handler(self, found, broker, parsed.ts)
        return self.skip("not a leader or ISR line")

    # ------------------------------------------------------------ lines
    def _leader_starts(self, m, broker, ts) -> list[dict]:
        key = partition_of(m.group(1))
        if key is None or broker is None:
            return self.skip("unreadable partition")
        epoch, start, hw = int(m.group(2)), int(m.group(3)), int(m.group(5))
        isr = ids(m.group(6))
        version = int(m.group(4)) if m.group(4) else None
        return self._leader(key, ts, broker, epoch, isr, start, hw, version)

    def _become_leader_request(self, m, broker, ts) -> list[dict]:
        return self._request(m.group(3), m.group(1), int(m.group(2)), ts)

    def _received_request(self, m, broker, ts) -> list[dict]:
        receiver = int(m.group(1)) if m.group(1) else broker  # 0.9-0.11 | 1.0+ prefix
        state = partition_state(m.group(2))
        if receiver is None or state.get("leader") != receiver:
            return self.skip("LeaderAndIsr request to a follower")
        return self._request(m.group(3), m.group(2), receiver, ts)

    def _request(self, where: str, text: str, leader: int, ts: int) -> list[dict]:
        key, state = partition_of(where), partition_state(text)
        if key is None or "isr" not in state or "leader_epoch" not in state:
            return self.skip("unreadable partition state")
        if state.get("replicas"):
            self.replicas[key] = state["replicas"]
        return self._leader(key, ts, leader, state["leader_epoch"], state["isr"], 0, None,
                            state.get("version"))

    def _isr_from_state(self, m, broker, ts) -> list[dict]:
        key, state = partition_of(m.group(1)), partition_state(m.group(2))
        if key is None or "isr" not in state or "leader_epoch" not in state:
            return self.skip("unreadable partition state")
        if state.get("leader", -1) < 0:
            return self.skip("partition left without a leader")
        return [self._isr(key, ts, state["leader"], state["leader_epoch"], state["isr"],
                          state.get("version"))]

    def _already_leader(self, m, broker, ts) -> list[dict]:
        key, state = partition_of(m.group(1)), partition_state(m.group(2))
        if key is None or broker is None:
            return self.skip("unreadable partition")
        if state.get("replicas"):
            self.replicas[key] = state["replicas"]
        return [self._isr(key, ts, broker, int(m.group(3)), ids(m.group(4)),
                          state.get("version"))]

    def _follower_skipped(self, m, broker, ts) -> list[dict]:
        """A follower's view (3.3+): nothing changed, but the replicas show."""
        key, replicas = partition_of(m.group(1)), NAMED["replicas"].search(m.group(2))
        if key is not None and replicas is not None and ids(replicas.group(1)):
            self.replicas[key] = ids(replicas.group(1))
        return self.skip("a follower's partition state")

    def _assigned(self, m, broker, ts) -> list[dict]:
        key = partition_of(m.group(1))
        if key is None:
            return self.skip("unreadable partition")
        self.replicas[key] = ids(m.group(2))
        return []

    HANDLERS = {  # by the line's first word, lower case
        "leader": [(LEADER_STARTS, _leader_starts)],
        "sending": [(BECOME_LEADER_REQUEST, _become_leader_request)],
        "broker": [(RECEIVED_REQUEST, _received_request)],
        "received": [(RECEIVED_REQUEST, _received_request)],
        "changed": [(ONLINE, _isr_from_state), (ASSIGNED, _assigned)],
        "partition": [(REMOVED, _isr_from_state)],
        "skipped": [(ALREADY_LEADER, _already_leader), (FOLLOWER_SKIPPED, _follower_skipped)],
    }

    # ------------------------------------------------------------ events
    def _leader(self, key, ts, leader, epoch, isr, start, hw, version) -> list[dict]:
        replicas = self.replicas.get(key) or (self.replicas_of and self.replicas_of(key))
        if not replicas or leader not in replicas or not set(isr) <= set(replicas):
            self.approximate[WITHOUT_REPLICAS] += 1
            return [self._isr(key, ts, leader, epoch, isr, version)]
        ev = {"v": 1, "type": "leader", "cluster": self.cluster, "ts": ts, "topic": key[0],
              "partition": key[1], "leader": leader, "leader_epoch": epoch,
              "replicas": list(replicas), "isr": isr, "leader_epoch_start_offset": start}
        if hw is not None:
            ev["hw"] = hw
        return [ev, self._isr(key, ts, leader, epoch, isr, version)]

    def _isr(self, key, ts, leader, epoch, isr, version) -> dict:
        ev = {"v": 1, "type": "isr", "cluster": self.cluster, "ts": ts, "topic": key[0],
              "partition": key[1], "leader": leader, "leader_epoch": epoch, "isr": isr}
        if version is not None:
            ev["partition_epoch"] = version
        return ev
