"""Bytes in, a validated event or a typed rejection out. Never raises.

Valid messages take the fast path (msgspec structs generated from the
contract, contract/fast.py). A message the fast path refuses is examined
again with pydantic, step by step, for the one-line reason that lands in its
dead-letter record: it names the field and the value that made the message
impossible.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Union

import msgspec
import orjson
from pydantic import ValidationError

from isr.contract import fast
from isr.contract.events import EVENT_TYPES, SCHEMA_VERSION


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


def decode(raw: Union[bytes, str, None]) -> Union[Any, Rejection]:
    """Decode one JSON message into an event, or say why not."""
    data = raw.encode() if isinstance(raw, str) else bytes(raw)
    try:
        return fast.DECODER.decode(data)
    except (msgspec.ValidationError, msgspec.DecodeError):
        pass
    except Exception:  # noqa: BLE001 - never raise: the careful path below says why
        pass
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        return Rejection(f"not JSON: {exc.args[0] if exc.args else exc}", data, "not_json")
    return _careful(obj, data)


def validate(obj: object, data: bytes = b"") -> Union[Any, Rejection]:
    """Validate an already-parsed JSON value."""
    try:
        return fast.from_builtins(obj)
    except Exception:  # noqa: BLE001 - the careful path says why
        return _careful(obj, data)


def _careful(obj: object, data: bytes) -> Union[Any, Rejection]:
    """pydantic's verdict, with its reason. It may accept what the fast path
    refused (JSON both parse differently, e.g. NaN in an ignored field): the
    event then still becomes the fast path's struct."""
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
        event = model.model_validate(obj)
    except ValidationError as exc:
        return Rejection(f"{kind}: {_first_error(exc)}", data, "invalid")
    except Exception as exc:  # a validator bug must not stop the stream either
        return Rejection(f"{kind}: {type(exc).__name__}: {exc}", data, "invalid")
    try:
        return fast.from_builtins(event.model_dump(mode="json"))
    except Exception:  # noqa: BLE001 - the two disagree: keep pydantic's event
        return event
