"""Input contract: replica fetch-state events (docs/contract.md, schema version 1).

Every field that Kafka defines as an offset or a time is a non-negative int;
`-1` is accepted only where docs/contract.md says "unknown" (broker epochs).
Validation is strict (no "5" for 5, no 5.0, no true) because a producer that
sends those has a bug the operator should hear about.
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, model_validator

SCHEMA_VERSION = 1
MAX_LONG = 2**63 - 1  # Kafka's offsets and times are Java longs
# Times stop at 9999-12-31T23:59:59.999Z: the last instant a 4-digit ISO 8601
# year (Alertmanager's startsAt), Python's datetime and Spark's timestamps all
# hold. A producer sending microseconds or nanoseconds gets a dead letter, not
# a clock 50 000 years ahead. Times in the near future are the sequencer's
# business (monitor.max_future_ms).
MAX_TS = 253402300799999

NonNegInt = Annotated[int, Field(ge=0, le=MAX_LONG)]
Timestamp = Annotated[int, Field(ge=0, le=MAX_TS)]
Name = Annotated[str, Field(min_length=1, max_length=249)]  # Kafka's topic-name limit
# Bounds on lists keep every output record far below a producer's 1 MB limit.
MAX_REPLICAS = 1024

# An event's scope, stated once per type (its class): a partition's event
# reaches that partition's models and is keyed `<topic>/<partition>`; a
# broker's reaches every partition of its cluster and is keyed `broker/<id>`;
# a fetch session's reaches the partitions its leader holds in that session
# (the leader's view, as Kafka keeps sessions per leader) and is keyed
# `leader/<id>`.
PARTITION, BROKER, LEADER = "partition", "broker", "leader"
BrokerId = Annotated[int, Field(ge=0, le=2**31 - 1)]
# Kafka sends -1 for "no broker epoch" (ZooKeeper mode, Fetch < v15).
BrokerEpoch = Annotated[int, Field(ge=-1, le=MAX_LONG)]

BrokerState = Literal["registered", "fenced", "unfenced", "controlled_shutdown", "unregistered"]


# The checks that span several fields, as plain functions: the pydantic
# models below and the fast decoder's structs (contract/fast.py) both call
# them, so each rule is written once. Each returns the reason, or None.
def impossible_follower_event(ev) -> Optional[str]:
    if ev.replica == ev.leader:
        return f"replica {ev.replica} is the leader itself"
    received_ts = getattr(ev, "received_ts", None)
    if received_ts is not None and received_ts > ev.ts:
        return f"received_ts {received_ts} is after ts {ev.ts}"
    return None


def inconsistent_assignment(ev) -> Optional[str]:
    if len(set(ev.replicas)) != len(ev.replicas):
        return f"replicas {ev.replicas} has duplicates"
    if len(set(ev.isr)) != len(ev.isr):
        return f"isr {ev.isr} has duplicates"
    if ev.leader not in ev.replicas:
        return f"leader {ev.leader} is not in replicas {ev.replicas}"
    outside = [r for r in ev.isr if r not in ev.replicas]
    if outside:
        return f"isr members {outside} are not in replicas {ev.replicas}"
    if ev.hw is not None and ev.hw > ev.leader_epoch_start_offset:
        return f"hw {ev.hw} is above leader_epoch_start_offset {ev.leader_epoch_start_offset}"
    return None


class _Event(BaseModel):
    # Unknown extra fields are ignored (tolerant reader): a v1 producer may add
    # fields without breaking older monitors.
    model_config = ConfigDict(strict=True, frozen=True, extra="ignore")
    scope: ClassVar[str]  # PARTITION, LEADER or BROKER: each kind's class says

    # A strict int pinned to 1 (Literal[1] would also take JSON `true`).
    v: Annotated[int, Field(ge=SCHEMA_VERSION, le=SCHEMA_VERSION, strict=True)]
    cluster: Name = "default"
    ts: Timestamp


class _PartitionEvent(_Event):
    scope: ClassVar[str] = PARTITION

    topic: Name
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
        problem = impossible_follower_event(self)
        if problem:
            raise ValueError(problem)
        return self


class Fetch(_FollowerEvent):
    """The leader served a follower fetch and updated its view of the follower."""

    type: Literal["fetch"]
    received_ts: Optional[Timestamp] = None
    log_start_offset: Optional[NonNegInt] = None
    broker_epoch: Optional[BrokerEpoch] = None

    @property
    def fetch_ts(self) -> int:
        """Kafka's fetchTimeMs: when the request arrived (docs/rules.md, "On fetch")."""
        return self.ts if self.received_ts is None else self.received_ts


class FetchStart(_FollowerEvent):
    """The leader received a follower fetch and has not served it yet (KIP-501)."""

    type: Literal["fetch_start"]


class Append(_PartitionEvent):
    type: Literal["append"]
    leader_leo: NonNegInt


