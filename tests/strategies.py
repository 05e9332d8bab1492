"""hypothesis strategies shared by the property tests: plausible event
streams, and arbitrary JSON."""

from __future__ import annotations

from hypothesis import strategies as st
from helpers import T0

from isr.contract import Rejection, validate

BROKERS = [1, 2, 3, 4]


@st.composite
def event_streams(draw, max_events: int = 60, jitter_ms: int = 0):
    """A plausible stream for two partitions and four brokers: leader changes,
    reassignments, appends, fetches (caught up, behind, truncated, reporting a
    leader LEO no append did), KIP-501 fetch starts, broker lifecycle. Valid by the contract; not always sensible
    to the model (stale epochs, unknown replicas), which is the point."""
    n = draw(st.integers(1, max_events))
    t = 0
    epoch = {0: 1, 1: 1}
    lead = {0: 1, 1: 2}
    replicas = {0: [1, 2, 3], 1: [2, 3, 4]}
    leo = {0: 0, 1: 0}
    events = []
    for p in (0, 1):
        if draw(st.booleans()):  # otherwise bootstrapped from its first event
            events.append(dict(type="leader", ts=T0, topic="t", partition=p, leader=lead[p],
                               leader_epoch=epoch[p], replicas=replicas[p],
                               isr=replicas[p], leader_epoch_start_offset=0))
    for _ in range(n):
        t += draw(st.sampled_from([0, 1, 100, 500, 2000, 7000, 16000, 31000]))
        ts = T0 + t + draw(st.integers(0, jitter_ms))
        p = draw(st.sampled_from([0, 1]))
        kind = draw(st.sampled_from(
            ["fetch"] * 6 + ["append"] * 3 + ["fetch_start", "leader", "reassign", "broker",
                                              "isr", "stale"]))
        base = dict(ts=ts, topic="t", partition=p, leader=lead[p], leader_epoch=epoch[p])
        followers = [r for r in replicas[p] if r != lead[p]]
        if kind == "append":
            leo[p] += draw(st.integers(0, 50))
            events.append(dict(base, type="append", leader_leo=leo[p]))
        elif kind in ("fetch", "fetch_start") and followers:
            if draw(st.integers(0, 5)) == 0:  # the leader appended, unseen: the fetch tells
                leo[p] += draw(st.integers(1, 30))
            offset = draw(st.integers(0, leo[p]))
            extra = {}
            if kind == "fetch":
                extra["received_ts"] = ts - draw(st.sampled_from([0, 0, 10, 3000]))
                extra["broker_epoch"] = draw(st.sampled_from([None, -1, 5, 6]))
            events.append(dict(base, type=kind, replica=draw(st.sampled_from(followers)),
                               fetch_offset=offset, leader_leo=leo[p], **extra))
        elif kind == "leader":
            epoch[p] += 1
            lead[p] = draw(st.sampled_from(replicas[p]))
            isr = [r for r in replicas[p] if r == lead[p] or draw(st.booleans())]
            start = leo[p] = max(0, leo[p] - draw(st.integers(0, 20)))
            hw = draw(st.one_of(st.none(), st.integers(0, start)))
            events.append(dict(base, type="leader", leader=lead[p], leader_epoch=epoch[p],
                               replicas=replicas[p], isr=isr, leader_epoch_start_offset=start,
                               hw=hw, min_insync_replicas=draw(st.sampled_from([None, 1, 2, 3]))))
        elif kind == "reassign":
            others = [b for b in BROKERS if b != lead[p]]
            replicas[p] = [lead[p]] + draw(st.lists(st.sampled_from(others), min_size=1,
                                                    max_size=3, unique=True))
            isr = [r for r in replicas[p] if r == lead[p] or draw(st.booleans())]
            events.append(dict(base, type="leader", replicas=replicas[p], isr=isr,
                               leader_epoch_start_offset=leo[p]))
        elif kind == "broker":
            events.append(dict(type="broker", ts=ts, broker=draw(st.sampled_from(BROKERS)),
                               broker_epoch=draw(st.sampled_from([5, 6, -1])),
                               state=draw(st.sampled_from(["registered", "fenced", "unfenced",
                                                           "controlled_shutdown"]))))
        elif kind == "isr":
            events.append(dict(base, type="isr", isr=[lead[p]]))
        elif kind == "stale":
            events.append(dict(base, type="append", leader_epoch=max(0, epoch[p] - 1),
                               leader_leo=leo[p]))
    return validated(events)


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8),
                                                                      children, max_size=6),
    max_leaves=20)


# Fetch sessions: four partitions led by brokers 1 and 2.
SESSION_REPLICAS = {0: [1, 2, 3], 1: [1, 2, 3], 2: [2, 1, 3], 3: [1, 3, 4]}


