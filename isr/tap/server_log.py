"""The ISR the cluster committed, from the leaders' server.log (docs/tap.md).

`kafka.cluster.Partition` prefixes its lines with its logIdent:
`Partition [<topic>,<partition>] on broker <id>: ` up to 0.11 and
`[Partition <topic>-<partition> broker=<id>] ` from 1.0. What it writes about
the ISR, by version of core/src/main/scala/kafka/cluster/Partition.scala
(every wording, with its tag, in docs/tap.md):
- the leader's proposal, INFO in every version: `Shrinking ISR [for partition
  P] from 1,2,3 to 1,2` (2.2+: `. Leader: (highWatermark: H, endOffset: E).
  Out of sync replicas: (brokerId: 3, endOffset: O[, lastCaughtUpTimeMs: T]).`)
  and, up to 2.7, `Expanding ISR [for partition P] from 1,2 to 1,2,3`;
- the commit: `ISR updated to [1,2] and zkVersion updated to [7]` - TRACE up
  to 2.3, INFO from 2.4 - then `ISR updated [from AlterIsr ]to 1,2 and version
  updated to [7]` (2.7, 2.8), `... to 1,2 [(under-min-isr)] and version
  updated to 7` (3.1+);
- a refusal: `Cached zkVersion [7] not equal to that in zookeeper, skip
  updating ISR` (ZooKeeper, up to 2.7) and `Failed to alter partition to ...
  since the controller rejected the request with E` (3.3+).

A commit line is the `isr` event. A proposal is held until the same
partition's next line (or the end) says what became of it: where the broker
logs no commit line at INFO (before 2.4: its start banner says, or the
wording) the proposal is the commit unless ZooKeeper refused it, and becomes
the event (at the latest 5 s of log time later). A proposal never vanishes: one that is
not an event is counted in the summary with the reason (on KRaft a leader
may learn its commit from the metadata log and log none: docs/tap.md).
"""

from __future__ import annotations

import re
from typing import Optional

from isr.tap.lines import Log4jTap, LogLine

PARTITION = re.compile(r"^\[Partition (.+)-(\d+) broker=(\d+)\] (.*)$")          # 1.0+
OLD_PARTITION = re.compile(r"^Partition \[(.+),(\d+)\] on broker (\d+): (.*)$")  # 0.9-0.11
UPDATED = re.compile(r"^ISR updated (?:from AlterIsr )?to \[?([\d,]*)\]?\s*"
                     r"(?:\(under-min-isr\))?\s*and (?:zkVersion|version) updated to \[?(\d+)\]?")
# 0.9-2.3 at TRACE: the ISR as Replica objects (Replica.toString, core/src/main/scala/kafka/
# cluster/Replica.scala): `[ReplicaId: 1; Topic: t; ...,ReplicaId: 2; ...]` to 2.0,
# `[Replica(replicaId=1, topic=t, ...),Replica(replicaId=2, ...)]` 2.1-2.3.
UPDATED_REPLICAS = re.compile(r"^ISR updated to \[(.*(?:ReplicaId: |replicaId=).*)\] and "
                              r"zkVersion updated to \[(\d+)\]")
REPLICA_ID = re.compile(r"(?:ReplicaId: |Replica\(replicaId=)(\d+)")
PROPOSED = re.compile(r"^(Shrinking|Expanding) ISR (?:for partition \S+ )?"
                      r"from ([\d,]*) to ([\d,]*)")
REFUSED_BY_ZK = re.compile(r"^Cached zkVersion \[?\d+\]? not equal to that in zookeeper, "
                           r"skip updating ISR")
REJECTED = re.compile(r"^Failed to alter partition to .* since the controller rejected the "
                      r"request with (\w+)")
# A ZooKeeper write is synchronous: its outcome is logged within milliseconds.
# A proposal taken as the commit is written this long after, by the log's own
# clock, if no line of its partition came before.
SETTLE_MS = 5_000

TAKEN_AS_COMMIT = "ISR changes taken from the proposal line (the commit line is TRACE before 2.4)"
NO_COMMIT = "ISR proposals without a commit line (docs/tap.md: not applied, or KRaft)"
REFUSED = "ISR proposals ZooKeeper refused (Cached zkVersion ... skip updating ISR)"
CONTROLLER_REJECTED = "ISR proposals the controller rejected"


VERSION = re.compile(r"^Kafka version ?: (\d+)\.(\d+)")  # AppInfoParser, at every start


