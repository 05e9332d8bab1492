"""Metrics, dashboards and rules against real servers: the streaming job
serves /metrics, a real Prometheus (Debian's package) scrapes it and
evaluates conf/prometheus/rules.yml, and every PromQL expression of every
Grafana dashboard and every rule returns data for a scenario that exercises
it. Plus the deployment files' own validators (promtool, docker-compose)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
import uuid
from pathlib import Path
from typing import Optional

import httpx
import pytest
from confluent_kafka import Producer
from helpers import wait_until
from receivers import Alertmanager, Prometheus, Receiver  # tests/ is on sys.path (conftest)
from workload import query_settings

from isr.config import load_settings
from isr.contract.events import routing_key
from isr.sinks.progress import input_records
from isr.sim.cluster import Simulator
from isr.sim.scenario import load_scenario

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
VARIABLES = {"cluster": ".*", "topic": ".*", "partition": ".*", "instance": ".*",
             "policy": "kafka"}  # the dashboards show one policy at a time


def dashboard_exprs(brokers: bool = False, variables: Optional[dict] = None
                    ) -> list[tuple[str, str]]:
    """Every query of every dashboard, its variables set (VARIABLES, or
    `variables`); the ones on the brokers' own JMX exporter series
    (kafka_server_*) only with `brokers` (a real cluster's:
    tests/integration/test_real_kafka_metrics.py)."""
    variables = variables or VARIABLES
    out = []
    for path in sorted((ROOT / "conf/grafana/dashboards").glob("*.json")):
        d = json.loads(path.read_text())
        for p in d["panels"]:
            out += [(f"{path.stem}: {p['title']}", t["expr"]) for t in p["targets"]]
        out += [(f"{path.stem}: annotation {a['name']}", a["expr"])
                for a in d.get("annotations", {}).get("list", [])]
    return [(where, re.sub(r"\$(\w+)", lambda m: variables[m.group(1)], expr))
            for where, expr in out if brokers == ("kafka_server_" in expr)]


def rules() -> list[dict]:
    import yaml

    doc = yaml.safe_load((ROOT / "conf/prometheus/rules.yml").read_text())
    return [r for g in doc["groups"] for r in g["rules"]]


def rule_exprs() -> list[tuple[str, str]]:
    """Recording rules' expressions, and each series an alerting rule reads
    (an alert's condition need not hold in the scenario; its inputs must exist)."""
    out = []
    for r in rules():
        if "record" in r:
            out.append((r["record"], r["expr"]))
        else:
            out += [(r["alert"], name) for name in
                    re.findall(r"\b(isr[_:][a-z_:0-9]+|up\{[^}]*\})", r["expr"])]
    return out


def _free_port() -> int:
    from receivers import free_port

    return free_port()


def job_settings(broker, tmp_path, name: str, *extra: str):
    """The job reading `<name>.in` and writing `<name>.*` topics."""
    return load_settings(None, [
        f"kafka.bootstrap_servers={broker.bootstrap}", f'input.topics=["{name}.in"]',
        *query_settings(name, tmp_path / "ck"), "stream.trigger_interval=1 second",
        f"delivery.state_dir={tmp_path}/delivery", *extra])


def _events() -> list[dict]:
    """orders-0: a follower's 60 s GC pause (shrink at +75 s, expand at ~+100 s);
    events-0: a leader that stops serving fetches at +20 s and is then cut off
    at +40 s, so its followers are removed at +60 s and it stays alone."""
    long_pause = list(Simulator(load_scenario("follower-gc-pause-long")).events())
    slow = [e for e in Simulator(load_scenario("kip501-slow-leader", 40000)).events()
            if e["type"] != "broker"]
    return sorted(long_pause + slow, key=lambda e: e["ts"])


def test_prometheus_scrapes_the_job_and_every_dashboard_and_rule_query_has_data(
        broker, spark, tmp_path):
    name = f"obs{uuid.uuid4().hex[:6]}"
    topic = f"{name}.in"
    broker.create_topics([topic], 2)
    port = _free_port()
    dead_hook = f"http://127.0.0.1:{_free_port()}/hook"  # nobody listens: outbox grows
    settings = job_settings(
        broker, tmp_path, name, "monitor.allowed_lateness_ms=1000",
        "monitor.min_insync_replicas=2", f"metrics.port={port}", "metrics.address=127.0.0.1",
        "delivery.batch_budget_s=0.5", f'delivery.webhooks=[{{name="ops", url="{dead_hook}"}}]')
    from isr.pipeline.streaming import run_to_kafka

    events = _events()
    cut = events[0]["ts"] + 90000
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 10})

    def produce(evs, bad: int) -> None:
        for e in evs:
            producer.produce(topic, key=routing_key(e), value=json.dumps(e))
        for i in range(bad):
            producer.produce(topic, key=b"x", value=b"not json %d" % i)
        producer.flush(30)

    metrics_url = f"http://127.0.0.1:{port}/metrics"
    query = run_to_kafka(settings, spark=spark)
    try:
        produce([e for e in events if e["ts"] < cut], bad=1)
        wait_until(lambda: 'isr_partition_in_sync_replicas{cluster="default",partition="0",policy="kafka",'
                      'topic="events"} 1.0' in httpx.get(metrics_url).text, what="phase 1 state")
        with Prometheus(f"127.0.0.1:{port}", str(ROOT / "conf/prometheus/rules.yml")) as prom:
            wait_until(lambda: prom.query('isr_partition_in_sync_replicas{topic="orders"} == 2'),
                  what="Prometheus to scrape the shrunk ISR")
            time.sleep(3)
            produce([e for e in events if e["ts"] >= cut], bad=3)
            wait_until(lambda: prom.query('isr_partition_in_sync_replicas{topic="orders"} == 3'),
                  what="the expansion")
            time.sleep(4)  # a few more scrapes and rule evaluations
            empty = [(where, expr) for where, expr in dashboard_exprs() + rule_exprs()
                     if not prom.query(expr)]
            assert not empty, f"queries without data: {empty}"
            # And the numbers are the scenario's.
            assert prom.query('isr_under_min_isr_partitions{policy="kafka"} == 1')
            assert prom.query('isr_leader_only_partitions{policy="kafka"} == 1')
            assert prom.query('isr_partitions{policy="kafka"} == 2')
            assert prom.query('isr_expands_total{topic="orders"} == 1')
            assert prom.query('isr_stream_input_lag_records == 0')
            health = httpx.get(f"{prom.url}/api/v1/rules").json()["data"]["groups"]
            assert all(r["health"] == "ok" for g in health for r in g["rules"]), health
            assert prom.query('isr_dead_letters_total{reason_class="not_json"} == 4')
            assert prom.query("isr_webhook_outbox_alerts > 0")
            assert prom.query('isr_follower_lag_seconds{topic="events",replica="1002"} > 20')
    finally:
        query.stop()


