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


def test_a_metrics_record_that_names_a_partition_state_record_of_its_batch_feeds_its_state():
    """A state the batch also writes as a partition_state record is listed in
    the partition_metrics record by that record's id (its JSON once in the
    bucket's result): the gauges show it as if listed in full, the other
    states of the record too, and a partition_state record it does not name
    is no feed."""
    r = run([leader(0, replicas=[1, 2, 3], min_insync_replicas=2), fetch(100, 2, 0, 0),
             leader(0, partition=1, replicas=[1, 2]), leader(0, partition=2, replicas=[1])])
    states = [to_record(s) for s in r.engine.states()]  # partitions 0, 1, 2
    shown = json.dumps([states[0].id, json.loads(states[1].value)])
    m = Metrics(MetricsSettings())
    m.observe_records([*states, OutputRecord(PARTITION_METRICS, "0", "metrics/0", T0, shown)])
    assert value(m, "isr_partition_in_sync_replicas", **P) == 3
    assert value(m, "isr_follower_in_isr", **P, replica="2") == 1
    assert value(m, "isr_partition_replicas", **{**P, "partition": "1"}) == 2
    assert value(m, "isr_partition_replicas", **{**P, "partition": "2"}) is None
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


# ---------------------------------------------------------------- the series' store
# Partition states written by hand (the fields of PartitionModel.state_fields
# the sink reads), so that every value the scrape must show is known here.

def state(partition: int, g: int, *, replicas=(1, 2, 3), isr=None, topic="orders",
          followers=None) -> dict:
    """Partition `partition` at generation `g`: HW g, leader LEO g + 1, ts
    T0 + g, each follower g ms behind and caught up 5 ms before."""
    isr = list(replicas if isr is None else isr)
    if followers is None:
        followers = [{"replica": r, "lag_ms": g, "last_caught_up_ts": T0 + g - 5,
                      "in_isr": r in isr} for r in replicas[1:]]
    return {"type": "partition_state", "cluster": "default", "topic": topic,
            "partition": partition, "ts": T0 + g, "leader": replicas[0], "leader_epoch": 1,
            "replicas": list(replicas), "isr": isr, "hw": g, "leader_leo": g + 1,
            "under_replicated": len(isr) < len(replicas), "under_min_isr": len(isr) < 2,
            "at_min_isr": len(isr) == 2, "min_insync_replicas": 2, "policy": "kafka",
            "followers": [{"leo": g, "last_fetch_ts": T0 + g, **f} for f in followers],
            "bootstrap": False}


def feed(*states: dict) -> list[OutputRecord]:
    return [OutputRecord(PARTITION_METRICS, "0", "metrics/0", T0, json.dumps(list(states)))]


def series(m: Metrics) -> dict[tuple, float]:
    """Every per-partition and per-follower sample of one scrape, as served
    (the text of /metrics, parsed back)."""
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    text = generate_latest(m.registry).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text)
            if family.name.startswith(("isr_partition_", "isr_follower_"))
            for s in family.samples}


def expected(partition: int, values: dict, followers: dict) -> dict[tuple, float]:
    labels = {**P, "partition": str(partition)}
    out = {(f"isr_partition_{n}", tuple(sorted(labels.items()))): v for n, v in values.items()}
    for replica, fv in followers.items():
        fl = tuple(sorted({**labels, "replica": str(replica)}.items()))
        out.update({(f"isr_follower_{n}", fl): v for n, v in fv.items()})
    return out


