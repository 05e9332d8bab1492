"""Input contract: replica fetch-state events (events.md, schema version 1).

Every field that Kafka defines as an offset or a time is a non-negative int;
`-1` is accepted only where events.md says "unknown" (broker epochs).
Validation is strict (no "5" for 5, no 5.0, no true) because a producer that
sends those has a bug the operator should hear about.
"""

from __future__ import annotations

from typing import Annotated, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, model_validator

SCHEMA_VERSION = 1
MAX_LONG = 2**63 - 1  # Kafka's offsets and times are Java longs

NonNegInt = Annotated[int, Field(ge=0, le=MAX_LONG)]
BrokerId = Annotated[int, Field(ge=0, le=2**31 - 1)]
# Kafka sends -1 for "no broker epoch" (ZooKeeper mode, Fetch < v15).
BrokerEpoch = Annotated[int, Field(ge=-1, le=MAX_LONG)]

BROKER_STATES = ("registered", "fenced", "unfenced", "controlled_shutdown", "unregistered")
BrokerState = Literal["registered", "fenced", "unfenced", "controlled_shutdown", "unregistered"]


class _Event(BaseModel):
    # Unknown extra fields are ignored (tolerant reader): a v1 producer may add
    # fields without breaking older monitors.
    model_config = ConfigDict(strict=True, frozen=True, extra="ignore")

    # A strict int pinned to 1 (Literal[1] would also take JSON `true`).
    v: Annotated[int, Field(ge=SCHEMA_VERSION, le=SCHEMA_VERSION, strict=True)]
    cluster: Annotated[str, Field(min_length=1)] = "default"
    ts: NonNegInt


class _PartitionEvent(_Event):
    topic: Annotated[str, Field(min_length=1, max_length=249)]
    partition: NonNegInt
    leader: BrokerId
    leader_epoch: NonNegInt

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.cluster, self.topic, self.partition)


class _FollowerEvent(_PartitionEvent):
    replica: BrokerId
    fetch_offset: NonNegInt
    leader_leo: NonNegInt

    @model_validator(mode="after")
    def _possible(self):
        # One validator per model: each costs a Python call per event.
        if self.replica == self.leader:
            raise ValueError(f"replica {self.replica} is the leader itself")
        received_ts = getattr(self, "received_ts", None)
        if received_ts is not None and received_ts > self.ts:
            raise ValueError(f"received_ts {received_ts} is after ts {self.ts}")
        return self


class Fetch(_FollowerEvent):
    """The leader served a follower fetch and updated its view of the follower."""

    type: Literal["fetch"]
    received_ts: Optional[NonNegInt] = None
    log_start_offset: Optional[NonNegInt] = None
    broker_epoch: Optional[BrokerEpoch] = None

    @property
    def fetch_ts(self) -> int:
        """Kafka's fetchTimeMs: when the request arrived (semantics.md, On fetch)."""
        return self.ts if self.received_ts is None else self.received_ts


class FetchStart(_FollowerEvent):
    """The leader received a follower fetch and has not served it yet (KIP-501)."""

    type: Literal["fetch_start"]


class Append(_PartitionEvent):
    type: Literal["append"]
    leader_leo: NonNegInt


class Leader(_PartitionEvent):
    type: Literal["leader"]
    replicas: Annotated[list[BrokerId], Field(min_length=1)]
    isr: list[BrokerId]
    leader_epoch_start_offset: NonNegInt
    hw: Optional[NonNegInt] = None
    min_insync_replicas: Optional[Annotated[int, Field(ge=1)]] = None

    @model_validator(mode="after")
    def _consistent_assignment(self):
        if len(set(self.replicas)) != len(self.replicas):
            raise ValueError(f"replicas {self.replicas} has duplicates")
        if len(set(self.isr)) != len(self.isr):
            raise ValueError(f"isr {self.isr} has duplicates")
        if self.leader not in self.replicas:
            raise ValueError(f"leader {self.leader} is not in replicas {self.replicas}")
        outside = [r for r in self.isr if r not in self.replicas]
        if outside:
            raise ValueError(f"isr members {outside} are not in replicas {self.replicas}")
        if self.hw is not None and self.hw > self.leader_epoch_start_offset:
            raise ValueError(
                f"hw {self.hw} is above leader_epoch_start_offset {self.leader_epoch_start_offset}"
            )
        return self


class Isr(_PartitionEvent):
    """The ISR the cluster itself committed, for comparison only."""

    type: Literal["isr"]
    isr: list[BrokerId]
    partition_epoch: Optional[NonNegInt] = None


class Broker(_Event):
    """Broker lifecycle; cluster-wide, so it has no topic, partition or leader."""

    type: Literal["broker"]
    broker: BrokerId
    broker_epoch: BrokerEpoch
    state: BrokerState


Event = Annotated[
    Union[Fetch, FetchStart, Append, Leader, Isr, Broker], Field(discriminator="type")
]
PartitionEvent = Union[Fetch, FetchStart, Append, Leader, Isr]

EVENT_TYPES: dict[str, type[_Event]] = {
    "fetch": Fetch,
    "fetch_start": FetchStart,
    "append": Append,
    "leader": Leader,
    "isr": Isr,
    "broker": Broker,
}