def test_rules_and_config_pass_promtool_and_the_compose_file_validates():
    rules = subprocess.run(["promtool", "check", "rules", "conf/prometheus/rules.yml"],
                           cwd=ROOT, capture_output=True, text=True)
    text = (ROOT / "conf/prometheus/rules.yml").read_text()
    written = text.count("- alert:") + text.count("- record:")  # every rule was read
    assert rules.returncode == 0 and f"SUCCESS: {written} rules found" in rules.stdout, \
        rules.stdout + rules.stderr
    config = subprocess.run(["promtool", "check", "config", "conf/prometheus/prometheus.yml"],
                            cwd=ROOT, capture_output=True, text=True)
    assert config.returncode == 0, config.stdout + config.stderr
    compose = shutil.which("docker-compose")
    if compose is None:
        pytest.fail("docker-compose is not installed (.ci/run installs it)")
    out = subprocess.run([compose, "-f", "docker-compose.yml", "config"], cwd=ROOT,
                         capture_output=True, text=True, env={**os.environ})
    assert out.returncode == 0, out.stderr
    for service in ("kafka-1", "kafka-2", "kafka-3", "tap", "load", "isr-monitor", "simulator",
                    "prometheus", "alertmanager", "grafana"):
        assert re.search(rf"^  {service}:$", out.stdout, re.M), service
    # The brokers log requests at DEBUG to the volume the tap reads.
    assert out.stdout.count("-Dlog4j.configuration=file:/etc/isr/kafka-log4j.properties") == 3
    log4j = (ROOT / "conf/compose/kafka-log4j.properties").read_text()
    assert "log4j.logger.kafka.request.logger=DEBUG, requestAppender" in log4j
    tap = (ROOT / "conf/compose/tap.sh").read_text()
    assert "exec isr tap cluster --log-path '/logs/broker-{broker}/{file}' --brokers 1,2,3" in tap
    assert "log4j.logger.state.change.logger=INFO, stateChangeAppender" in log4j
    # The same taps as the tests and the demo (isr/tap/live.py), on the volume's logs.
    from isr.tap.live import ClusterTaps

    taps = [" ".join(args) for _name, args in ClusterTaps(
        "/logs/broker-{broker}/{file}", (1, 2, 3), "kafka-1:9092", "kafka://t").commands()]
    for source in ("tap request-log /logs/broker-3/kafka-request.log -F --broker 3 --topic-ids",
                   "tap state-change /logs/broker-3/state-change.log -F",
                   "tap server-log /logs/broker-3/server.log -F", "tap metadata --poll"):
        assert any(t.startswith(source) for t in taps), source
    assert subprocess.run(["sh", "-n", "conf/compose/tap.sh"], cwd=ROOT).returncode == 0
    # It keeps running and can be reached: no obsolete `version` key, Kafka
    # published to the host, the simulator profile without end and restarted.
    raw = (ROOT / "docker-compose.yml").read_text()
    assert not re.search(r"^version:", raw, re.M)
    for port in (19092, 19093, 19094):
        assert f"published: {port}" in out.stdout or f"{port}:{port}" in out.stdout, port
    simulator = out.stdout.split("\n  simulator:")[1].split("\n  tap:")[0]
    assert "--forever" in simulator and "restart: on-failure" in simulator
    # The monitor's compose configuration is valid for the monitor itself.
    check = subprocess.run(["isr", "check-config", "--config", "conf/compose/isr.toml"],
                           cwd=ROOT, capture_output=True, text=True,
                           env={**os.environ, "PATH": f"{Path(os.sys.executable).parent}:"
                                                      f"{os.environ['PATH']}"})
    assert check.returncode == 0, check.stderr


