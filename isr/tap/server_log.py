"""The ISR the cluster committed, from the leaders' server.log (docs/tap.md).

`kafka.cluster.Partition` logs with the prefix `[Partition <topic>-<partition>
broker=<id>] ` (its logIdent). The lines, by version of
core/src/main/scala/kafka/cluster/Partition.scala:
- all versions: `Shrinking ISR from 1,2,3 to 1,2. Leader: (highWatermark: H,
  endOffset: E). Out of sync replicas: (brokerId: 3, endOffset: O,
  lastCaughtUpTimeMs: T).` - the leader's proposal;
- up to 2.7: `Expanding ISR from 1,2 to 1,2,3` and `ISR updated to [1,2,3]
  and zkVersion updated to [7]`;
- 2.8: `ISR updated to 1,2,3 and version updated to [7]`;
- 3.x and 4.x: `ISR updated to 1,2,3 (under-min-isr) and version updated to 7`
  (two spaces instead of the marker when not under min ISR).
An `ISR updated` line is the commit: it becomes an `isr` event at the line's
time. The last proposal's line rides along as `kafka_log` (an extra field the
contract ignores) so `isr verify` can show the cluster's own numbers.
"""

from __future__ import annotations

import re
from typing import Optional

from isr.tap.lines import Log4jTap, LogLine

PARTITION = re.compile(r"^\[Partition (.+)-(\d+) broker=(\d+)\] (.*)$")
UPDATED = re.compile(r"^ISR updated (?:from AlterIsr )?to \[?([\d,]*)\]?\s*(?:\(under-min-isr\))?\s*"
                     r"and (?:zkVersion|version) updated to \[?(\d+)\]?")
PROPOSED = re.compile(r"^(?:Shrinking|Expanding) ISR from ([\d,]*) to ([\d,]*)")


def ids(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


class ServerLogTap(Log4jTap):
    """server.log lines in, `isr` events out."""

    def __init__(self, cluster: str = "default", timezone: str = "UTC") -> None:
        super().__init__(timezone)
        self.cluster = cluster
        self.proposals: dict[tuple[str, int], str] = {}

    def entry(self, parsed: LogLine) -> list[dict]:
        m = PARTITION.match(parsed.message)
        if m is None:
            return self.skip("not a partition line")
        topic, partition, broker, text = m.group(1), int(m.group(2)), int(m.group(3)), m.group(4)
        if PROPOSED.match(text):
            self.proposals[(topic, partition)] = text
            return []
        updated = UPDATED.match(text)
        if updated is None:
            return self.skip("a partition line about something else")
        ev = {"v": 1, "type": "isr", "cluster": self.cluster, "ts": parsed.ts,
              "topic": topic, "partition": partition, "leader": broker,
              # server.log does not say the leader epoch; isr events are only
              # compared by their ISR (docs/tap.md).
              "leader_epoch": 0, "isr": ids(updated.group(1)),
              "partition_epoch": int(updated.group(2))}
        proposal = self.proposals.pop((topic, partition), None)
        if proposal is not None:
            ev["kafka_log"] = proposal
        return [ev]


def proposal_numbers(text: Optional[str]) -> dict:
    """The numbers of a `Shrinking ISR` line: leader HW/LEO and, per removed
    replica, its endOffset and lastCaughtUpTimeMs."""
    if not text:
        return {}
    out: dict = {}
    leader = re.search(r"highWatermark: (\d+), endOffset: (\d+)", text)
    if leader:
        out["hw"], out["leader_leo"] = int(leader.group(1)), int(leader.group(2))
    out["replicas"] = {int(b): {"leo": int(e), "last_caught_up_ts": int(t)} for b, e, t in
                       re.findall(r"\(brokerId: (\d+), endOffset: (-?\d+), "
                                  r"lastCaughtUpTimeMs: (-?\d+)\)", text)}
    return out