def test_the_scrape_shows_each_value_a_state_set_and_no_other_series():
    m = Metrics(MetricsSettings())
    never_caught_up = {"replica": 2, "lag_ms": None, "last_caught_up_ts": 0, "in_isr": False}
    behind = {"replica": 3, "lag_ms": 1500, "last_caught_up_ts": T0 + 6 - 2000, "in_isr": True}
    m.observe_records(feed(state(0, 6, isr=[1, 3], followers=[never_caught_up, behind]),
                           state(1, 9, replicas=(4, 5))))
    p0 = {"in_sync_replicas": 2, "replicas": 3, "leader": 1, "min_insync_replicas": 2,
          "under_replicated": 1, "under_min_isr": 0, "at_min_isr": 1, "high_watermark": 6,
          "leader_log_end_offset": 7, "state_timestamp_seconds": (T0 + 6) / 1000}
    p1 = {**p0, "in_sync_replicas": 2, "replicas": 2, "leader": 4, "under_replicated": 0,
          "high_watermark": 9, "leader_log_end_offset": 10,
          "state_timestamp_seconds": (T0 + 9) / 1000}
    # follower 2 never caught up: no lag and no time since caught up, only in_isr
    assert series(m) == {
        **expected(0, p0, {2: {"in_isr": 0},
                           3: {"lag_seconds": 1.5, "time_since_caught_up_seconds": 2.0,
                               "in_isr": 1}}),
        **expected(1, p1, {5: {"lag_seconds": 0.009, "time_since_caught_up_seconds": 0.005,
                               "in_isr": 1}})}
    # A later state without a lag keeps the follower's last one (as a Gauge
    # child that is not set again); partition 1 is not touched.
    m.observe_records(feed(state(0, 8, followers=[
        {"replica": 2, "lag_ms": 0, "last_caught_up_ts": T0 + 8, "in_isr": True},
        {**behind, "lag_ms": None, "in_isr": False}])))
    got = series(m)
    f3 = tuple(sorted({**P, "replica": "3"}.items()))
    assert got[("isr_follower_lag_seconds", f3)] == 1.5
    assert got[("isr_follower_time_since_caught_up_seconds", f3)] == (8 + 2000 - 6) / 1000
    assert got[("isr_follower_in_isr", f3)] == 0
    assert got[("isr_partition_high_watermark", tuple(sorted(P.items())))] == 8
    assert got[("isr_follower_lag_seconds", tuple(sorted({**P, "replica": "2"}.items())))] == 0
    assert {k: v for k, v in got.items() if ("partition", "1") in k[1]} == expected(
        1, p1, {5: {"lag_seconds": 0.009, "time_since_caught_up_seconds": 0.005, "in_isr": 1}})


def test_a_follower_leaving_the_assignment_or_leading_is_gone_from_the_scrape():
    m = Metrics(MetricsSettings())
    m.observe_records(feed(state(0, 1), state(1, 1)))
    assert {dict(k[1])["replica"] for k in series(m) if k[0] == "isr_follower_in_isr"} == {
        "2", "3"}
    m.observe_records(feed(state(0, 2, replicas=(2, 1, 4))))  # 3 reassigned away, 2 leads
    got = series(m)
    followers = sorted((dict(k[1])["partition"], dict(k[1])["replica"]) for k in got
                       if k[0].startswith("isr_follower_"))
    assert followers == sorted([("0", "1"), ("0", "4"), ("1", "2"), ("1", "3")] * 3)
    assert got[("isr_partition_leader", tuple(sorted(P.items())))] == 2


def test_a_ttl_expired_partition_leaves_the_scrape_whole_and_comes_back_with_a_state():
    m = Metrics(MetricsSettings(series_ttl_s=60))
    m.observe_records(feed(state(0, 1), state(1, 1)), now=1000.0)
    m.observe_records(feed(state(1, 2)), now=1050.0)
    before = series(m)
    m.observe_records([], now=1061.0)  # 0 last seen at 1000
    got = series(m)
    assert not [k for k in got if ("partition", "0") in k[1]]
    assert got == {k: v for k, v in before.items() if ("partition", "1") in k[1]}
    assert value(m, "isr_partitions", cluster="default", policy="kafka") == 1
    m.observe_records(feed(state(0, 3)), now=1062.0)
    assert series(m) == {**got, **expected(0, {"high_watermark": 3}, {})} | {
        k: v for k, v in series(m).items() if ("partition", "0") in k[1]}
    assert value(m, "isr_partition_high_watermark", **P) == 3
    assert value(m, "isr_follower_lag_seconds", **P, replica="3") == 0.003


def test_the_switches_and_the_topic_filter_leave_out_those_series_from_the_scrape():
    states = feed(state(0, 1), state(1, 1, topic="payments"))
    for settings, shown in [(MetricsSettings(per_follower=False), {"partition"}),
                            (MetricsSettings(per_partition=False), set()),
                            (MetricsSettings(topics=["pay.*"]), {"partition", "follower"})]:
        m = Metrics(settings)
        m.observe_records(states)
        got = series(m)
        assert {k[0].split("_")[1] for k in got} == shown, settings
        assert all(dict(k[1])["topic"] == "payments" for k in got) or not settings.topics
        assert value(m, "isr_partitions", cluster="default", policy="kafka") == 2


