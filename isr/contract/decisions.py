"""Output contract: the monitor's decisions (docs/contract.md, "Output").

Field order is the serialisation order, so the same decision always gives the
same bytes (replay engines are compared byte for byte).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any, Literal, Optional, overload

import orjson
from pydantic import BaseModel, ConfigDict

from isr.contract.policies import POLICY_ORDER, Policy


class _Out(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ReplicaDetail(_Out):
    """Per-replica numbers that decided an ISR change."""

    replica: int
    leo: int
    # 0 when the follower's LEO equals the leader's; None when it never caught up.
    lag_ms: Optional[int]
    last_caught_up_ts: int
    last_fetch_ts: int


class IsrChange(_Out):
    type: Literal["isr_change"] = "isr_change"
    id: str
    cluster: str
    topic: str
    partition: int
    leader: int
    leader_epoch: int
    ts: int
    action: Literal["shrink", "expand"]
    replicas: list[int]
    isr_before: list[int]
    isr_after: list[int]
    hw: int
    leader_leo: int
    policy: Policy
    # "leader": the partition leader's own rule; "controller": fencing,
    # controlled shutdown or unregistration removed the broker.
    cause: Literal["leader", "controller"]
    reason: str
    details: list[ReplicaDetail]
    bootstrap: bool = False

    @property
    def seq(self) -> int:
        """The partition's decision counter under this policy (end of the id)."""
        return int(self.id.rsplit("/", 1)[1])


class FollowerView(_Out):
    replica: int
    leo: int
    lag_ms: Optional[int]
    last_caught_up_ts: int
    last_fetch_ts: int
    in_isr: bool


class PartitionState(_Out):
    type: Literal["partition_state"] = "partition_state"
    cluster: str
    topic: str
    partition: int
    ts: int
    # -1 while the partition is leaderless (its leader was fenced / shut down).
    leader: int
    leader_epoch: int
    replicas: list[int]
    isr: list[int]
    hw: int
    leader_leo: int
    under_replicated: bool
    under_min_isr: bool
    at_min_isr: bool
    min_insync_replicas: int
    policy: Policy
    followers: list[FollowerView]
    bootstrap: bool = False


def partition_state_json(fields: dict) -> bytes:
    """`PartitionState.model_validate(fields).model_dump_json()`, as bytes,
    without the pydantic object: `fields` are a model's own values by the
    record's field names, in its field order (PartitionModel.state_fields),
    so only their JSON is left to write, and orjson writes the same bytes
    (tests/test_contract_states.py compares them on varied states). A value
    orjson cannot write (an int beyond 64 bits) takes the pydantic way.
    4-5x cheaper for 100 k final states (docs/benchmarks.md, "The start and
    the end, second pass")."""
    try:
        return orjson.dumps(fields)
    except orjson.JSONEncodeError:
        return PartitionState.model_validate(fields).model_dump_json().encode()


class PartitionStates(Sequence):
    """The final partition_state records of a run, held as their fields
    (PartitionModel.state_fields): `isr replay` writes their JSON straight
    from them (`jsonl`), and a caller that reads them as PartitionState
    objects gets them validated on first use, all at once."""

    def __init__(self, fields: list[dict]) -> None:
        self.fields = fields
        self._views: Optional[list[PartitionState]] = None

    def views(self) -> list[PartitionState]:
        if self._views is None:
            self._views = [PartitionState.model_validate(f) for f in self.fields]
        return self._views

    def jsonl(self):
        """Each record's JSON line, as `model_dump_json` writes it."""
        for f in self.fields:
            yield partition_state_json(f) + b"\n"

    @overload
    def __getitem__(self, i: int) -> PartitionState: ...
    @overload
    def __getitem__(self, i: slice) -> list[PartitionState]: ...
    def __getitem__(self, i):
        return self.views()[i]

    def __len__(self) -> int:
        return len(self.fields)

    def __iter__(self):
        return iter(self.views())

    def __add__(self, other: list) -> list:
        return self.views() + list(other)

    def __radd__(self, other: list) -> list:
        return list(other) + self.views()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, PartitionStates):
            return self.fields == other.fields
        return isinstance(other, list) and self.views() == other

    __hash__ = None  # type: ignore[assignment]  # mutable, like the list it stands for


