"""Request logs through `isr tap request-log --to kafka://` into `isr run`
(issue 23, "the same workload as request logs through the tap into the
job"): each broker's finished log tapped into a topic of its own on the real
cluster, the leader and broker events (what `isr tap metadata` supplies) into
another, and the job reads all of them in several micro-batches. Its ISR
changes are `isr replay`'s of the simulator's events and of the input topics'
records merged by ts (`isr replay --merge`).

broker-fencing (3 leaders, 12 ISR changes under the four policies) decides
on the order of the tap's records: swapping the fetch sessions of two
followers that one leader completed in the same millisecond (one routing
key, `leader/<id>`, so one input partition) changes its ISR changes' records
(checked with `isr replay --merge`); a record lost or reordered between the
tap and the job changes a decision.

Reading a backfill in slices needs the Python source (the default), which
holds the watermark back for a topic not read to its end (docs/tap.md)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import uuid

import pytest
from helpers import ROOT, cli
from workload import query_settings

from isr.config import load_settings
from isr.sinks.kafka import read_to_end
from isr.tap.output import Sink

pytestmark = pytest.mark.kafka
POLICIES = ["kafka", "kip16", "legacy", "kip501"]
LATENESS_MS = 2000
SCENARIO, CHANGES = "broker-fencing", 12  # 3 leaders: 3 request logs, 3 taps

spec = importlib.util.spec_from_file_location("render_requestlog",
                                              ROOT / "bench" / "render_requestlog.py")
render_requestlog = importlib.util.module_from_spec(spec)
spec.loader.exec_module(render_requestlog)


def records(kafka, topic: str) -> list[list[bytes]]:
    """Each partition's record values, in offset order."""
    from confluent_kafka.admin import AdminClient

    listed = AdminClient({"bootstrap.servers": kafka.bootstrap}).list_topics(topic, timeout=10)
    return [[m.value() for m in read_to_end({"bootstrap.servers": kafka.bootstrap},
                                            {(topic, p): 0})]
            for p in sorted(listed.topics[topic].partitions)]


def changes_of(lines) -> list[dict]:
    return sorted((d for d in map(json.loads, lines) if d.get("type") == "isr_change"),
                  key=lambda d: d["id"])


def test_request_logs_tapped_into_kafka_decide_in_isr_run_as_replay(kafka, tmp_path):
    sim = tmp_path / "sim.jsonl"
    r = cli("simulate", "--scenario", SCENARIO, "--to", str(sim), "-q")
    assert r.returncode == 0, r.stderr
    logs = tmp_path / "logs"
    brokers = render_requestlog.render(str(sim), str(logs))
    assert len(brokers) >= 2

    name = f"tapjob{uuid.uuid4().hex[:6]}"
    meta, tapped = f"{name}.meta", {b: f"{name}.b{b}" for b in brokers}
    at_kafka = ["--set", f"kafka.bootstrap_servers={kafka.bootstrap}"]
    # the operator's way: one `isr tap request-log` per broker, each to its topic
    taps = [subprocess.Popen([sys.executable, "-m", "isr.cli", "tap", "request-log",
                              str(logs / f"kafka-request-{b}.log"), "--broker", str(b),
                              "--to", f"kafka://{topic}", "--quiet", *at_kafka],
                             cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)),
                             stderr=subprocess.PIPE, text=True) for b, topic in tapped.items()]
    # the leaders and brokers, written as `isr tap metadata` writes its events
    sink = Sink(f"kafka://{meta}", lambda: load_settings(None, [at_kafka[1]]))
    with open(logs / "metadata-events.jsonl", "rb") as f:
        for line in f:
            sink.write(json.loads(line))
    sink.close()
    for p in taps:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err

    # what the job will read, partition by partition, as `isr replay --merge` reads files
    inputs = []
    for topic in [meta, *tapped.values()]:
        for p, values in enumerate(records(kafka, topic)):
            if values:
                inputs.append(tmp_path / f"{topic}-{p}.jsonl")
                inputs[-1].write_bytes(b"".join(v + b"\n" for v in values))
    total = sum(1 for path in inputs for _ in open(path))
    settings = [f"kafka.bootstrap_servers={kafka.bootstrap}",
                f"input.topics={json.dumps([meta, *tapped.values()])}",
                # several micro-batches: each topic read in slices
                f"input.max_offsets_per_trigger={total // 2 + 1}",
                f"monitor.policy={json.dumps(POLICIES)}",
                f"monitor.allowed_lateness_ms={LATENESS_MS}",
                *query_settings(name, tmp_path / "checkpoint"),
                f"delivery.state_dir={tmp_path / 'delivery'}",
                "metrics.enabled=false"]
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
               PYTHONPATH=str(ROOT), ISR_SPARK_LOG_LEVEL="ERROR")
    job = subprocess.Popen([sys.executable, "-m", "isr.cli", "run", "--available-now",
                            *[a for s in settings for a in ("--set", s)]],
                           cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                           text=True)
    try:  # the replays while the job starts
        sets = [a for s in settings if s.startswith("monitor.") for a in ("--set", s)]
        merged = cli("replay", "--merge", *map(str, inputs), "-q", *sets)
        direct = cli("replay", str(sim), "-q", *sets)
        _, err = job.communicate(timeout=400)
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()
    assert merged.returncode == 0 and direct.returncode == 0, merged.stderr + direct.stderr
    watermark = max(json.loads(line)["ts"] for path in inputs for line in open(path)) - LATENESS_MS
    expected = [d for d in changes_of(merged.stdout.splitlines()) if d["ts"] < watermark]
    assert len(expected) == CHANGES, expected  # not vacuous
    # the tap's view decides as the simulator's events
    assert expected == [d for d in changes_of(direct.stdout.splitlines()) if d["ts"] < watermark]
    assert job.returncode == 0, err[-3000:]
    batches = [p for p in (tmp_path / "checkpoint" / "commits").iterdir() if p.name.isdigit()]
    assert len(batches) >= 2, sorted(p.name for p in batches)
    dead = [v for part in records(kafka, f"{name}.dead") for v in part]
    assert not dead, dead[0][:500]
    got = changes_of(v for part in records(kafka, f"{name}.changes") for v in part)
    assert got == expected