def test_the_cluster_counts_after_every_batch_are_those_of_the_partitions_latest_states():
    """The counts per (cluster, policy) a scrape shows after each batch:
    those of each live partition's latest state, every count shown (0
    included) from a cluster's first state on, whatever moved in between:
    partitions coming, going (TTL) and coming back, a partition's ISR
    shrinking and growing back within one batch, two clusters."""
    import random

    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from isr.sinks.prometheus import COUNTS

    rng = random.Random(23)
    m = Metrics(MetricsSettings(series_ttl_s=3, refresh_interval_ms=1000))
    latest: dict[tuple, tuple[dict, int]] = {}  # (cluster, partition) -> (state, batch)
    seen_clusters: set[str] = set()
    for batch in range(40):
        states = []
        for _ in range(rng.randrange(0, 12)):
            cluster, p = rng.choice(["a", "b"]), rng.randrange(8)
            s = {**state(p, batch, isr=rng.choice([(1, 2, 3), (1, 2), (1,), (2, 3)])),
                 "cluster": cluster}
            if rng.random() < 0.1:
                s["leader"] = -1
            states.append(s)  # (a partition twice in a batch: its last state counts)
            latest[(cluster, p)] = (s, batch)
            seen_clusters.add(cluster)
        m.observe_records(feed(*states) if states else [], now=1e9 + batch)
        live = [s for s, at in latest.values() if batch - at <= 3]
        scraped = {(f.name, s.labels["cluster"]): s.value
                   for f in text_string_to_metric_families(generate_latest(m.registry).decode())
                   if f.name in COUNTS for s in f.samples}
        for cluster in seen_clusters:
            mine = [s for s in live if s["cluster"] == cluster]
            want = {
                "isr_partitions": len(mine),
                "isr_under_replicated_partitions": sum(s["under_replicated"] for s in mine),
                "isr_under_min_isr_partitions": sum(s["under_min_isr"] for s in mine),
                "isr_at_min_isr_partitions": sum(s["at_min_isr"] for s in mine),
                "isr_leader_only_partitions": sum(
                    s["isr"] == [s["leader"]] for s in mine),
                "isr_offline_partitions": sum(s["leader"] < 0 for s in mine)}
            assert {n: scraped.get((n, cluster)) for n in COUNTS} == want, (batch, cluster)


def test_a_scrape_during_batches_never_fails_and_never_shows_a_partition_half_written():
    """The endpoint's threads scrape while the batch's thread writes. Every
    generation g of these states sets HW g, LEO g + 1, ts T0 + g, lags g ms
    and (odd g) moves replica 3 to 4; partitions 20-199 come and go (TTL
    0.5 s, one batch a second). Each partition in a scrape must be one generation whole."""
    m = Metrics(MetricsSettings(series_ttl_s=0.5, refresh_interval_ms=0))

    def check(families) -> None:
        parts: dict[str, dict] = {}
        for family in families:
            for s in family.samples:
                if s.name.startswith(("isr_partition_", "isr_follower_")):
                    parts.setdefault(s.labels["partition"], {})[
                        (s.name, s.labels.get("replica"))] = s.value
        for p, got in parts.items():
            g = int(got[("isr_partition_high_watermark", None)])
            replicas = (1, 2, 3) if g % 2 == 0 else (1, 2, 4)
            want = {("isr_partition_leader_log_end_offset", None): g + 1,
                    ("isr_partition_state_timestamp_seconds", None): (T0 + g) / 1000,
                    **{(f"isr_follower_{n}", str(r)): v for r in replicas[1:]
                       for n, v in (("lag_seconds", g / 1000),
                                    ("time_since_caught_up_seconds", 0.005), ("in_isr", 1))}}
            assert {k: got[k] for k in got if k in want or k[1] is not None} == want, (p, g)
            assert int(p) < 20 or g % 2 == 0, (p, g)  # 20-199 expire in odd generations

    scrapes_during_batches(m, lambda: check(m.registry.collect()),  # what /metrics formats
                           300, lambda g: (1, 2, 3) if g % 2 == 0 else (1, 2, 4))


