"""The Prometheus metrics (isr/sinks/prometheus.py) from a batch's output records,
read back through prometheus-client's own registry, and the endpoint."""

from __future__ import annotations

import json
import re
import ssl
from pathlib import Path

import httpx
import pytest
from helpers import T0, fetch, leader, run

from isr.config import MetricsSettings
from isr.contract.records import PARTITION_METRICS, OutputRecord, to_record
from isr.kafka.embedded import free_port
from isr.sinks.prometheus import Metrics, input_lag

ROOT = Path(__file__).resolve().parents[1]
P = {"cluster": "default", "topic": "orders", "partition": "0", "policy": "kafka"}


def value(m: Metrics, name: str, **labels) -> float | None:
    return m.registry.get_sample_value(name, labels)


def state_records(events):
    """A batch's records as the job writes them: the decisions, and the states
    of the partitions it touched in one partition_metrics record."""
    r = run(events)
    feed = OutputRecord(PARTITION_METRICS, "0", "metrics/0", T0,
                        json.dumps([m.state_fields() for m in r.engine.models()]))
    return [to_record(d) for d in r.engine.decisions] + [feed]


def test_partition_states_and_decisions_become_gauges_and_counters():
    m = Metrics(MetricsSettings())
    m.observe_records(state_records([leader(0, replicas=[1, 2, 3], min_insync_replicas=2),
                                     fetch(100, 2, 0, 0)]))
    assert value(m, "isr_partition_in_sync_replicas", **P) == 3
    assert value(m, "isr_partition_min_insync_replicas", **P) == 2
    assert value(m, "isr_partition_leader", **P) == 1
    assert value(m, "isr_follower_in_isr", **P, replica="2") == 1
    assert value(m, "isr_partition_state_timestamp_seconds", **P) == (T0 + 100) / 1000


def test_the_jobs_partition_metrics_record_feeds_the_gauges_without_partition_states():
    """The stream's metrics come from one partition_metrics record per bucket
    per batch (every touched partition), whatever output.state_interval_ms
    keeps from the state topic."""
    r = run([leader(0, replicas=[1, 2, 3], min_insync_replicas=2), fetch(100, 2, 0, 0),
             leader(0, partition=1, replicas=[1, 2])])
    feed = OutputRecord(PARTITION_METRICS, "0", "metrics/0", T0,
                        json.dumps([m.state_fields() for m in r.engine.models()]))
    m = Metrics(MetricsSettings())
    m.observe_records([to_record(s) for s in r.engine.states()])  # throttled: not a feed
    assert value(m, "isr_partition_in_sync_replicas", **P) is None
    m.observe_records([feed])
    assert value(m, "isr_partition_in_sync_replicas", **P) == 3
    assert value(m, "isr_partition_replicas", **{**P, "partition": "1"}) == 2
    assert value(m, "isr_follower_in_isr", **P, replica="2") == 1
    assert value(m, "isr_partition_state_timestamp_seconds", **P) == (T0 + 100) / 1000
    assert value(m, "isr_partitions", cluster="default", policy="kafka") == 2


def test_cluster_counts_hold_whatever_the_per_partition_switch():
    """A follower stuck for 45 s leaves a min-ISR-2 partition of RF 2 with the
    leader alone: under min ISR, under-replicated, leader only."""
    events = [leader(0, replicas=[1, 2], isr=[1, 2], min_insync_replicas=2),
              leader(0, partition=1, replicas=[1, 2], isr=[1, 2])]
    events += [fetch(t, 2, 0, 0, partition=1) for t in range(1000, 60000, 1000)]
    m = Metrics(MetricsSettings(per_partition=False))
    m.observe_records(state_records(events))
    c = {"cluster": "default", "policy": "kafka"}
    assert value(m, "isr_partitions", **c) == 2
    assert value(m, "isr_under_min_isr_partitions", **c) == 1
    assert value(m, "isr_leader_only_partitions", **c) == 1
    assert value(m, "isr_under_replicated_partitions", **c) == 1
    assert value(m, "isr_offline_partitions", **c) == 0
    assert value(m, "isr_shrinks_total", cluster="default", topic="orders", policy="kafka",
                 cause="leader") == 1
    assert value(m, "isr_partition_in_sync_replicas", **P) is None  # per_partition off


def test_a_follower_reassigned_away_or_made_leader_loses_its_series():
    m = Metrics(MetricsSettings())
    m.observe_records(state_records([leader(0, replicas=[1, 2, 3])]))
    assert value(m, "isr_follower_in_isr", **P, replica="3") == 1
    moved = [leader(0, replicas=[1, 2, 3]), leader(10, replicas=[2, 1, 4], leader=2,
                                                   leader_epoch=2, isr=[2, 1])]
    m.observe_records(state_records(moved))
    assert value(m, "isr_follower_in_isr", **P, replica="3") is None  # reassigned away
    assert value(m, "isr_follower_in_isr", **P, replica="2") is None  # now the leader
    assert value(m, "isr_follower_in_isr", **P, replica="4") == 0
    assert value(m, "isr_partition_leader", **P) == 2


