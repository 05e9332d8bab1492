"""The what-if report: the same events under several ISR policies, side by side.

`isr replay --policy kafka,kip16,legacy,kip501 EVENTS --report DIR` follows
every partition's ISR size, HW and leader LEO under each policy as the replay
applies the events, and writes DIR/whatif.md (a table per policy), DIR/whatif.json
(the same numbers) and DIR/isr_size.png (ISR size over time per policy for the
partitions where the policies disagree).

Definitions (isr/model/health.py; docs/simulator.md repeats them), the same
as the alert rules' with the same settings:
- flaps: the times a partition started flapping (IsrFlapping: at least
  `changes` ISR changes within `window_ms`);
- time under min ISR: ISR size < the partition's effective min.insync.replicas;
- time leader alone: ISR = the leader alone while the partition has more
  than one replica (LeaderOnlyIsr);
- HW stall time: stretches in which the HW stays below the leader's LEO
  without moving for longer than HighWatermarkStalled's `stall_ms`, counted
  whole.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional

from isr.config import MonitorSettings
from isr.contract.decisions import IsrChange
from isr.engine.listeners import Listener
from isr.engine.summary import PolicySummary
from isr.model.health import FlapWindow, HwStall, isr_health

MAX_PLOTTED = 6


class Timeline:
    """One partition under one policy: integrates the time spent in each
    condition, and keeps the ISR-size steps for the plot."""

    __slots__ = ("stall_ms_min", "flap_changes", "flap_window_ms", "last_ts", "isr",
                 "leader", "replicas", "min_isr", "stall", "flapping", "alone_ms", "stall_ms",
                 "flaps", "steps")

    def __init__(self, stall_ms: int, flap_changes: int, flap_window_ms: int) -> None:
        self.stall_ms_min, self.flap_changes, self.flap_window_ms = (
            stall_ms, flap_changes, flap_window_ms)
        self.last_ts: Optional[int] = None
        self.isr: list[int] = []
        self.leader = -1
        self.replicas = self.min_isr = 0
        self.stall = HwStall()
        self.flapping = FlapWindow()
        self.alone_ms = self.stall_ms = self.flaps = 0
        self.steps: list[tuple[int, int]] = []

    def observe(self, ts: int, isr: list[int], leader: int, replicas: int, min_isr: int,
                hw: int, leo: int) -> None:
        self._advance(ts)
        self._stall_ended(self.stall.note(hw, leo, ts))
        if not self.steps or self.steps[-1][1] != len(isr):
            self.steps.append((ts, len(isr)))
        self.isr, self.leader, self.replicas, self.min_isr = isr, leader, replicas, min_isr

    def change(self, ts: int) -> None:
        """An ISR change at ts: a flap starts when it makes the partition flap."""
        window = self.flapping
        window.prune(ts, self.flap_window_ms)
        before, _ = window.count(ts, self.flap_window_ms)
        window.add(ts, self.flap_window_ms)
        if before == self.flap_changes - 1:
            self.flaps += 1

    def finish(self, ts: int) -> None:
        self._advance(ts)
        self._stall_ended(self.stall.stalled_for(ts))

    def _advance(self, ts: int) -> None:
        if self.last_ts is not None and ts > self.last_ts:
            if isr_health(self.isr, self.leader, self.replicas, 0)[2]:  # leader alone
                self.alone_ms += ts - self.last_ts
        if self.last_ts is None or ts > self.last_ts:
            self.last_ts = ts

    def _stall_ended(self, stood_ms: int) -> None:
        if stood_ms > self.stall_ms_min:
            self.stall_ms += stood_ms


@dataclass
class PolicyRow(PolicySummary):
    """The replay summary (counts, time under min ISR from the models) plus
    what only the timelines know."""

    flaps: int = 0
    time_leader_alone_ms: int = 0
    hw_stall_ms: int = 0


class WhatIf(Listener):
    """Follows every partition under every policy as the engine applies the
    events: add it to a LocalEngine's listeners before the replay, call
    finish() after engine.finish()."""

    def __init__(self, monitor: MonitorSettings) -> None:
        self.monitor = monitor
        self.timelines: dict[tuple, Timeline] = {}
        self.end = -1

    def _timeline(self, model) -> Timeline:
        key = (model.rules.policy, model.key)
        tl = self.timelines.get(key)
        if tl is None:
            rule = self.monitor.alerts.rule
            flapping = rule("IsrFlapping", model.topic)
            tl = self.timelines[key] = Timeline(
                rule("HighWatermarkStalled", model.topic).stall_ms, flapping.changes,
                flapping.window_ms)
        return tl

    def on_change(self, model, change: IsrChange, out: list) -> None:
        """ISR changes taken at check instants, by the controller, or by a fetch."""
        tl = self._timeline(model)
        tl.change(change.ts)
        tl.observe(change.ts, change.isr_after, change.leader, tl.replicas, tl.min_isr,
                   change.hw, change.leader_leo)

    def on_event(self, model, event, outcome, out: list) -> None:
        m = model
        self._timeline(m).observe(event.ts, m.isr, m.leader, len(m.replicas), m.min_isr, m.hw,
                                  m.leader_leo)

    def finish(self, end: int) -> None:
        self.end = end
        for tl in self.timelines.values():
            tl.finish(end)

    # ------------------------------------------------------------ results
    def rows(self, summary: list[PolicySummary]) -> list[PolicyRow]:
        rows = {s.policy: PolicyRow(**asdict(s)) for s in summary}
        for (policy, _key), tl in self.timelines.items():
            row = rows[policy]
            row.flaps += tl.flaps
            row.time_leader_alone_ms += tl.alone_ms
            row.hw_stall_ms += tl.stall_ms
        return list(rows.values())

    def differing_partitions(self) -> list[tuple]:
        """Partitions whose ISR size over time is not the same under every policy."""
        by_key: dict[tuple, set] = defaultdict(set)
        for (policy, key), tl in self.timelines.items():
            by_key[key].add(tuple(tl.steps))
        return sorted(k for k, variants in by_key.items() if len(variants) > 1)


def _seconds(ms: int) -> str:
    return f"{ms / 1000:.1f}"


COLUMNS = [("policy", "policy"), ("shrinks", "shrinks"), ("expands", "expands"),
           ("flaps", "flaps"), ("controller_removals", "ctrl removals"),
           ("time_under_min_isr_ms", "under min ISR (s)"),
           ("time_leader_alone_ms", "leader alone (s)"), ("hw_stall_ms", "HW stalled (s)")]


def table_cells(row: PolicyRow) -> list[str]:
    values = asdict(row)
    return [_seconds(values[k]) if k.endswith("_ms") else str(values[k]) for k, _ in COLUMNS]


def write_report(whatif: WhatIf, rows: list[PolicyRow], directory: str,
                 sources: list[str]) -> list[Path]:
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    differing = whatif.differing_partitions()
    flapping = whatif.monitor.alerts.rule("IsrFlapping", "")
    stall_ms = whatif.monitor.alerts.rule("HighWatermarkStalled", "").stall_ms
    md = ["# What-if: the same events under several ISR policies", "",
          f"Input: {', '.join(sources)}; replica.lag.time.max.ms = "
          f"{whatif.monitor.replica_lag_time_max_ms}.", "",
          "| " + " | ".join(h for _, h in COLUMNS) + " |",
          "|" + "---|" * len(COLUMNS)]
    md += ["| " + " | ".join(table_cells(r)) + " |" for r in rows]
    md += ["", f"Partitions whose ISR differs between policies: {len(differing)}"
           + (f" (plotted: the first {min(len(differing), MAX_PLOTTED)}, isr_size.png)"
              if differing else "") + ".", "",
           "Definitions (the alert rules'): flaps count the times a partition started "
           f"flapping (at least {flapping.changes} ISR changes within {flapping.window_ms} ms, "
           "IsrFlapping); HW stalled counts stretches longer than "
           f"{stall_ms} ms with the HW below the leader's LEO and not moving "
           "(HighWatermarkStalled); per-topic rule settings apply per topic."]
    md_path = out / "whatif.md"
    md_path.write_text("\n".join(md) + "\n")
    json_path = out / "whatif.json"
    json_path.write_text(json.dumps({
        "policies": [asdict(r) for r in rows],
        "differing_partitions": [list(k) for k in differing],
        "hw_stall_ms": stall_ms, "flap_changes": flapping.changes,
        "flap_window_ms": flapping.window_ms}, indent=2) + "\n")
    written = [md_path, json_path]
    if differing:
        written.append(plot(whatif, differing[:MAX_PLOTTED], out / "isr_size.png"))
    return written


def plot(whatif: WhatIf, keys: list[tuple], path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig = figure(whatif, keys)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def figure(whatif: WhatIf, keys: list[tuple]):
    """ISR size over time under each policy, one panel per partition, with
    the partition's min.insync.replicas as a labelled dotted line."""
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    policies = whatif.monitor.policy
    start = min(tl.steps[0][0] for tl in whatif.timelines.values() if tl.steps)
    end = whatif.end
    fig, axes = plt.subplots(len(keys), 1, figsize=(10, 2.6 * len(keys)), sharex=True,
                             squeeze=False)
    for ax, key in zip(axes[:, 0], keys):
        top, min_isr = 1, 0
        for i, policy in enumerate(policies):
            tl = whatif.timelines.get((policy, key))
            if tl is None or not tl.steps:
                continue
            xs = [(ts - start) / 1000 for ts, _ in tl.steps] + [(end - start) / 1000]
            ys = [size for _, size in tl.steps] + [tl.steps[-1][1]]
            # A small vertical offset keeps identical lines apart.
            ax.step(xs, [y + 0.04 * i for y in ys], where="post", label=policy, linewidth=1.6)
            top = max(top, max(ys), tl.replicas)
            min_isr = max(min_isr, tl.min_isr)  # the partition's, the same under every policy
        if min_isr:
            _min_isr_line(ax, min_isr)
        cluster, topic, partition = key
        ax.set_title(f"{topic}-{partition}" + ("" if cluster == "default" else f" ({cluster})"),
                     loc="left", fontsize=10)
        ax.set_ylabel("ISR size")
        ax.set_ylim(0.5, top + 0.5)
        ax.set_yticks(range(1, top + 1))
        ax.grid(alpha=0.3)
        ax.legend(loc="lower left", fontsize=8, ncol=len(policies))
    axes[-1, 0].set_xlabel("seconds since the first event")
    fig.suptitle("ISR size over time, by policy (partitions where the policies differ)")
    fig.tight_layout()
    return fig


def _min_isr_line(ax, min_isr: int) -> None:
    """At the min ISR itself: an ISR on the line is enough for acks=all, one
    below it is under min ISR."""
    ax.axhline(min_isr, color="grey", linestyle=":", linewidth=1.0, zorder=1)
    ax.text(1.0, min_isr, f"min.insync.replicas = {min_isr}", transform=ax.get_yaxis_transform(),
            ha="right", va="bottom", fontsize=8, color="dimgrey")
