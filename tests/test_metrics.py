"""The Prometheus metrics (isr/metrics.py) from a batch's output records,
read back through prometheus-client's own registry."""

from __future__ import annotations

from helpers import T0, fetch, leader, run

from isr.config import MetricsSettings
from isr.contract.records import to_record
from isr.metrics import Metrics


def value(m: Metrics, name: str, **labels) -> float | None:
    return m.registry.get_sample_value(name, labels)


def test_partition_states_and_decisions_become_gauges_and_counters():
    r = run([leader(0, replicas=[1, 2, 3], min_insync_replicas=2), fetch(100, 2, 0, 0)])
    records = [to_record(d) for d in r.engine.decisions] + [to_record(r.state())]
    m = Metrics(MetricsSettings())
    m.observe_records(records)
    p = {"cluster": "default", "topic": "orders", "partition": "0", "policy": "kafka"}
    assert value(m, "isr_partition_isr_size", **p) == 3
    assert value(m, "isr_partition_min_insync_replicas", **p) == 2
    assert value(m, "isr_follower_in_isr", **p, replica="2") == 1
    assert value(m, "isr_partition_state_timestamp_seconds", **p) == (T0 + 100) / 1000


def test_topic_allow_list_limits_per_partition_series():
    r = run([leader(0)])
    m = Metrics(MetricsSettings(topics=["payments.*"]))
    m.observe_records([to_record(r.state())])
    assert value(m, "isr_partition_isr_size", cluster="default", topic="orders",
                 partition="0", policy="kafka") is None
