"""What the alert rules need beyond the leader model, per partition and policy,
and the lifecycle of each alert (pending -> firing -> resolved)."""

from __future__ import annotations

from typing import Optional, Protocol

from isr.model.follower import Follower


class PartitionView(Protocol):
    """The leader model's fields the rules read (PartitionModel has them)."""

    leader: int
    replicas: list[int]
    isr: list[int]
    min_isr: int
    hw: int
    leader_leo: int
    followers: dict[int, Follower]


class AtChange:
    """The model as it was right after an ISR change: the change's ISR and HW
    (other fields do not move at a check instant)."""

    __slots__ = ("leader", "replicas", "isr", "min_isr", "hw", "leader_leo", "followers")

    def __init__(self, model: PartitionView, isr: list[int], hw: int) -> None:
        self.leader, self.replicas, self.min_isr = model.leader, model.replicas, model.min_isr
        self.leader_leo, self.followers = model.leader_leo, model.followers
        self.isr, self.hw = isr, hw


class Watch:
    __slots__ = ("cluster", "topic", "partition", "policy", "t", "due", "hw_seen", "behind",
                 "hw_since", "last_event_ts", "served_ms", "pending", "reported", "changes",
                 "alerts")

    def __init__(self, cluster: str, topic: str, partition: int, policy: str) -> None:
        self.cluster, self.topic, self.partition, self.policy = cluster, topic, partition, policy
        self.t = -1                  # last instant evaluated
        self.due: Optional[int] = None  # next instant where a condition may flip by itself
        self.hw_seen = -1
        self.behind = False          # leader_leo > hw
        self.hw_since = 0            # when the HW last moved, or last fell behind the LEO
        self.last_event_ts = -1      # last partition event (PartitionSilent)
        self.served_ms: dict[int, int] = {}  # follower -> how long its last fetch took to serve
        self.pending: dict[int, int] = {}    # follower -> ts of an unserved fetch_start
        self.reported: Optional[list[int]] = None  # the cluster's own ISR (`isr` events)
        self.changes: list[int] = []         # ts of recent ISR changes (IsrFlapping)
        # (alertname, replica) -> [active since, fired at or -1, last sent]
        self.alerts: dict[tuple[str, int], list[int]] = {}

    def note_hw(self, hw: int, leader_leo: int, ts: int) -> None:
        """A stall is measured from the later of: the HW's last move, the
        moment the LEO went past it (an idle partition's HW is not stalled)."""
        behind = leader_leo > hw
        if hw != self.hw_seen or (behind and not self.behind):
            self.hw_since = ts
        self.hw_seen, self.behind = hw, behind

    def to_list(self) -> list:
        return [self.cluster, self.topic, self.partition, self.policy, self.t, self.due,
                self.hw_seen, self.behind, self.hw_since, self.last_event_ts,
                sorted(self.served_ms.items()),
                sorted(self.pending.items()), self.reported, self.changes,
                [[name, r, *v] for (name, r), v in sorted(self.alerts.items())]]

    @classmethod
    def from_list(cls, values: list) -> "Watch":
        (cluster, topic, partition, policy, t, due, hw_seen, behind, hw_since, last_event_ts,
         served, pending, reported, changes, alerts) = values
        w = cls(cluster, topic, partition, policy)
        w.t, w.due, w.hw_seen, w.behind = t, due, hw_seen, behind
        w.hw_since, w.last_event_ts = hw_since, last_event_ts
        w.served_ms = {r: ms for r, ms in served}
        w.pending = {r: ts for r, ts in pending}
        w.reported, w.changes = reported, changes
        w.alerts = {(name, r): list(v) for name, r, *v in alerts}
        return w