def ids(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def committed_isr(text: str) -> list[int]:
    """`1,2,3`, or Replica objects (the TRACE line up to 2.3)."""
    replicas = REPLICA_ID.findall(text)
    return [int(x) for x in replicas] if replicas else ids(text)


class Proposal:
    __slots__ = ("ts", "leader", "isr", "text", "commit_logged")

    def __init__(self, ts: int, leader: int, isr: list[int], text: str,
                 commit_logged: Optional[bool]) -> None:
        self.ts, self.leader, self.isr, self.text = ts, leader, isr, text
        # Whether the version that wrote this wording logs its commit at INFO:
        # False up to 2.3, True from 2.4, None where the wording does not tell.
        self.commit_logged = commit_logged


def commit_logged_by(old_prefix: bool, text: str) -> Optional[bool]:
    """What a proposal's wording says of its version (docs/tap.md): the 0.9-0.11
    prefix and a shrink without the leader's numbers (before 2.2) are older
    than 2.4; lastCaughtUpTimeMs is 3.6+."""
    if old_prefix or (text.startswith("Shrinking") and "Leader: (" not in text):
        return False
    if "lastCaughtUpTimeMs" in text:
        return True
    return None


class ServerLogTap(Log4jTap):
    """server.log lines in, `isr` events out."""

    def __init__(self, cluster: str = "default", timezone: str = "UTC") -> None:
        super().__init__(timezone)
        self.cluster = cluster
        self.proposals: dict[tuple[str, int], Proposal] = {}
        self.commits_logged = False  # an `ISR updated` line was seen: 2.4+ (or TRACE on)
        self.version: Optional[tuple[int, int]] = None  # from the start banner, if seen

    def entry(self, parsed: LogLine) -> list[dict]:
        out = self._settle_old(parsed.ts)
        version = VERSION.match(parsed.message)
        if version is not None:
            self.version = (int(version.group(1)), int(version.group(2)))
            return out + self.skip("not a partition line")
        m = PARTITION.match(parsed.message)
        old = m is None
        if old:
            m = OLD_PARTITION.match(parsed.message)
        if m is None:
            return out + self.skip("not a partition line")
        key = (m.group(1), int(m.group(2)))
        return out + self._partition_line(key, int(m.group(3)), m.group(4), parsed.ts, old)

    def _partition_line(self, key: tuple[str, int], broker: int, text: str, ts: int,
                        old: bool) -> list[dict]:
        updated = UPDATED.match(text) or UPDATED_REPLICAS.match(text)
        if updated is not None:
            self.commits_logged = True
            isr, out = committed_isr(updated.group(1)), []
            pending = self.proposals.get(key)
            if pending is not None and set(pending.isr) != set(isr):
                out = self._settle(key)  # it commits something else (KRaft: docs/tap.md)
            pending = self.proposals.pop(key, None)
            return out + [self._event(key, ts, broker, isr, int(updated.group(2)),
                                      None if pending is None else pending.text)]
        if key in self.proposals and (REFUSED_BY_ZK.match(text) or REJECTED.match(text)):
            del self.proposals[key]
            return self.skip(REFUSED if text.startswith("Cached") else CONTROLLER_REJECTED)
        out = self._settle(key)  # the partition's next line: the proposal was not refused
        proposed = PROPOSED.match(text)
        if proposed is None:
            return out + self.skip("a partition line about something else")
        self.proposals[key] = Proposal(ts, broker, ids(proposed.group(3)), text,
                                       commit_logged_by(old, text))
        return out

    def finish(self) -> list[dict]:
        out = []
        for key in sorted(self.proposals):
            out += self._settle(key)
        return out

    def _settle_old(self, now: int) -> list[dict]:
        """A proposal that is the commit is written once nothing refused it
        for SETTLE_MS; one that waits for its commit line waits for it (an
        AlterPartition round trip can take longer)."""
        out = []
        for key in [k for k, p in self.proposals.items()
                    if now - p.ts >= SETTLE_MS and not self._commit_logged(p)]:
            out += self._settle(key)
        return out

    def _commit_logged(self, p: Proposal) -> bool:
        """Whether this broker logs the commit of this proposal at INFO."""
        if self.version is not None:
            return self.version >= (2, 4)
        return p.commit_logged if p.commit_logged is not None else self.commits_logged

    def _settle(self, key: tuple[str, int]) -> list[dict]:
        """A proposal nothing refused: the commit itself where the broker logs
        no commit line, else a proposal whose commit never came."""
        p = self.proposals.pop(key, None)
        if p is None:
            return []
        if self._commit_logged(p):
            return self.skip(NO_COMMIT)
        self.approximate[TAKEN_AS_COMMIT] += 1
        return [self._event(key, p.ts, p.leader, p.isr, None, p.text)]

    def _event(self, key: tuple[str, int], ts: int, leader: int, isr: list[int],
               version: Optional[int], proposal: Optional[str]) -> dict:
        ev = {"v": 1, "type": "isr", "cluster": self.cluster, "ts": ts,
              "topic": key[0], "partition": key[1], "leader": leader,
              # server.log does not say the leader epoch; isr events are only
              # compared by their ISR (docs/tap.md).
              "leader_epoch": 0, "isr": isr}
        if version is not None:
            ev["partition_epoch"] = version
        if proposal is not None:
            ev["kafka_log"] = proposal
        return ev


OUT_OF_SYNC = re.compile(r"\(brokerId: (\d+), endOffset: (-?\d+|unknown)"
                         r"(?:, lastCaughtUpTimeMs: (-?\d+|unknown))?\)")


def _number(text: Optional[str]) -> Optional[int]:
    return int(text) if text and text != "unknown" else None


def proposal_numbers(text: Optional[str]) -> dict:
    """The numbers of a `Shrinking ISR` line (2.2+): leader HW/LEO; per removed
    replica, `replicas` (endOffset and lastCaughtUpTimeMs, 3.6+, both known)
    and `out_of_sync` (every replica the line names, None where it says
    `unknown` or does not say)."""
    if not text:
        return {}
    out: dict = {}
    leader = re.search(r"highWatermark: (\d+), endOffset: (\d+)", text)
    if leader:
        out["hw"], out["leader_leo"] = int(leader.group(1)), int(leader.group(2))
    out["out_of_sync"] = {int(b): {"leo": _number(e), "last_caught_up_ts": _number(t)}
                          for b, e, t in OUT_OF_SYNC.findall(text)}
    out["replicas"] = {b: n for b, n in out["out_of_sync"].items()
                       if n["leo"] is not None and n["last_caught_up_ts"] is not None}
    return out