def test_webhook_down_then_back_while_the_stream_keeps_running(broker, spark, tmp_path):
    """Receiver down for the first micro-batches: every batch still finishes
    within its normal time plus the delivery budget; once the receiver is up,
    every alert transition of the alert topic arrives, each exactly once."""
    name = f"hook{uuid.uuid4().hex[:6]}"
    topic = f"{name}.in"
    broker.create_topics([topic], 1)
    port = _free_port()
    settings = job_settings(
        broker, tmp_path, name, "input.max_offsets_per_trigger=150",
        "monitor.replica_lag_time_max_ms=10000", "monitor.allowed_lateness_ms=500",
        "metrics.enabled=false", "delivery.batch_budget_s=1.0",
        "delivery.backoff_initial_s=0.05", "delivery.backoff_max_s=0.3",
        f'delivery.webhooks=[{{name="ops", url="http://127.0.0.1:{port}/hook"}}]')
    from isr.pipeline.streaming import run_to_kafka
    from isr.sinks.kafka import read_to_end

    events = list(Simulator(load_scenario("kip501-slow-leader")).events())
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 10})
    for e in events:
        producer.produce(topic, key=routing_key(e), value=json.dumps(e))
    producer.flush(30)
    receiver = Receiver(port=port)
    query = run_to_kafka(settings, spark=spark)
    try:
        wait_until(lambda: len(query.recentProgress) >= 5, what="5 micro-batches")
        down = [p["durationMs"]["triggerExecution"] for p in query.recentProgress]
        receiver.start()
        wait_until(lambda: sum(input_records(p) for p in query.recentProgress) >= len(events),
              what="all input")
        # A little later input keeps batches coming, so the outbox is flushed.
        tail = events[-1]["ts"]
        for i in range(1, 6):
            hb = {"v": 1, "type": "append", "ts": tail + 2000 * i, "topic": "heartbeat",
                  "partition": 0, "leader": 1, "leader_epoch": 1, "leader_leo": i}
            producer.produce(topic, key=b"heartbeat/0", value=json.dumps(hb))
            producer.flush(10)
            time.sleep(1.5)
        alerts = [json.loads(m.value()) for m in read_to_end(
            {"bootstrap.servers": broker.bootstrap}, {(f"{name}.alerts", 0): 0})]
        wait_until(lambda: len(receiver.bodies) >= len(alerts), seconds=30, what="deliveries")
    finally:
        query.stop()
        receiver.stop()
    print(f"batch durations while the receiver was down (ms): {down}")
    assert len(alerts) >= 10
    got = [b["id"] for b in receiver.bodies]
    assert sorted(got) == sorted(a["id"] for a in alerts)  # every transition, none twice
    # Per fingerprint, transitions arrive in order (firing before its resolve).
    for fp in {a["fingerprint"] for a in alerts}:
        mine = [b for b in receiver.bodies if b["fingerprint"] == fp]
        assert [b["ts"] for b in mine] == sorted(b["ts"] for b in mine)
    # The dead receiver cost each batch at most the delivery budget (the first
    # batch also starts the Python workers, ~10 s, so it is left out).
    assert max(down[1:]) < 1000 * settings.delivery.batch_budget_s + 3000, down


