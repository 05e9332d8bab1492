"""An engine's whole state as bytes and back: what the Spark job keeps in its
state store per bucket, and what the restore tests round-trip.

Everything needed to continue exactly where the engine stands is in it:
every partition's model, the broker registries, the events still queued for
the watermark, and the state of each listener that keeps some (alerts,
propagation), under the listener's name. Decisions already taken are not.
"""

from __future__ import annotations

from collections import Counter
from itertools import islice
from typing import Any, Callable, Optional, Union

import orjson

from isr.config import MonitorSettings
from isr.contract.decode import Rejection, decode
from isr.contract.fast import encode
from isr.engine.local import LocalEngine
from isr.model.brokers import Brokers
from isr.model.partition import PartitionModel

# 3: listeners' states by name; 4: a delta's sessions as patches, a
# session's log as columns (isr/model/session.py, log_columns); 5: a delta's
# partition_state throttle lists the partitions that became pending and
# those no longer pending, not every pending one (isr/stream/throttle.py,
# state_delta; an older reader refuses it with one line).
VERSION = 5
# The versions restore and apply_delta read: 3 is a checkpoint of state
# layout 1 or 2, migrated (isr/stream/statelog.py): its sessions' logs are
# one list per entry, and its deltas hold each changed session whole.
READS = (3, 4, 5)


# A snapshot or a delta as restore and apply_delta take it: its JSON bytes,
# or the dict fold_log decoded them into.
State = Union[bytes, dict]


class StateVersionError(ValueError):
    pass


def _jsonable(origin: Any) -> Any:
    """An origin (source, offset, raw) with its raw bytes as text: the raw
    message of a queued event decoded, so it is UTF-8."""
    if isinstance(origin, (tuple, list)):
        return [o.decode("utf-8", "backslashreplace") if isinstance(o, bytes) else o
                for o in origin]
    return origin


def _raw(event) -> bytes:
    """A queued event as JSON bytes: as it arrived if still raw (submit_raw)."""
    return event if event.__class__ is bytes else encode(event)


def snapshot(engine: LocalEngine, with_queue: bool = True) -> bytes:
    """Origins of queued events must be JSON-able (or tuples with bytes).
    `with_queue=False`: without the events queued for the watermark, which
    the caller keeps itself (`queued_raw`), in a form cheaper than JSON."""
    seq = engine.sequencer
    queued = [[ts, s, _raw(ev).decode(), _jsonable(origin)]
              for ts, s, ev, origin in seq.queued] if with_queue else []
    return _with_partitions({"v": VERSION, "policies": engine.policies},
                            {p: parts.values() for p, parts in engine.partitions.items()}, {
        "brokers": {c: b.to_list() for c, b in engine.brokers.items()},
        "sequencer": [seq.max_ts, queued, seq.external_watermark],
        "max_ts": engine.max_ts,
        "ignored": dict(engine.ignored),
        "listeners": {l.name: l.to_state() for l in engine.listeners if l.name},
        "sessions": engine.session_driver.to_list(),
    })


# Models per piece of a snapshot's or delta's "partitions" (_with_partitions).
ROWS_PER_PIECE = 2048


def _with_partitions(head: dict, models: dict, tail: dict) -> bytes:
    """orjson.dumps({**head, "partitions": {policy: [m.to_list() for m in
    models[policy]]}, **tail}), byte for byte, without every model's row
    as a Python list at once: at 50,000 partitions a bucket's rows as lists
    took ~90 MB for a 31 MB snapshot, the largest transient of a bucket call
    (docs/benchmarks.md, issue 23, branch `enginerss`). The rows are written
    ROWS_PER_PIECE at a time and the pieces joined once (each join or
    concatenation of the whole would be one more copy of it). orjson writes
    a dict as its members in order and a list as its elements,
    comma-separated, without spaces."""
    pieces = [orjson.dumps(head)[:-1], b',"partitions":{']
    for i, (policy, ms) in enumerate(models.items()):
        pieces += [b',' if i else b'', orjson.dumps(policy), b':[']
        it = iter(ms)
        rows = [m.to_list() for m in islice(it, ROWS_PER_PIECE)]
        first = True
        while rows:
            pieces += [b'' if first else b',', orjson.dumps(rows)[1:-1]]
            rows, first = [m.to_list() for m in islice(it, ROWS_PER_PIECE)], False
        pieces.append(b']')
    pieces += [b'},', orjson.dumps(tail)[1:]]
    return b"".join(pieces)


