"""Bytes in, a validated event or a typed rejection out. Never raises.

Valid messages take the fast path (msgspec structs generated from the
contract, contract/fast.py); `decode_many` takes a whole batch of them,
without a Python step per message. A message the fast path refuses is examined
again with pydantic, step by step, for the one-line reason that lands in its
dead-letter record: it names the field and the value that made the message
impossible.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Optional, Sequence, Union

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


DECODE_CHUNK = 512  # messages per call of decode_many's fast path (a bad one costs its chunk)
REASON_MAX = 500  # characters: a reason names the problem, it does not carry the input
_QUOTED_MAX = 120


def one_line(text: str, limit: int = REASON_MAX) -> str:
    """`text` on one line, at most `limit` characters."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _first_error(exc: ValidationError) -> str:
    err = exc.errors(include_url=False)[0]
    loc = ".".join(str(p) for p in err["loc"]) or "event"
    msg = err["msg"].removeprefix("Value error, ")
    if err["type"] == "missing":
        return f"missing field '{loc}'"
    if "input" in err and err["type"] not in ("value_error", "assertion_error"):
        return f"{loc}: {msg} (got {one_line(repr(err['input']), _QUOTED_MAX)})"
    return f"{loc}: {msg}" if loc != "event" else msg


def decode(raw: Union[bytes, str, None]) -> Union[Any, Rejection]:
    """Decode one JSON message into an event, or say why not."""
    if raw is None:
        return Rejection("null value (a Kafka tombstone)", b"", "not_json")
    data = raw.encode("utf-8", "surrogateescape") if isinstance(raw, str) else bytes(raw)
    try:
        return fast.DECODER.decode(data)
    except (msgspec.ValidationError, msgspec.DecodeError):
        pass
    except Exception:  # noqa: BLE001 - never raise: the careful path below says why
        pass
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        return Rejection(one_line(f"not JSON: {exc.args[0] if exc.args else exc}"), data,
                         "not_json")
    return _careful(obj, data)


def decode_many(raws: Sequence, size: int = DECODE_CHUNK) -> list:
    """`decode` of each message, the valid ones a chunk of `size` at a time
    (`decode_valid`); a chunk with a bad message is decoded again
    in chunks of `DECODE_CHUNK` and, below that, one message at a time, so a
    bad message costs only its own small chunk: the result and every reason
    are exactly `decode`'s."""
    out: list = []
    for start in range(0, len(raws), size):
        chunk = raws[start:start + size]
        events: Optional[Iterable[Any]] = decode_valid(chunk)
        if events is None:
            events = (decode_many(chunk) if size > DECODE_CHUNK
                      else map(_decode_guarded, chunk))
        out.extend(events)
    return out


def decode_valid(raws: Sequence) -> Optional[list]:
    """Each message's event, if every message is a valid event; None if one
    is not (or may not be).

    Each message is decoded on its own by msgspec, called from C for the
    whole chunk (`map`): no Python step per message, and no reasoning about
    where one message ends. (Joining the messages with newlines and
    decoding them in one `decode_lines` call, as before, needed two scans
    of the joined bytes to make sure no value spanned two messages, and
    cost more than it saved: docs/benchmarks.md, issue 23, branch
    `modelcost`.)"""
    try:
        return list(map(fast.DECODER.decode, raws))
    except Exception:  # noqa: BLE001 - one bad message: decode() says which and why
        return None


def _decode_guarded(raw) -> Union[Any, Rejection]:
    try:
        return decode(raw)
    except Exception as exc:  # noqa: BLE001 - decode never raises; if it ever did, one record
        return Rejection(f"undecodable: {type(exc).__name__}", b"", "invalid")


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
        return Rejection(one_line(f"unsupported schema version {version!r}"), data,
                         "bad_version")
    kind = obj.get("type")
    model = EVENT_TYPES.get(kind) if isinstance(kind, str) else None
    if model is None:
        if kind is None:
            return Rejection("missing field 'type'", data, "unknown_type")
        return Rejection(one_line(f"unknown type {kind!r}"), data, "unknown_type")
    try:
        event = model.model_validate(obj)
    except ValidationError as exc:
        return Rejection(one_line(f"{kind}: {_first_error(exc)}"), data, "invalid")
    except Exception as exc:  # a validator bug must not stop the stream either
        return Rejection(one_line(f"{kind}: {type(exc).__name__}: {exc}"), data, "invalid")
    try:
        return fast.from_builtins(event.model_dump(mode="json"))
    except Exception:  # noqa: BLE001 - the two disagree: keep pydantic's event
        return event