class Leader(_PartitionEvent):
    type: Literal["leader"]
    replicas: Annotated[list[BrokerId], Field(min_length=1, max_length=MAX_REPLICAS)]
    isr: Annotated[list[BrokerId], Field(max_length=MAX_REPLICAS)]
    leader_epoch_start_offset: NonNegInt
    hw: Optional[NonNegInt] = None
    min_insync_replicas: Optional[Annotated[int, Field(ge=1)]] = None

    @model_validator(mode="after")
    def _consistent_assignment(self):
        problem = inconsistent_assignment(self)
        if problem:
            raise ValueError(problem)
        return self


class Isr(_PartitionEvent):
    """The ISR the cluster itself committed, for comparison only."""

    type: Literal["isr"]
    isr: Annotated[list[BrokerId], Field(max_length=MAX_REPLICAS)]
    partition_epoch: Optional[NonNegInt] = None


# A fetch session's epochs (Kafka's FetchMetadata): 0 opens a new session
# with a full request, -1 (FINAL_EPOCH) is a sessionless full request, and
# 1, 2, ... number the incremental requests of one session.
INITIAL_EPOCH, FINAL_EPOCH = 0, -1
MAX_SESSION_PARTITIONS = 200_000


def impossible_fetch_session(ev) -> Optional[str]:
    problem = impossible_follower_event(ev)
    if problem:
        return problem
    full = ev.session_epoch in (INITIAL_EPOCH, FINAL_EPOCH)
    if ev.full != full:
        return (f"full is {str(ev.full).lower()} but session_epoch {ev.session_epoch} makes the "
                f"request {'full' if full else 'incremental'} (Kafka's FetchMetadata.isFull)")
    if ev.full and ev.forgotten:
        return "a full request forgets no partitions (forgotten must be empty)"
    seen = set()
    for p in ev.partitions:
        key = (p.topic, p.partition)
        if key in seen:
            return f"partition {p.topic}-{p.partition} is listed twice"
        seen.add(key)
    for p in ev.forgotten:
        if (p.topic, p.partition) in seen:
            return f"partition {p.topic}-{p.partition} is both listed and forgotten"
    return None


class SessionPartition(BaseModel):
    """One partition a session request listed: the follower's position in it."""

    model_config = ConfigDict(strict=True, frozen=True, extra="ignore")

    topic: Name
    partition: NonNegInt
    leader_epoch: NonNegInt  # the request's current_leader_epoch
    fetch_offset: NonNegInt
    leader_leo: Optional[NonNegInt] = None  # where the tap knows it


class ForgottenPartition(BaseModel):
    model_config = ConfigDict(strict=True, frozen=True, extra="ignore")

    topic: Name
    partition: NonNegInt


class FetchSession(_Event):
    """One follower FETCH request of a leader/follower fetch session (KIP-227).

    Only the partitions the request listed are here; the leader evaluates every
    partition of the session (docs/rules.md, "Fetch sessions"). Routing key:
    `leader/<id>` (`routing_key`), the leader's view, as Kafka holds sessions
    per leader."""

    scope: ClassVar[str] = LEADER

    type: Literal["fetch_session"]
    leader: BrokerId
    replica: BrokerId
    received_ts: Optional[Timestamp] = None
    broker_epoch: Optional[BrokerEpoch] = None
    session_id: Annotated[int, Field(ge=0, le=2**31 - 1)]
    session_epoch: Annotated[int, Field(ge=FINAL_EPOCH, le=2**31 - 1)]
    full: bool
    partitions: Annotated[list[SessionPartition], Field(max_length=MAX_SESSION_PARTITIONS)]
    forgotten: Annotated[list[ForgottenPartition],
                         Field(max_length=MAX_SESSION_PARTITIONS)] = []

    @model_validator(mode="after")
    def _possible(self):
        problem = impossible_fetch_session(self)
        if problem:
            raise ValueError(problem)
        return self


class Broker(_Event):
    """Broker lifecycle; cluster-wide, so it has no topic, partition or leader."""

    scope: ClassVar[str] = BROKER

    type: Literal["broker"]
    broker: BrokerId
    broker_epoch: BrokerEpoch
    state: BrokerState


Event = Annotated[
    Union[Fetch, FetchStart, Append, Leader, Isr, Broker, FetchSession],
    Field(discriminator="type")
]

EVENT_TYPES: dict[str, type[_Event]] = {
    "fetch": Fetch,
    "fetch_start": FetchStart,
    "append": Append,
    "leader": Leader,
    "isr": Isr,
    "broker": Broker,
    "fetch_session": FetchSession,
}

SCOPE: dict[str, str] = {name: model.scope for name, model in EVENT_TYPES.items()}


def routing_key(event: dict) -> bytes:
    """The Kafka message key of an input event (docs/contract.md), so that a
    partition's events stay in order."""
    scope = SCOPE.get(event["type"])
    if scope == BROKER:
        return f"broker/{event['broker']}".encode()
    if scope == LEADER:
        return f"leader/{event['leader']}".encode()
    return f"{event['topic']}/{event['partition']}".encode()