def queued_raw(engine: LocalEngine) -> list[tuple]:
    """The events queued for the watermark as (ts, seq, raw JSON bytes,
    origin): what `snapshot(with_queue=False)` leaves out, to be given back
    to `restore(queued=...)`. Raw events stay as they arrived."""
    return [(ts, s, _raw(ev), origin) for ts, s, ev, origin in engine.sequencer.queued]


def restore(monitor: MonitorSettings, blob: State,
            on_reject: Optional[Callable[[Any, str], None]] = None,
            external_watermark: bool = False, listeners=(),
            queued: Optional[list[tuple]] = None, deadline_index: bool = True) -> LocalEngine:
    """`queued`: the queue kept apart (`queued_raw`), if the snapshot was
    taken without it; its events are decoded when released. `blob` may also
    be a snapshot already decoded (`fold_log`).
    `deadline_index`: as LocalEngine's."""
    data = _decoded(blob)
    if data.get("v") not in READS:
        raise StateVersionError(
            f"engine state version {data.get('v')} is not one of {list(READS)}: it was "
            "written by another version of isr-monitor")
    if list(monitor.policy) != data["policies"]:
        raise ValueError(f"state was written for policies {data['policies']}, "
                         f"the configuration says {list(monitor.policy)}")
    engine = LocalEngine(monitor, policies=data["policies"], listeners=listeners,
                         on_reject=on_reject, external_watermark=external_watermark,
                         deadline_index=deadline_index)
    for policy, rows in data["partitions"].items():
        rules = engine.rules[policy]
        models = (PartitionModel.from_list(rules, row) for row in rows)
        engine.partitions[policy] = {m.key: m for m in models}
    engine.brokers = {c: Brokers.from_list(rows) for c, rows in data["brokers"].items()}
    max_ts, in_snapshot, external = data["sequencer"]
    engine.sequencer.max_ts = max_ts
    engine.sequencer.external_watermark = external
    for ts, seq, raw, origin in in_snapshot:
        event = decode(raw)
        if isinstance(event, Rejection):  # only if the contract itself changed
            raise StateVersionError(f"a queued event no longer validates: {event.reason}")
        engine.sequencer.queued.append((ts, seq, event, origin))
    if queued is not None:
        engine.sequencer.queued.extend(queued)
    engine.max_ts = data["max_ts"]
    engine.ignored = Counter(data["ignored"])
    if "sessions" in data:  # absent from states written before fetch sessions
        engine.session_driver.from_list(data["sessions"], columns=data["v"] >= 4)
    _hand_listeners(engine, data["listeners"], lambda l, s: l.from_state(s))
    engine.rebuild_index()  # now: see its docstring
    return engine


# ------------------------------------------------------------ deltas
# What changed since the last delta (or since the engine was restored, or
# taken whole): the models, sessions and listener state that moved, and the
# engine's small global state. The Spark job logs one per micro-batch after
# its bucket's snapshot (isr/stream/statelog.py). Models and watches are
# never removed, so a delta only adds or replaces them; sessions can close,
# so a delta lists the live ones. Every session fetches in every batch, so
# a changed session is written as what changed in it (Session.to_patch: its
# fetches logged since and the cached entries set since), not whole: whole
# it is ~1.9 MB of JSON per 10,000 partitions per delta, mostly its log
# (docs/benchmarks.md, issue 23, branch `sessave`).

def delta(engine: LocalEngine) -> bytes:
    """The changes since the last call, as JSON (the queue is not in it)."""
    seq = engine.sequencer
    sessions = engine.session_driver
    models: dict[str, list] = {}
    for m in engine.take_dirty():
        models.setdefault(m.rules.policy, []).append(m)
    s = sessions.sessions
    whole, patches = sessions.take_changes()
    return _with_partitions({"v": VERSION}, models, {
        "brokers": {c: b.to_list() for c, b in engine.brokers.items()},
        "sequencer": [seq.max_ts, seq.external_watermark],
        "max_ts": engine.max_ts,
        "ignored": dict(engine.ignored),
        "listeners": {l.name: l.state_delta() for l in engine.listeners if l.name},
        "sessions": [whole, patches, sorted(s.by_sid),
                     [[c, l, r, sid] for (c, l, r), sid in s.unbound.items()],
                     s.next_sid, dict(s.anomalies), s.order],
    })


def clear_changes(engine: LocalEngine) -> None:
    """Forget what changed so far: the next delta starts from here."""
    engine.take_dirty()
    engine.session_driver.forget_changes()
    for listener in engine.listeners:
        if listener.name:
            listener.clear_state_delta()