def test_real_alertmanager_gets_the_live_jobs_transitions_exactly_once(broker, spark, tmp_path):
    """A live stream (event time = wall clock): a follower's fetcher sticks
    for 7 s with a 2 s lag limit. The job posts each transition to a real
    Alertmanager (v2 API), whose own webhook forwards it to this test."""
    import threading

    from isr.commands.simulate import feed_live
    from isr.sim.scenario import Scenario
    from isr.pipeline.streaming import run_to_kafka

    scenario = Scenario.model_validate({
        "name": "am", "title": "stuck follower, live", "description": "test",
        "timing": {"replica_lag_time_max_ms": 2000},
        "topics": [{"name": "live", "min_insync_replicas": 2,
                    "workload": {"kind": "steady", "interval_ms": 100, "messages": 10}}],
        "faults": [{"kind": "stuck_follower", "broker": 3, "at_ms": 4000, "duration_ms": 7000}]})
    name = f"am{uuid.uuid4().hex[:6]}"
    topic = f"{name}.in"
    broker.create_topics([topic], 1)
    receiver = Receiver().start()
    with Alertmanager(receiver.url) as am:
        settings = job_settings(
            broker, tmp_path, name, "monitor.replica_lag_time_max_ms=2000",
            "monitor.allowed_lateness_ms=300", "metrics.enabled=false",
            f'delivery.webhooks=[{{name="am", kind="alertmanager", '
            f'url="{am.url}/api/v2/alerts"}}]')
        query = run_to_kafka(settings, spark=spark)
        wait_until(lambda: len(query.recentProgress) >= 2, what="the job to start")
        stop = threading.Event()
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})

        feeder = threading.Thread(target=feed_live, daemon=True,
                                  args=(scenario, producer, topic, stop.is_set))
        feeder.start()

        def seen():
            return [(a["labels"]["alertname"], a["status"]) for body in receiver.bodies
                    for a in body["alerts"]]

        try:
            wait_until(lambda: ("AtMinIsr", "resolved") in seen(), seconds=60,
                  what="the AtMinIsr resolve to come through Alertmanager")
            time.sleep(4)  # nothing more may arrive for these transitions
        finally:
            stop.set()
            feeder.join(5)
            producer.flush(10)
            query.stop()
            receiver.stop()
    got = seen()
    for alertname in ("FollowerLagging", "AtMinIsr"):
        assert got.count((alertname, "firing")) == 1, got
        assert got.count((alertname, "resolved")) == 1, got
