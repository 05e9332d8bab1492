"""The brokers' own ReplicaManager counters beside ours (issue 22 section 5):
a real Prometheus scrapes a real broker's JMX exporter and the monitor's
endpoint, and every query of the overview's "monitor vs brokers" panels has
data under the names the dashboard uses."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import ROOT, cli, run, wait_until
from receivers import Prometheus  # tests/ is on sys.path (conftest)

from isr.config import MetricsSettings
from isr.contract import decode
from isr.contract.records import PARTITION_METRICS, OutputRecord, to_record
from isr.kafka.cluster import BROKER_IDS
from isr.sinks.prometheus import Metrics

pytestmark = pytest.mark.kafka
PAUSE_RUN = ROOT / "tests" / "data" / "real-kafka" / "4.4.0"  # broker 3 paused 7.5 s
LAG_MS = 3000  # that run's replica.lag.time.max.ms


def our_records(tmp_path: Path) -> list[OutputRecord]:
    """The monitor's records for a real run (the pause fixture, tapped as an
    operator does), as a micro-batch hands them to the metrics."""
    outputs = []
    taps = [("metadata", str(PAUSE_RUN / "metadata.dump"))]
    taps += [("request-log", str(PAUSE_RUN / f"broker-{b}-kafka-request.log"), "--broker", str(b),
              "--topic-ids", str(PAUSE_RUN / "metadata.dump")) for b in BROKER_IDS]
    for i, tap in enumerate(taps):
        out = tmp_path / f"{i}.jsonl"
        r = cli("tap", *tap, "--to", str(out), "-q")
        assert r.returncode == 0, r.stderr
        outputs.append(out)
    events = sorted((decode(line) for out in outputs for line in out.read_text().splitlines()),
                    key=lambda e: e.ts)
    result = run(events, replica_lag_time_max_ms=LAG_MS, min_insync_replicas=2)
    feed = OutputRecord(PARTITION_METRICS, "0", "metrics/0", events[-1].ts,
                        json.dumps([m.state_fields() for m in result.engine.models()]))
    return [to_record(d) for d in result.engine.decisions] + [feed]


def test_prometheus_has_the_brokers_counters_and_ours_under_the_dashboards_names(
        kafka, tmp_path):
    from test_observability import VARIABLES, dashboard_exprs

    # The dashboard's cluster chosen: the brokers' series must carry it (their
    # scrape job's target label) as ours do (the taps' --cluster, "default").
    variables = {**VARIABLES, "cluster": "default"}
    compared = [(where, expr) for where, expr in dashboard_exprs(brokers=True, variables=variables)]
    ours = [(where, expr) for where, expr in dashboard_exprs(variables=variables)
            if "monitor vs brokers" in where]
    assert all('cluster=~"default"' in expr for _w, expr in compared), compared
    assert len(compared) == 5 and len(ours) == 5, (compared, ours)  # the two panels
    metrics = Metrics(MetricsSettings(address="127.0.0.1", port=kafka.conf.port_base + 36))
    assert metrics.serve()
    metrics.observe_records(our_records(tmp_path))
    targets = [f"127.0.0.1:{kafka.conf.metrics_port(b)}" for b in BROKER_IDS]
    with Prometheus([f"127.0.0.1:{metrics.settings.port}"], str(ROOT / "conf/prometheus/rules.yml"),
                    port=kafka.conf.port_base + 35, brokers=targets, cluster="default") as prom:
        # rate() needs two scrapes of each target
        wait_until(lambda: all(prom.query(expr) for _w, expr in compared + ours), 60,
                   "every 'monitor vs brokers' query to have data")
        # each broker's series, by the exporter's own name
        for name in ("isrshrinkspersec_total", "isrexpandspersec_total",
                     "underreplicatedpartitions", "underminisrpartitioncount",
                     "atminisrpartitioncount"):
            got = prom.query(f"kafka_server_replicamanager_{name}")
            assert sorted(r["metric"]["instance"] for r in got) == sorted(targets), name
            assert {r["metric"].get("cluster") for r in got} == {"default"}, name
        # ours: the pause run's leader-driven shrinks and expands (2 each)
        shrinks = prom.query('sum(isr_shrinks_total{cause="leader", policy="kafka"})')
        expands = prom.query('sum(isr_expands_total{cause="leader", policy="kafka"})')
        assert float(shrinks[0]["value"][1]) >= 2 and float(expands[0]["value"][1]) >= 2
