"""Alert lifecycle in event time (alerts.md).

The engine calls the evaluator around every change of a partition's model:
before an event (time passes up to it), after each ISR change (at the
change's ts, with the change's ISR and HW) and after the event. Between those
calls nothing changes but time, so the evaluator steps exactly to each
instant where a condition, a `for` duration or a repeat interval can change
the outcome. A replay and a stream therefore raise the same alerts at the same
startsAt, whatever the batching.
"""

from __future__ import annotations

import hashlib
from datetime import datetime, timezone

from isr.alerts.rules import PARTITION, Rules, conditions, next_change
from isr.alerts.watch import AtChange, PartitionView, Watch
from isr.config import RULE_DEFAULTS, AlertSettings
from isr.contract.decisions import Alert, IsrChange

SUMMARIES = {
    "UnderMinIsr": "ISR below min.insync.replicas",
    "AtMinIsr": "ISR at min.insync.replicas",
    "LeaderOnlyIsr": "Leader alone in the ISR",
    "UnderReplicated": "Under-replicated partition",
    "IsrFlapping": "ISR flapping",
    "FollowerLagging": "ISR follower lagging",
    "HighWatermarkStalled": "High watermark stalled",
    "SlowLeaderFetch": "Leader slow to serve follower fetches",
    "IsrDivergence": "Cluster ISR differs from the computed ISR",
    "PartitionSilent": "No events for the partition",
}


def iso(ms: int) -> str:
    """Alertmanager's time format (RFC 3339, UTC, milliseconds)."""
    return datetime.fromtimestamp(ms / 1000, timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def fingerprint(labels: dict[str, str]) -> str:
    """Identity = alertname + labels (alerts.md): stable across restarts."""
    text = "\x1f".join(f"{k}={labels[k]}" for k in sorted(labels))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class AlertEvaluator:
    def __init__(self, cfg: AlertSettings, replica_lag_time_max_ms: int) -> None:
        self.cfg = cfg
        self.lag_max_ms = replica_lag_time_max_ms
        self._rules: dict[str, Rules] = {}

    def rules(self, topic: str) -> Rules:
        rules = self._rules.get(topic)
        if rules is None:
            rules = self._rules[topic] = {n: self.cfg.rule(n, topic) for n in RULE_DEFAULTS}
        return rules

    # ------------------------------------------------------------ entry points
    def before_event(self, w: Watch, model: PartitionView, ts: int, out: list) -> None:
        self.advance(w, model, ts, False, out)

    def on_change(self, w: Watch, model: PartitionView, d: IsrChange, out: list) -> None:
        self.advance(w, AtChange(model, d.isr_before, w.hw_seen), d.ts, False, out)
        w.changes.append(d.ts)
        w.note_hw(d.hw, d.ts)
        self._step(w, AtChange(model, d.isr_after, d.hw), d.ts, out)

    def after_event(self, w: Watch, model: PartitionView, event, out: list) -> None:
        ts, kind = event.ts, event.type
        w.last_event_ts = ts
        if kind == "fetch":
            w.served_ms[event.replica] = ts - event.fetch_ts
            w.pending.pop(event.replica, None)
        elif kind == "fetch_start":
            w.pending.setdefault(event.replica, ts)
        elif kind == "leader":
            w.served_ms.clear()
            w.pending.clear()
            w.reported = None  # the new epoch's committed ISR is not known yet
        elif kind == "isr":
            w.reported = list(event.isr)
        w.note_hw(model.hw, ts)
        self._step(w, model, ts, out)

    def advance(self, w: Watch, view: PartitionView, until: int, inclusive: bool,
                out: list) -> None:
        """Step through every instant before `until` (or at it) where something is due."""
        rules = self.rules(w.topic)
        while True:
            due = self._next_due(w, view, rules)
            if due is None or due > until or (due == until and not inclusive):
                return
            self._step(w, view, due, out)

    # ------------------------------------------------------------ lifecycle
    def _next_due(self, w: Watch, view: PartitionView, rules: Rules):
        due = next_change(w, view, w.t, rules, self.lag_max_ms)
        repeat = self.cfg.repeat_interval_ms
        for (name, _r), (since, fired, sent) in w.alerts.items():
            t = since + rules[name].for_ms if fired < 0 else sent + repeat
            if t > w.t and (due is None or t < due):
                due = t
        return due

    def _step(self, w: Watch, view: PartitionView, T: int, out: list) -> None:
        rules = self.rules(w.topic)
        window = rules["IsrFlapping"].window_ms
        if w.changes and w.changes[0] <= T - window:
            w.changes = [t for t in w.changes if t > T - window]
        holding = conditions(w, view, T, rules, self.lag_max_ms)
        repeat = self.cfg.repeat_interval_ms
        for key, description in holding.items():
            state = w.alerts.get(key)
            if state is None:
                state = w.alerts[key] = [T, -1, -1]
            since, fired, sent = state
            if fired < 0:
                if T >= since + rules[key[0]].for_ms:
                    state[1] = state[2] = T
                    out.append(self._record(w, key, rules, "firing", T, T, description))
            elif T >= sent + repeat:
                state[2] = T
                out.append(self._record(w, key, rules, "firing", fired, T, description))
        for key in [k for k in w.alerts if k not in holding]:
            since, fired, _sent = w.alerts.pop(key)
            if fired >= 0:
                out.append(self._record(w, key, rules, "resolved", fired, T,
                                        "the condition no longer holds"))
        w.t = T

    def _record(self, w: Watch, key: tuple[str, int], rules: Rules, status: str,
                started: int, T: int, description: str) -> Alert:
        name, replica = key
        labels = {"alertname": name, "severity": rules[name].severity, "cluster": w.cluster,
                  "topic": w.topic, "partition": str(w.partition), "policy": w.policy}
        if replica != PARTITION:
            labels["replica"] = str(replica)
        fp = fingerprint(labels)
        return Alert(
            id=f"{fp}/{started}/{status}/{T}", ts=T, labels=labels,
            annotations={"summary": f"{SUMMARIES[name]}: {w.topic}-{w.partition}",
                         "description": description},
            status=status, startsAt=iso(started),
            endsAt=iso(T) if status == "resolved" else None, fingerprint=fp)
