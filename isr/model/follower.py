"""What the leader knows of one follower (Kafka's `ReplicaState`).

Mutable with __slots__ rather than an immutable snapshot: the model applies
hundreds of thousands of fetches a second per core, and replacing a snapshot
per fetch costs more than the whole rule. Rules only read it (rules.py); the
partition model is the only writer.
"""

from __future__ import annotations

from operator import attrgetter
from typing import Sequence


# A follower's fields, in state order (to_list); the class's __slots__. A
# module constant, not read back as `Follower.__slots__`: mypyc compiles the
# class to a native one, whose class object does not offer its instance slots.
SLOTS = (
    "leo",
    "last_fetch_leader_leo",
    "last_fetch_ts",
    "last_caught_up_ts",
    "broker_epoch",
    "pending_offset",
    "pending_ts",
)


class Follower:
    __slots__ = SLOTS

    def __init__(
        self,
        leo: int = -1,
        last_fetch_leader_leo: int = -1,
        last_fetch_ts: int = 0,
        last_caught_up_ts: int = 0,
        broker_epoch: int = -1,
        pending_offset: int = -1,
        pending_ts: int = 0,
    ) -> None:
        self.leo = leo  # -1: unknown (no fetch since this leader took over)
        self.last_fetch_leader_leo = last_fetch_leader_leo
        self.last_fetch_ts = last_fetch_ts
        self.last_caught_up_ts = last_caught_up_ts  # 0: never caught up
        self.broker_epoch = broker_epoch  # -1: unknown / not sent
        # KIP-501: the latest fetch_start not yet served (-1: none).
        self.pending_offset = pending_offset
        self.pending_ts = pending_ts

    def to_list(self) -> list[int]:
        return list(FOLLOWER_FIELDS(self))

    @classmethod
    def from_list(cls, values: Sequence[int]) -> "Follower":  # (a to_list row's tail: a tuple)
        return cls(*values)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Follower) and self.to_list() == other.to_list()

    def __repr__(self) -> str:
        fields = ", ".join(f"{n}={getattr(self, n)}" for n in SLOTS)
        return f"Follower({fields})"


# A follower's fields as a tuple, in `__slots__` order (one C call: the
# partition model's to_list writes every follower of every model at each
# save of the Spark job's state; docs/benchmarks.md, branch `savecost`).
FOLLOWER_FIELDS = attrgetter(*SLOTS)
