"""The what-if report (isr/engine/whatif.py): the same events under every policy,
with the alert rules' definitions of flapping, a stalled HW and the leader
alone."""

from __future__ import annotations

import json
import subprocess
import sys

from test_sim import ROOT, run_policies, simulate

from isr.contract.decisions import Alert
from isr.engine.summary import summary as summary_of
from isr.sim.scenario import load_scenario
from isr.engine.whatif import write_report


def test_whatif_report_numbers_and_plot_for_kip501(tmp_path):
    sc = load_scenario("kip501-slow-leader")
    engine, whatif = run_policies(sc, simulate(sc))
    rows = {r.policy: r for r in whatif.rows(summary_of(engine, engine.decisions))}
    # kafka: both followers out from +30 s until served at ~+45.08 s; the
    # leader alone (RF 3) and under min ISR 2 the whole time. Three ISR changes
    # in 5 min is not flapping (IsrFlapping: 4 within 300 s).
    k = rows["kafka"]
    assert (k.shrinks, k.expands, k.flaps) == (1, 2, 0)
    assert 15000 <= k.time_under_min_isr_ms == k.time_leader_alone_ms <= 15200
    # kip501 keeps the ISR, but nothing is served for 25 s: the HW stalls anyway.
    assert rows["kip501"].shrinks == 0 and rows["kip501"].time_under_min_isr_ms == 0
    assert 24000 <= rows["kip501"].hw_stall_ms <= 26000
    # kip16's leader alone moves the HW by itself (acks=all behaves like acks=1).
    assert rows["kip16"].hw_stall_ms < 11000
    written = write_report(whatif, list(rows.values()), str(tmp_path), ["events.jsonl"])
    names = sorted(p.name for p in written)
    assert names == ["isr_size.png", "whatif.json", "whatif.md"]
    assert (tmp_path / "isr_size.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    data = json.loads((tmp_path / "whatif.json").read_text())
    assert data["differing_partitions"] == [["default", "events", 0]]
    assert "| kip501 | 0 | 0 | 0 | 0 | 0.0 | 0.0 |" in (tmp_path / "whatif.md").read_text()


def test_replay_report_from_the_command_line(tmp_path):
    events = tmp_path / "m.jsonl"
    run = lambda *a: subprocess.run([sys.executable, "-m", "isr.cli", *a], cwd=ROOT,  # noqa: E731
                                    capture_output=True, text=True, timeout=180)
    r = run("simulate", "--scenario", "kafka-4485-mirror-maker", "--to", str(events), "-q")
    assert r.returncode == 0, r.stderr
    r = run("replay", str(events), "--policy", "kafka,kip16,legacy,kip501", "--report",
            str(tmp_path / "rep"), "-o", str(tmp_path / "d.jsonl"))
    assert r.returncode == 0, r.stderr
    assert "What-if by policy" in r.stderr and "isr_size.png" in r.stderr
    rows = {p["policy"]: p for p in json.loads((tmp_path / "rep/whatif.json").read_text())
            ["policies"]}
    assert rows["kip16"]["shrinks"] == 1 and rows["kafka"]["shrinks"] == 0
    assert rows["kip16"]["time_leader_alone_ms"] > 30000 and rows["kafka"]["time_leader_alone_ms"] == 0
    r = run("replay", str(events), "--engine", "spark", "--report", str(tmp_path / "x"))
    assert r.returncode == 2 and "--engine local" in r.stderr


def test_flaps_count_the_partitions_that_start_flapping_as_the_alert_rule_says():
    sc = load_scenario("demo")
    engine, whatif = run_policies(sc, simulate(sc))
    rows = {r.policy: r for r in whatif.rows(summary_of(engine, engine.decisions))}
    # Two pauses 40 s apart. Under kafka, payments-0, -1, -4 and -5 lose and
    # regain broker 3 twice (4 changes each), payments-2 shrinks to its leader
    # and takes its two followers back one by one twice (6 changes): all five
    # reach IsrFlapping's 4 changes within 300 s once. Under legacy too: the
    # four partitions broker 3 follows, and payments-2, which broker 3 leads,
    # shrunk to its leader when the leader resumes (docs/rules.md, "A leader
    # that was itself stopped").
    assert rows["kafka"].flaps == 5
    assert rows["legacy"].flaps == 5
    flapping = [d for d in engine.decisions if isinstance(d, Alert) and d.status == "firing"
                and d.labels["alertname"] == "IsrFlapping"]
    assert len([a for a in flapping if a.labels["policy"] == "kafka"]) == rows["kafka"].flaps
    assert whatif.differing_partitions() == [("default", "payments", 2)]


def test_bursty_workload_appends_bursts_inside_their_window():
    sc = load_scenario("follower-gc-pause-short", 30000)
    topic = sc.topics[0].model_copy(update={"workload": sc.topics[0].workload.model_copy(
        update={"kind": "bursty", "burst_every_ms": 10000, "burst_ms": 2000,
                "burst_messages": 500})})
    events = simulate(sc.model_copy(update={"topics": [topic], "faults": []}))
    appends = [e for e in events if e["type"] == "append"]
    steps = [(b["ts"] - sc.start_ts, b["leader_leo"] - a["leader_leo"])
             for a, b in zip(appends, appends[1:])]
    # 500 messages per produce in the last 2 s of every 10 s, 10 otherwise.
    assert {n for t, n in steps if t % 10000 >= 8000} == {500}
    assert {n for t, n in steps if t % 10000 < 8000} == {10}


def test_whatif_plot_draws_min_isr_at_its_value_with_a_label():
    from matplotlib.lines import Line2D
    import matplotlib.pyplot as plt

    from isr.engine.whatif import figure

    sc = load_scenario("kip501-slow-leader")  # payments-like RF 3, min.insync.replicas 2
    engine, whatif = run_policies(sc, simulate(sc))
    fig = figure(whatif, whatif.differing_partitions())
    try:
        ax = fig.axes[0]
        flat = [ln for ln in ax.get_lines() if isinstance(ln, Line2D)
                and len(set(ln.get_ydata())) == 1 and list(ln.get_xdata()) == [0, 1]]
        assert [ln.get_ydata()[0] for ln in flat] == [2]  # axhline: x in axes coords
        labels = [t for t in ax.texts if "min.insync.replicas" in t.get_text()]
        assert [t.get_text() for t in labels] == ["min.insync.replicas = 2"]
        assert labels[0].get_position()[1] == 2  # the label sits on the line
        # The ISR under kafka drops below the line (to the leader alone) and comes back.
        kafka = next(ln for ln in ax.get_lines() if ln.get_label() == "kafka")
        assert min(kafka.get_ydata()) == 1 and max(kafka.get_ydata()) == 3
    finally:
        plt.close(fig)
