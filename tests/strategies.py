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
    parsed = []
    for e in events:
        e["v"] = 1
        ev = validate(e)
        assert not isinstance(ev, Rejection), (ev.reason, e)
        parsed.append(ev)
    return parsed


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8),
                                                                      children, max_size=6),
    max_leaves=20)
