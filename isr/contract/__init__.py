"""The public interface: input events, output decisions, their JSON Schemas."""

from isr.contract.decisions import (
    DECISION_TYPES,
    Alert,
    DeadLetter,
    FollowerView,
    IsrChange,
    IsrPropagation,
    PartitionState,
    ReplicaDetail,
)
from isr.contract.decode import Rejection, decode, validate
from isr.contract.events import (
    EVENT_TYPES,
    Append,
    Broker,
    Event,
    Fetch,
    FetchSession,
    FetchStart,
    Isr,
    Leader,
)


def json_schemas() -> dict[str, dict]:
    """JSON Schema of every input and output record type, by type name."""
    return {
        "input": {name: m.model_json_schema() for name, m in EVENT_TYPES.items()},
        "output": {name: m.model_json_schema() for name, m in DECISION_TYPES.items()},
    }


__all__ = [
    "Alert", "Append", "Broker", "DeadLetter", "DECISION_TYPES", "EVENT_TYPES", "Event",
    "Fetch", "FetchSession", "FetchStart", "FollowerView", "Isr", "IsrChange", "IsrPropagation", "Leader",
    "PartitionState", "Rejection", "ReplicaDetail", "decode", "json_schemas", "validate",
]
