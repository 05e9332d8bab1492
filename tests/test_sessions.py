"""Fetch sessions (isr/engine/sessions.py): a `fetch_session` event decides
exactly what its expansion into per-partition fetches decides, under every
policy, whatever the batches and restarts; and session anomalies are handled
as Kafka's leader does."""

from __future__ import annotations

from collections import Counter

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from helpers import T0
from strategies import session_streams

from isr.config import MonitorSettings
from isr.contract import Rejection, validate
from isr.contract.fast import STRUCTS
from isr.contract.policies import POLICIES
from isr.engine import snapshot
from isr.engine.local import LocalEngine

FETCH = STRUCTS["fetch"]


def _monitor() -> MonitorSettings:
    return MonitorSettings(policy=POLICIES, replica_lag_time_max_ms=10000, propagation="zk")


class Expanding:
    """The reference: today's model fed with one per-partition fetch for every
    partition of the session at every session fetch (KIP-227: the leader
    evaluates each cached partition), written out plainly."""

    def __init__(self, monitor: MonitorSettings) -> None:
        self.engine = LocalEngine(monitor)
        self.sessions: dict[tuple, dict] = {}  # (leader, replica, id) -> {"epoch", "cached"}
        self.anomalies: Counter = Counter()

    def apply(self, ev) -> None:
        if ev.type != "fetch_session":
            self.engine.apply(ev)
            return
        self.engine.max_ts = max(self.engine.max_ts, ev.ts)  # the stream's time, too
        key = (ev.leader, ev.replica, ev.session_id)
        s = self.sessions.get(key)
        if ev.full:
            self.sessions.pop(key, None)
            s = None
        elif s is None:
            opened = self.sessions.get((ev.leader, ev.replica, 0))
            if opened is not None and opened["epoch"] == ev.session_epoch:
                s = self.sessions[key] = self.sessions.pop((ev.leader, ev.replica, 0))
            else:
                self.anomalies["unknown_session"] += 1
        elif s["epoch"] != ev.session_epoch:
            self.anomalies["session_epoch_skipped"] += 1
            s = None
        if s is None and ev.session_epoch != -1:
            s = self.sessions[key] = {"epoch": 0, "cached": {}}
        if s is not None:
            s["epoch"] = ev.session_epoch + 1
            for f in ev.forgotten:
                s["cached"].pop((f.topic, f.partition), None)
        listed = set()
        for p in ev.partitions:
            listed.add((p.topic, p.partition))
            if s is not None:
                s["cached"][(p.topic, p.partition)] = (p.leader_epoch, p.fetch_offset)
            self._fetch(ev, p.topic, p.partition, p.leader_epoch, p.fetch_offset, p.leader_leo)
        if s is not None:
            for (topic, partition), (epoch, offset) in s["cached"].items():
                if (topic, partition) not in listed:
                    self._fetch(ev, topic, partition, epoch, offset, None)

    def _fetch(self, ev, topic, partition, epoch, offset, leader_leo) -> None:
        engine = self.engine
        if leader_leo is None:
            m = engine.partitions[engine.policies[0]].get((ev.cluster, topic, partition))
            leader_leo = max(offset, -1 if m is None else m.leader_leo)
        outcome = engine.apply(FETCH(
            v=1, cluster=ev.cluster, ts=ev.ts, topic=topic, partition=partition,
            leader=ev.leader, leader_epoch=epoch, replica=ev.replica, fetch_offset=offset,
            leader_leo=leader_leo, received_ts=ev.received_ts, broker_epoch=ev.broker_epoch))
        if outcome.status == "rejected":
            engine.ignored["session_partition_rejected"] += 1


def _outputs(engine: LocalEngine, decisions: list) -> tuple:
    return (sorted(d.model_dump_json() for d in decisions),
            [s.model_dump_json() for s in engine.states()],
            {k: v for k, v in engine.ignored.items() if v})


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(session_streams(), st.lists(st.integers(0, 50), max_size=4))
def test_session_fetches_decide_as_their_expansion_across_batches_and_restarts(events, cuts):
    monitor = _monitor()
    ref = Expanding(monitor)
    for ev in events:
        ref.apply(ev)
    ref.engine.finish()

    engine = LocalEngine(monitor)
    decisions: list = []
    start = 0
    for end in sorted({min(c, len(events)) for c in cuts}) + [len(events)]:
        for seq in range(start, end):
            engine.submit(events[seq], seq)
        engine.advance_watermark()
        decisions += engine.take_decisions()
        blob = snapshot.snapshot(engine)
        engine = snapshot.restore(monitor, blob)
        assert snapshot.snapshot(engine) == blob  # sessions and positions round-trip
        start = end
    engine.finish()
    decisions += engine.take_decisions()

    assert _outputs(engine, decisions) == _outputs(ref.engine, ref.engine.decisions)
    assert engine.session_driver.sessions.anomalies == ref.anomalies