def test_a_partition_without_a_state_for_the_ttl_loses_every_series():
    m = Metrics(MetricsSettings(series_ttl_s=60))
    m.observe_records(state_records([leader(0)]), now=1000.0)
    m.observe_records([], now=1030.0)
    assert value(m, "isr_partition_in_sync_replicas", **P) == 3
    m.observe_records([], now=1061.0)
    assert value(m, "isr_partition_in_sync_replicas", **P) is None
    assert value(m, "isr_follower_in_isr", **P, replica="2") is None
    assert value(m, "isr_partitions", cluster="default", policy="kafka") == 0


def test_topic_allow_list_limits_per_partition_series():
    m = Metrics(MetricsSettings(topics=["payments.*"]))
    m.observe_records(state_records([leader(0)]))
    assert value(m, "isr_partition_in_sync_replicas", **P) is None
    assert value(m, "isr_partitions", cluster="default", policy="kafka") == 1


def test_input_lag_from_either_sources_progress():
    ours = {"endOffset": '{"in/0": 90, "in/1": 40, "~behind": ["in/0"], "~records": 130, '
                         '"~gaps": {"in/1": [40, "lost"]}, "~clock": 1763950000000}',
            "latestOffset": '{"in/0": 100, "in/1": 40}'}
    sparks = {"endOffset": '{"in": {"0": 90, "1": 40}}',
              "latestOffset": '{"in": {"0": 100, "1": 45}}'}
    assert input_lag(ours) == 10 and input_lag(sparks) == 15
    assert input_lag({"endOffset": None, "latestOffset": None}) is None


def test_input_records_are_the_records_read_not_the_packed_rows():
    """The Python source packs many records into one Spark row, so the batch
    counters read its ~records; other sources' rows are records."""
    m = Metrics(MetricsSettings())
    m.observe_progress({"numInputRows": 4, "inputRowsPerSecond": 2.0,
                        "processedRowsPerSecond": 4.0, "durationMs": {"triggerExecution": 1000},
                        "sources": [{"numInputRows": 4,
                                     "endOffset": {"in/0": 900, "~records": 800}}]})
    assert value(m, "isr_stream_processed_rows_per_second") == 800  # 4 rows/s of 200 each
    m.observe_progress({"numInputRows": 50, "sources": [{"numInputRows": 50,
                                                           "endOffset": '{"in": {"0": 50}}'}]})
    assert value(m, "isr_stream_input_rows_total") == 850


def test_the_state_stores_rows_and_memory_come_from_sparks_progress():
    m = Metrics(MetricsSettings())
    m.observe_progress({"numInputRows": 1, "stateOperators": [
        {"numRowsTotal": 2, "memoryUsedBytes": 5000}, {"numRowsTotal": 3,
                                                       "memoryUsedBytes": 7000}]})
    assert value(m, "isr_stream_state_rows") == 5
    assert value(m, "isr_stream_state_memory_bytes") == 12000


def test_every_metric_the_dashboards_and_rules_read_exists():
    """A renamed metric would leave a panel or a rule empty."""
    import yaml

    m = Metrics(MetricsSettings())
    names = {metric.name for metric in m.registry.collect()}
    names |= {n + "_total" for n in names}
    rules = yaml.safe_load((ROOT / "conf/prometheus/rules.yml").read_text())
    recorded = {r["record"] for g in rules["groups"] for r in g["rules"] if "record" in r}
    text = (ROOT / "conf/prometheus/rules.yml").read_text() + "".join(
        p.read_text() for p in (ROOT / "conf/grafana/dashboards").glob("*.json"))
    used = set(re.findall(r"\b(isr_[a-z_0-9]+|isr:[a-z_:0-9]+)", text))
    missing = sorted(n for n in used if n not in names and n not in recorded)
    assert not missing


def test_the_dashboards_are_what_the_builder_writes(tmp_path):
    import subprocess
    import sys

    subprocess.run([sys.executable, str(ROOT / "conf/grafana/build_dashboards.py"), "--out",
                    str(tmp_path)], check=True)
    for built in tmp_path.glob("*.json"):
        committed = ROOT / "conf/grafana/dashboards" / built.name
        assert json.loads(built.read_text()) == json.loads(committed.read_text()), built.name


def test_the_endpoint_takes_tls_and_basic_auth(tmp_path, monkeypatch):
    import subprocess

    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout",
                    str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True)
    monkeypatch.setenv("METRICS_PASSWORD", "s3cret")
    port = free_port()
    m = Metrics(MetricsSettings(address="127.0.0.1", port=port, tls_cert_file=str(cert),
                                tls_key_file=str(key), basic_auth_username="prom",
                                basic_auth_password_env="METRICS_PASSWORD"))
    assert m.serve()
    url = f"https://127.0.0.1:{port}/metrics"
    assert httpx.get(url, verify=False).status_code == 401
    assert httpx.get(url, verify=False, auth=("prom", "wrong")).status_code == 401
    ok = httpx.get(url, verify=ssl.create_default_context(cafile=str(cert)),
                   auth=("prom", "s3cret"))
    assert ok.status_code == 200 and "isr_partitions" in ok.text


def test_closing_the_sink_frees_the_endpoint_port():
    """At the end of a run (pipeline/streaming.py closes every sink) the
    endpoint stops, and the next run on the same host can serve on the port."""
    port = free_port()
    first = Metrics(MetricsSettings(address="127.0.0.1", port=port))
    assert first.serve()
    assert httpx.get(f"http://127.0.0.1:{port}/metrics").status_code == 200
    first.close()
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2)
    again = Metrics(MetricsSettings(address="127.0.0.1", port=port))
    assert again.serve()
    again.close()