class PropagatedPartition(_Out):
    topic: str
    partition: int


class IsrPropagation(_Out):
    """ZooKeeper-era: one isr_change_notification znode as the broker wrote it."""

    type: Literal["isr_propagation"] = "isr_propagation"
    cluster: str
    broker: int
    ts: int
    policy: Policy
    partitions: list[PropagatedPartition]


class Alert(_Out):
    """An alert's status change, Alertmanager-compatible (docs/alerts.md)."""

    type: Literal["alert"] = "alert"
    # fingerprint/startsAt(ms)/status/ts(ms): unique per transition or repeat.
    id: str
    ts: int  # the event time of this status change (or repeat)
    labels: dict[str, str]
    annotations: dict[str, str]
    status: Literal["firing", "resolved"]
    startsAt: str
    endsAt: Optional[str] = None
    fingerprint: str

    @property
    def is_repeat(self) -> bool:
        """A firing alert sent again after repeat_interval_ms (not a transition)."""
        _fp, started, status, ts = self.id.split("/")
        return status == "firing" and started != ts


# A dead letter carries at most this much of the original message, so that it
# stays far below a producer's 1 MB limit whatever came in; a longer original
# is cut, with its size and SHA-256 noted.
RAW_MAX_BYTES = 16 * 1024
SOURCE_MAX = 512


class DeadLetter(_Out):
    """An input message that could not be applied, with where it came from."""

    type: Literal["dead_letter"] = "dead_letter"
    reason: str
    reason_class: str
    # Original bytes, decoded as UTF-8 with invalid bytes escaped (the first
    # RAW_MAX_BYTES of them).
    raw: str
    source: str
    offset: int
    raw_truncated: bool = False
    raw_size: Optional[int] = None     # bytes of the original, when cut
    raw_sha256: Optional[str] = None   # of the original, when cut

    @classmethod
    def of(cls, source: str, offset: int, raw: bytes | str | None, reason: str,
           reason_class: str) -> "DeadLetter":
        data = b"" if raw is None else raw.encode("utf-8", "surrogateescape") if isinstance(
            raw, str) else bytes(raw)
        cut: dict[str, Any] = {}  # the raw_* fields, set when raw is cut
        if len(data) > RAW_MAX_BYTES:
            cut = {"raw_truncated": True, "raw_size": len(data),
                   "raw_sha256": hashlib.sha256(data).hexdigest()}
            data = data[:RAW_MAX_BYTES]
        if len(source) > SOURCE_MAX:
            source = source[:SOURCE_MAX - 1] + "…"
        return cls(reason=reason, reason_class=reason_class,
                   raw=data.decode("utf-8", "backslashreplace"), source=source, offset=offset,
                   **cut)


DECISION_TYPES: dict[str, type[_Out]] = {
    "isr_change": IsrChange,
    "partition_state": PartitionState,
    "isr_propagation": IsrPropagation,
    "alert": Alert,
    "dead_letter": DeadLetter,
}


def output_order(d) -> tuple:
    """Canonical order of decisions: the same for every engine and batching."""
    if isinstance(d, IsrChange):
        return (d.ts, d.cluster, d.topic, d.partition, POLICY_ORDER[d.policy], 0, d.seq)
    if isinstance(d, IsrPropagation):
        return (d.ts, d.cluster, "", -1, POLICY_ORDER[d.policy], 1, d.broker)
    if isinstance(d, Alert):
        labels = d.labels
        return (d.ts, labels["cluster"], labels["topic"], int(labels["partition"]),
                POLICY_ORDER[labels["policy"]], 3, d.id)
    return (d.ts, getattr(d, "cluster", ""), getattr(d, "topic", ""),
            getattr(d, "partition", -1), POLICY_ORDER.get(getattr(d, "policy", ""), 9), 2, 0)