@st.composite
def session_streams(draw, max_events: int = 50):
    """A stream in which followers fetch through fetch sessions (KIP-227): full
    and incremental requests listing some of their partitions, forgotten
    partitions, sessions opened with id 0, and the anomalies a request log can
    show (an unknown session id, a skipped epoch); among appends, per-partition
    fetches, leader changes and broker events. Time steps reach past the lag
    limit, so ISRs shrink and expand. Events in time order."""
    n = draw(st.integers(1, max_events))
    t = 0
    lead = {0: 1, 1: 1, 2: 2, 3: 1}
    epoch = {p: 1 for p in SESSION_REPLICAS}
    leo = {p: 0 for p in SESSION_REPLICAS}
    events = [dict(type="leader", ts=T0, topic="t", partition=p, leader=lead[p],
                   leader_epoch=1, replicas=r, isr=r, leader_epoch_start_offset=0)
              for p, r in SESSION_REPLICAS.items() if draw(st.booleans())]
    sessions: dict[tuple, list] = {}  # (leader, replica) -> [id, next epoch, cached]
    next_id = 100
    parts = sorted(SESSION_REPLICAS)
    for _ in range(n):
        t += draw(st.sampled_from([0, 1, 100, 500, 500, 500, 2000, 7000, 16000, 31000]))
        ts = T0 + t
        kind = draw(st.sampled_from(["session"] * 8 + ["append"] * 4 +
                                    ["fetch", "leader", "broker", "anomaly"]))
        if kind == "append":
            p = draw(st.sampled_from(parts))
            leo[p] += draw(st.integers(0, 50))
            events.append(dict(type="append", ts=ts, topic="t", partition=p, leader=lead[p],
                               leader_epoch=epoch[p], leader_leo=leo[p]))
        elif kind == "fetch":
            p = draw(st.sampled_from(parts))
            followers = [r for r in SESSION_REPLICAS[p] if r != lead[p]]
            events.append(dict(type="fetch", ts=ts, topic="t", partition=p, leader=lead[p],
                               leader_epoch=epoch[p], replica=draw(st.sampled_from(followers)),
                               fetch_offset=draw(st.integers(0, leo[p])), leader_leo=leo[p]))
        elif kind == "leader":
            p = draw(st.sampled_from(parts))
            epoch[p] += 1
            lead[p] = draw(st.sampled_from(SESSION_REPLICAS[p]))
            isr = [r for r in SESSION_REPLICAS[p] if r == lead[p] or draw(st.booleans())]
            events.append(dict(type="leader", ts=ts, topic="t", partition=p, leader=lead[p],
                               leader_epoch=epoch[p], replicas=SESSION_REPLICAS[p], isr=isr,
                               leader_epoch_start_offset=leo[p]))
        elif kind == "broker":
            events.append(dict(type="broker", ts=ts, broker=draw(st.sampled_from(BROKERS)),
                               broker_epoch=draw(st.sampled_from([5, 6])),
                               state=draw(st.sampled_from(["registered", "fenced", "unfenced"]))))
        else:
            leader = draw(st.sampled_from([1, 2]))
            replica = draw(st.sampled_from([r for r in (1, 2, 3, 4) if r != leader]))
            pair = (leader, replica)
            held = sessions.get(pair)
            listed = draw(st.lists(st.sampled_from(parts), unique=True, max_size=3))
            forgotten: list[int] = []
            if kind == "anomaly" and held is not None:
                sid, ep = draw(st.sampled_from([(held[0] + 1000, held[1]), (held[0], held[1] + 2)]))
                full = False
                held[2] = set(listed)  # a new session starts from what it lists
            elif held is None or draw(st.integers(0, 9)) == 0:
                sid, ep, full = draw(st.sampled_from([0, next_id])), 0, True
                sessions[pair] = held = [next_id, 1, set(listed)]
                next_id += 1
            else:
                sid, ep, full = held[0], held[1], False
                forgotten = draw(st.lists(st.sampled_from(sorted(held[2] - set(listed)) or [9]),
                                          unique=True, max_size=2))
                held[2] = (held[2] | set(listed)) - set(forgotten)
            held[1] = ep + 1 if held is not None else 1
            events.append(dict(
                type="fetch_session", ts=ts, leader=leader, replica=replica,
                received_ts=ts - draw(st.sampled_from([0, 0, 10, 3000])),
                broker_epoch=draw(st.sampled_from([None, 5, 5, 6])),
                session_id=sid, session_epoch=ep, full=full,
                forgotten=[dict(topic="t", partition=p) for p in forgotten],
                partitions=[dict(topic="t", partition=p,
                                 leader_epoch=draw(st.sampled_from([epoch[p], epoch[p],
                                                                    max(0, epoch[p] - 1)])),
                                 fetch_offset=draw(st.sampled_from([leo[p], leo[p],
                                                                    max(0, leo[p] - 5)])),
                                 leader_leo=draw(st.sampled_from([None, leo[p]])))
                            for p in listed]))
    return validated(events)


def validated(events: list[dict]) -> list:
    """The drawn events as the contract's, each valid (a strategy's bug otherwise)."""
    parsed = []
    for e in events:
        e["v"] = 1
        ev = validate(e)
        assert not isinstance(ev, Rejection), (ev.reason, e)
        parsed.append(ev)
    return parsed
