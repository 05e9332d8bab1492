"""The simulator's events rendered as Kafka request logs (bench/render_requestlog.py)
and read back by `isr tap request-log` decide as the events themselves (issue 23:
"the same workload as request logs through the tap").

leader-gc-pause needs both halves right: the renderer must write a session's
unlisted partition that the leader read with records (Kafka's incremental
response includes "partitions with new data"; left out, the tap takes the
stalled leader's followers for caught up and nothing shrinks), and the tap must
write requests in the order of their lines (both followers are taken back at
the same ms; the order decides `isr_after`). slow-follower has size-capped reads
(the tap's LEO lower bounds)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest
from helpers import ROOT, cli

spec = importlib.util.spec_from_file_location("render_requestlog",
                                              ROOT / "bench" / "render_requestlog.py")
render_requestlog = importlib.util.module_from_spec(spec)
spec.loader.exec_module(render_requestlog)

POLICIES = "kafka,kip16,legacy,kip501"


def decisions(stdout: str) -> list[str]:
    """The ISR changes and final states (alerts are left out: their times
    follow the produce times, which a request log does not carry: the tap sees
    an append only at a follower's read)."""
    return [line for line in stdout.splitlines()
            if '"type":"isr_change"' in line or '"type":"partition_state"' in line]


@pytest.mark.parametrize("scenario,changes", [("leader-gc-pause", 12), ("slow-follower", 8)])
def test_rendered_request_logs_through_the_tap_decide_as_the_events(tmp_path, scenario, changes):
    sim = tmp_path / "sim.jsonl"
    r = cli("simulate", "--scenario", scenario, "--to", str(sim), "-q")
    assert r.returncode == 0, r.stderr
    logs = tmp_path / "logs"
    brokers = render_requestlog.render(str(sim), str(logs))
    assert brokers
    taps = [subprocess.Popen([sys.executable, "-m", "isr.cli", "tap", "request-log",
                              str(logs / f"kafka-request-{b}.log"), "--broker", str(b),
                              "--to", str(tmp_path / f"tap-{b}.jsonl"), "--quiet"],
                             cwd=ROOT, stderr=subprocess.PIPE, text=True) for b in brokers]
    for p in taps:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    direct = cli("replay", str(sim), "-q", "--policy", POLICIES)
    tapped = cli("replay", "--merge", str(logs / "metadata-events.jsonl"),
                 *(str(tmp_path / f"tap-{b}.jsonl") for b in brokers), "-q", "--policy", POLICIES)
    assert direct.returncode == 0 and tapped.returncode == 0, direct.stderr + tapped.stderr
    want = decisions(direct.stdout)
    assert sum('"isr_change"' in line for line in want) == changes  # not vacuous
    assert decisions(tapped.stdout) == want