def scrapes_during_batches(m: Metrics, scrape, want: int, replicas=lambda g: (1, 2, 3)) -> None:
    """`scrape()` (it asserts) in a thread, again and again, while this one
    writes generation g = 0, 1, ... (`state`) of partitions 0-199 (even g) or
    0-19 (odd g, so 20-199 expire), switching threads as often as the
    interpreter can (within a partition's write, between two families),
    until `want` scrapes; the first failure of a scrape fails the test."""
    import sys
    import threading

    stop, scrapes, errors = threading.Event(), [0], []

    def reader() -> None:
        try:
            while not stop.is_set():
                scrape()
                scrapes[0] += 1
        except Exception as exc:  # noqa: BLE001 (the test reports it)
            errors.append(exc)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    thread = threading.Thread(target=reader)
    thread.start()
    g = 0
    try:
        while scrapes[0] < want and g < 20000 and not errors:
            parts = range(200) if g % 2 == 0 else range(20)
            m.observe_records(feed(*(state(p, g, replicas=replicas(g)) for p in parts)), now=g)
            g += 1
    finally:
        stop.set()
        thread.join()
        sys.setswitchinterval(interval)
    assert not errors, errors[0]
    assert scrapes[0] >= want and g > 20  # scrapes and batches did overlap


# ---------------------------------------------------------------- the endpoint's writer
# /metrics writes PartitionSeries' families itself (isr/sinks/prometheus.py
# _Exposition); what it serves must be what prometheus-client's own
# make_wsgi_app would serve for the same registry, byte for byte.

OM = "application/openmetrics-text; version=1.0.0"


def get(app, accept: str = "", encoding: str = "", query: str = "") -> tuple[dict, bytes]:
    """One GET through a WSGI app: (its headers, its body decompressed)."""
    import gzip

    environ = {"REQUEST_METHOD": "GET", "PATH_INFO": "/metrics", "QUERY_STRING": query,
               "HTTP_ACCEPT": accept, "HTTP_ACCEPT_ENCODING": encoding}
    got: dict = {}
    body = b"".join(app(environ, lambda status, headers: got.update(headers, status=status)))
    if got.get("Content-Encoding") == "gzip":
        body = gzip.decompress(body)
    return got, body


def prometheus_client_gives(m: Metrics, accept: str = "", query: str = "") -> bytes:
    """What prometheus-client itself serves for the registry (its encoders
    over the families' samples, as before the endpoint's own writer)."""
    from prometheus_client import make_wsgi_app
    return get(make_wsgi_app(m.registry), accept, "", query)[1]


def escaping_states() -> list[OutputRecord]:
    """Topic names are [a-zA-Z0-9._-] (Kafka), broker ids numbers, but the
    cluster and policy names come from the configuration: anything."""
    odd = {"cluster": 'prod "eu"\\west\nb', "policy": 'p\\"q'}
    return feed(state(0, 1), state(1, 2, topic="a.b-c_d"),
                {**state(2, 3, isr=[1, 3]), **odd},
                {**state(3, 4, replicas=(7, 8)), **odd,
                 "followers": [{"replica": 8, "lag_ms": None, "last_caught_up_ts": 0,
                                "in_isr": False, "leo": 0, "last_fetch_ts": T0}]})


@pytest.mark.parametrize("accept", ["", OM, "text/plain; version=1.0.0; escaping=allow-utf-8",
                                    "text/plain; version=1.0.0; escaping=dots"])
def test_the_endpoint_serves_what_prometheus_client_would_with_escaped_labels(accept):
    m = Metrics(MetricsSettings())
    m.observe_records(escaping_states())
    headers, body = get(m.wsgi_app, accept)
    want = prometheus_client_gives(m, accept)
    assert headers["status"] == "200 OK"
    assert body == want and b'cluster="prod \\"eu\\"\\\\west\\nb"' in body
    lag = b"isr__follower__lag__seconds" if "dots" in accept else b"isr_follower_lag_seconds"
    assert body.count(b"\n" + lag + b"{") == 6  # 2 + 2 + 2 + 0 (never lagged)
    # our writer wrote it (it caches the label text), but for a name escaping
    # that rewrites names, left to prometheus-client whole
    assert len(m.series._labels) == (0 if "dots" in accept else 4)
    m.observe_records(feed(state(0, 5, replicas=(2, 1))), now=time_now() + 10 ** 6)
    assert get(m.wsgi_app, accept)[1] == prometheus_client_gives(m, accept)  # all expired


