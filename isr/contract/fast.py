"""The decoder's fast path: msgspec structs generated from the contract's
pydantic models, with the same fields, bounds and cross-field checks.

msgspec parses and validates a fetch event in about a quarter of pydantic's
time (docs/benchmarks.md, "Decoding"), and its structs are what the engine
applies: plain attributes, no per-event dict. pydantic stays the authority:
whatever the structs refuse is decoded again by pydantic, which words the
reason (decode.py), and a property test holds the two to the same verdict and
the same values (tests/test_contract.py).
"""

from __future__ import annotations

import types
from typing import Annotated, Any, Literal, Sequence, Union, get_args, get_origin

import annotated_types as at
import msgspec
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from isr.contract.events import (
    EVENT_TYPES,
    _FollowerEvent,
    FetchSession,
    Leader,
    impossible_fetch_session,
    impossible_follower_event,
    inconsistent_assignment,
)

_BOUNDS = {at.Ge: "ge", at.Le: "le", at.Gt: "gt", at.Lt: "lt", at.MinLen: "min_length",
           at.MaxLen: "max_length"}


def _meta(metadata: Sequence[Any]) -> dict[str, Any]:
    kw: dict[str, Any] = {}
    for m in metadata:
        if isinstance(m, FieldInfo):
            kw.update(_meta(m.metadata))
        elif type(m) in _BOUNDS:
            name = _BOUNDS[type(m)]
            kw[name] = getattr(m, name)
        # pydantic's Strict: msgspec is strict already (no "5" for 5, no 5.0, no true)
    return kw


def _translate(annotation: Any, metadata: Sequence[Any] = ()) -> Any:
    """A pydantic field type (with its constraints) as a msgspec type."""
    origin = get_origin(annotation)
    if origin is Annotated:
        inner, *extra = get_args(annotation)
        return _translate(inner, list(metadata) + extra)
    if origin in (Union, types.UnionType):
        args = [_translate(a) for a in get_args(annotation)]
        translated: Any = Union[tuple(args)]
    elif origin is list:
        (item,) = get_args(annotation)
        translated = list[_translate(item)]  # type: ignore[misc]  # a type made at run time
    elif origin is Literal or annotation in (int, str, bool, type(None)):
        translated = annotation
    elif isinstance(annotation, type) and issubclass(annotation, BaseModel):
        translated = _nested(annotation)  # a list item (a session's partitions)
    else:
        raise TypeError(f"the fast decoder has no translation for {annotation!r}")
    kw = _meta(metadata)
    return Annotated[translated, msgspec.Meta(**kw)] if kw else translated


_NESTED: dict[type, type] = {}


def _nested(model) -> type:
    """A nested model (no tag, no checks of its own) as a struct."""
    struct = _NESTED.get(model)
    if struct is None:
        fields = [(name, _translate(info.annotation, info.metadata),
                   msgspec.NODEFAULT if info.is_required() else info.default)
                  for name, info in model.model_fields.items()]
        struct = _NESTED[model] = msgspec.defstruct(
            model.__name__, fields, kw_only=True, frozen=True, gc=False, module=__name__,
            forbid_unknown_fields=False)
    return struct


def _checked(check):
    def __post_init__(self) -> None:
        problem = check(self)
        if problem:
            raise ValueError(problem)
    return __post_init__


def _fetch_ts(self) -> int:
    """Kafka's fetchTimeMs: when the request arrived (docs/rules.md, On fetch)."""
    received_ts = self.received_ts
    return self.ts if received_ts is None else received_ts


def _struct(kind: str, model) -> type:
    fields = []
    for name, info in model.model_fields.items():
        if name == "type":
            continue  # the tag
        default = msgspec.NODEFAULT if info.is_required() else info.default
        fields.append((name, _translate(info.annotation, info.metadata), default))
    namespace: dict[str, Any] = {"type": kind}  # a class attribute, as the pydantic field
    if issubclass(model, _FollowerEvent):
        namespace["__post_init__"] = _checked(impossible_follower_event)
    if issubclass(model, FetchSession):
        namespace["__post_init__"] = _checked(impossible_fetch_session)
    if issubclass(model, Leader):
        namespace["__post_init__"] = _checked(inconsistent_assignment)
    if "received_ts" in model.model_fields:
        namespace["fetch_ts"] = property(_fetch_ts)
    # frozen: events are facts; gc=False: the engine holds many at once and
    # none of them can be part of a reference cycle.
    return msgspec.defstruct(model.__name__, fields, tag=kind, tag_field="type", kw_only=True,
                             frozen=True, gc=False, namespace=namespace,
                             module=__name__)


STRUCTS: dict[str, type] = {kind: _struct(kind, model) for kind, model in EVENT_TYPES.items()}
Event = Union[tuple(STRUCTS.values())]  # type: ignore[valid-type]
DECODER = msgspec.json.Decoder(Event)
ENCODER = msgspec.json.Encoder()


def from_builtins(obj: Any):
    """A struct from an already-parsed JSON value (raises msgspec.ValidationError)."""
    return msgspec.convert(obj, Event, strict=True)


def encode(event) -> bytes:
    """An event as contract JSON (either form: struct or pydantic model)."""
    if isinstance(event, msgspec.Struct):
        return ENCODER.encode(event)
    return event.model_dump_json(exclude_none=False).encode()
