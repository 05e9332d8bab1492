"""Bytes in, a validated event or a typed rejection out. Never raises.

The one-line reason is what lands in the dead-letter record, so it names the
field and the value that made the message impossible.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

import orjson
from pydantic import TypeAdapter, ValidationError

from isr.contract.events import EVENT_TYPES, SCHEMA_VERSION, Event, _Event

# Parsing and validating in one pass (pydantic-core) is the fast path for
# valid messages; a failure is re-examined step by step for a clear reason.
_EVENT = TypeAdapter(Event)


@dataclass(frozen=True, slots=True)
class Rejection:
    """An input message the monitor cannot apply, with why (one line)."""

    reason: str
    raw: bytes
    reason_class: str = "invalid"


def _first_error(exc: ValidationError) -> str:
    err = exc.errors(include_url=False)[0]
    loc = ".".join(str(p) for p in err["loc"]) or "event"
    msg = err["msg"].removeprefix("Value error, ")
    if err["type"] == "missing":
        return f"missing field '{loc}'"
    if "input" in err and err["type"] not in ("value_error", "assertion_error"):
        return f"{loc}: {msg} (got {err['input']!r})"
    return f"{loc}: {msg}" if loc != "event" else msg


def decode(raw: bytes | str) -> Union[_Event, Rejection]:
    """Decode one JSON message into an event model, or say why not."""
    data = raw.encode() if isinstance(raw, str) else bytes(raw)
    try:
        return _EVENT.validate_json(data)
    except ValidationError:
        pass
    except Exception:  # noqa: BLE001 - the careful path below says why
        pass
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        return Rejection(f"not JSON: {exc.args[0] if exc.args else exc}", data, "not_json")
    result = validate(obj, data)
    if not isinstance(result, Rejection):  # the two paths disagree: never expected
        return Rejection("rejected by the JSON validator but not by the object validator",
                         data, "invalid")
    return result


def validate(obj: object, data: bytes = b"") -> Union[_Event, Rejection]:
    """Validate an already-parsed JSON value."""
    if not isinstance(obj, dict):
        return Rejection(f"not a JSON object (got {type(obj).__name__})", data, "not_json")
    version = obj.get("v")
    if version != SCHEMA_VERSION or type(version) is not int:
        if version is None:
            return Rejection("missing field 'v'", data, "bad_version")
        return Rejection(f"unsupported schema version {version!r}", data, "bad_version")
    kind = obj.get("type")
    model = EVENT_TYPES.get(kind) if isinstance(kind, str) else None
    if model is None:
        if kind is None:
            return Rejection("missing field 'type'", data, "unknown_type")
        return Rejection(f"unknown type {kind!r}", data, "unknown_type")
    try:
        return model.model_validate(obj)
    except ValidationError as exc:
        return Rejection(f"{kind}: {_first_error(exc)}", data, "invalid")
    except Exception as exc:  # a validator bug must not stop the stream either
        return Rejection(f"{kind}: {type(exc).__name__}: {exc}", data, "invalid")