def test_without_the_escaping_it_reads_prometheus_client_serves_alone(monkeypatch):
    """A prometheus-client without the (private) label escaping the
    endpoint's writer borrows: /metrics is make_wsgi_app's, same text."""
    from isr.sinks import prometheus

    monkeypatch.setattr(prometheus, "_om_escape", None)
    m = Metrics(MetricsSettings())
    m.observe_records(escaping_states())
    assert get(m.wsgi_app)[1] == prometheus_client_gives(m)
    assert not m.series._labels  # our writer never ran


def time_now() -> float:
    import time
    return time.time()


def test_the_endpoints_own_lines_are_used_not_prometheus_clients():
    """The equality above must be our writer's: a partition's line comes
    from the label text cached at its first scrape."""
    m = Metrics(MetricsSettings())
    m.observe_records(feed(state(0, 1)))
    get(m.wsgi_app)
    key = next(iter(m.series._labels))
    m.series._labels[key] = ('{cluster="X",', 'topic="Y"}')
    assert b'isr_partition_leader{cluster="X",topic="Y"} 1.0\n' in get(m.wsgi_app)[1]
    m.observe_records([], now=time_now() + 10 ** 6)  # expired: its label text goes too
    assert not m.series._labels


@pytest.mark.parametrize("accept", ["", OM])
def test_the_endpoint_gzips_when_asked_and_filters_names(accept):
    m = Metrics(MetricsSettings())
    m.observe_records(escaping_states())
    headers, body = get(m.wsgi_app, accept, "deflate, gzip;q=0.9")
    assert headers["Content-Encoding"] == "gzip" and body == prometheus_client_gives(m, accept)
    assert "Content-Encoding" not in get(m.wsgi_app, accept, "identity")[0]
    for names in (["isr_partition_leader"], ["isr_follower_in_isr", "isr_partitions"],
                  ["isr_follower_lag_seconds", "nothing"], ["nothing"]):
        query = "&".join(f"name[]={n}" for n in names)
        body = get(m.wsgi_app, accept, "gzip", query)[1]
        assert body == prometheus_client_gives(m, accept, query), names
        assert {line.split()[2] for line in body.splitlines()
                if line.startswith(b"# TYPE")} == {n.encode() for n in names} - {b"nothing"}
    # a family asked for but without a sample is not shown (as prometheus-client does)
    m2 = Metrics(MetricsSettings(per_follower=False))
    m2.observe_records(escaping_states())
    query = "name[]=isr_follower_in_isr&name[]=isr_partition_replicas"
    body = get(m2.wsgi_app, accept, "", query)[1]
    assert body == prometheus_client_gives(m2, accept, query)
    assert b"isr_follower" not in body and b"isr_partition_replicas{" in body


def test_the_endpoint_over_http_streams_the_same_text():
    port = free_port()
    m = Metrics(MetricsSettings(address="127.0.0.1", port=port))
    m.observe_records(feed(*(state(p, p) for p in range(1000))))
    assert m.serve()
    try:
        for accept in ("", OM):
            r = httpx.get(f"http://127.0.0.1:{port}/metrics", headers={"Accept": accept})
            assert r.status_code == 200 and r.content == prometheus_client_gives(m, accept)
            assert r.headers["Content-Type"] == get(m.wsgi_app, accept)[0]["Content-Type"]
            assert r.content.count(b"\n") > 1000 * 16
    finally:
        m.close()


def test_a_served_scrape_during_batches_is_each_partition_whole():
    """As the thread test above, through the endpoint's writer: the text of
    one scrape shows every partition of one generation, in every family."""
    from prometheus_client.parser import text_string_to_metric_families

    m = Metrics(MetricsSettings(series_ttl_s=0.5, refresh_interval_ms=0))

    def scrape() -> None:
        text = get(m.wsgi_app, "", "gzip")[1].decode()
        parts: dict[str, set] = {}
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                if s.name in ("isr_partition_high_watermark", "isr_follower_lag_seconds",
                              "isr_partition_leader_log_end_offset"):
                    g = s.value * (1000 if "lag" in s.name else 1) - (
                        1 if "offset" in s.name else 0)
                    parts.setdefault(s.labels["partition"], set()).add(round(g))
        assert all(len(gs) == 1 for gs in parts.values()), parts

    scrapes_during_batches(m, scrape, 200)