def fold_log(blob: bytes, deltas: list) -> tuple[dict, list]:
    """A snapshot and the deltas logged after it, decoded, with the deltas'
    models folded into the snapshot's rows: restore(folded) then each
    apply_delta(folded delta) builds each model once, from its last row,
    where restore then apply_delta would build a changed model once per
    delta too. The same engine either way: a delta's model takes the place
    of the one it replaces in the visiting order (LocalEngine.adopt), or
    comes last if new, which is what a row folded in place (or added last)
    gives; and every model is indexed afresh at the restore either way."""
    data = orjson.loads(blob)
    decoded = [orjson.loads(entry) for entry in deltas]
    if data.get("v") not in READS or any(d.get("v") not in READS for d in decoded):
        return data, decoded  # restore or apply_delta says which version it is
    partitions = data["partitions"]
    for d in decoded:
        for policy in [p for p in d["partitions"] if p in partitions]:
            rows = d["partitions"].pop(policy)  # a policy not in the snapshot stays: refused
            held = partitions[policy]
            if not isinstance(held, dict):
                # Keyed as PartitionModel.key: (cluster, topic, partition), the
                # row's fields 1 to 3 (PartitionModel.to_list).
                held = partitions[policy] = {(r[1], r[2], r[3]): r for r in held}
            for r in rows:
                held[(r[1], r[2], r[3])] = r
    for policy, held in partitions.items():
        if isinstance(held, dict):
            partitions[policy] = list(held.values())
    return data, decoded


def apply_delta(engine: LocalEngine, blob: State) -> None:
    """Apply one `delta` (or one decoded by `fold_log`) to an engine
    restored from the snapshot before it."""
    from isr.model.session import Session

    data = _decoded(blob)
    if data.get("v") not in READS:
        raise StateVersionError(
            f"engine state version {data.get('v')} is not one of {list(READS)}")
    for policy, rows in data["partitions"].items():
        rules, parts = engine.rules[policy], engine.partitions[policy]
        for row in rows:
            m = PartitionModel.from_list(rules, row)
            engine.adopt(m, parts.get(m.key))
            parts[m.key] = m
    engine.brokers = {c: Brokers.from_list(rows) for c, rows in data["brokers"].items()}
    seq = engine.sequencer
    seq.max_ts, seq.external_watermark = data["sequencer"]
    engine.max_ts = data["max_ts"]
    engine.ignored = Counter(data["ignored"])
    if data["v"] == 3:  # every changed session whole
        whole, live, unbound, next_sid, anomalies, order = data["sessions"]
        patches = []
    else:
        whole, patches, live, unbound, next_sid, anomalies, order = data["sessions"]
    S = engine.session_driver.sessions
    for row in whole:
        new = Session.from_list(row, columns=data["v"] >= 4)
        old = S.by_sid.get(new.sid)
        if old is not None:
            _unindex(S, old)
        S.by_sid[new.sid] = new
        S.by_id[(new.cluster, new.leader, new.replica, new.session_id)] = new
    for patch in patches:
        session = S.by_sid[patch[0]]
        if session.session_id != patch[1]:  # the id a full request's answer gave it
            _unindex(S, session)
            session.session_id = patch[1]
            S.by_id[(session.cluster, session.leader, session.replica, patch[1])] = session
        session.apply_patch(patch)
    alive = set(live)
    for sid in [sid for sid in S.by_sid if sid not in alive]:
        _unindex(S, S.by_sid.pop(sid))
    # Each session's last fetch, as SessionDriver.from_list finds it after a snapshot.
    engine.session_driver.last = {s.sid: s.log[-1] for s in S.by_sid.values() if s.log}
    S.unbound = {(c, l, r): sid for c, l, r, sid in unbound}
    S.next_sid, S.anomalies, S.order = next_sid, Counter(anomalies), order
    _hand_listeners(engine, data["listeners"], lambda l, s: l.apply_state_delta(s))
    engine._restored()  # the checks the delta's batch ran


def _decoded(blob: State) -> dict:
    """A snapshot or delta as JSON bytes, or one already decoded (fold_log)."""
    return blob if isinstance(blob, dict) else orjson.loads(blob)


def _hand_listeners(engine: LocalEngine, states: dict, give) -> None:
    """Each listener's saved state to it; a state no listener takes is kept
    in `engine.unclaimed` (a stage that moved: the caller hands it on)."""
    names = set()
    for listener in engine.listeners:
        if listener.name in states:
            give(listener, states[listener.name])
        names.add(listener.name)
    engine.unclaimed.update((n, s) for n, s in states.items() if n not in names)


def _unindex(S, session) -> None:
    """Drop `session` from S.by_id unless another session holds its key now."""
    key = (session.cluster, session.leader, session.replica, session.session_id)
    if S.by_id.get(key) is session:
        del S.by_id[key]
