"""Writes the three dashboards under conf/grafana/dashboards/ (run after editing):

    python conf/grafana/build_dashboards.py [--out DIR]

Built with grafana-foundation-sdk (Grafana Labs' typed builders, generated
from Grafana's own schemas): panels, thresholds, variables and instant
queries come out in the JSON Grafana expects, which hand-written dicts got
wrong (docs/operations.md, "Dashboards", says why this and not grafanalib).
Every query uses the `datasource` variable, so the dashboards import into any
Grafana; each dashboard shows one policy at a time (default `kafka`), so no
partition is counted once per policy. Panels read the monitor's metrics
(isr/sinks/prometheus.py); tests/integration/test_observability.py runs every query
against a real Prometheus.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from grafana_foundation_sdk.builders import (bargauge, common, dashboard, prometheus, stat, table,
                                             timeseries)
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.common import BigValueColorMode
from grafana_foundation_sdk.models.dashboard import (DataSourceRef, GridPos, Threshold, ThresholdsMode,
                                                     VariableOption, VariableRefresh)
from grafana_foundation_sdk.models.prometheus import PromQueryFormat

HERE = Path(__file__).resolve().parent
DS = DataSourceRef(type_val="prometheus", uid="${datasource}")
CLUSTER = 'cluster=~"$cluster", policy="$policy"'
PARTITION = CLUSTER + ', topic=~"$topic", partition=~"$partition"'
GREEN, ORANGE, RED = "green", "orange", "red"
# The brokers' own ReplicaManager metrics as the Prometheus JMX exporter java
# agent exports them with jvm/kafka/jmx-exporter.yaml (read from a Kafka 4.4
# broker's /metrics; docs/real-kafka.md). Their `cluster` label is the scrape
# job's target label (docs/real-kafka.md, "The brokers' own counters"): the
# panels show the chosen cluster's brokers beside the monitor's view of it.
BROKER = "kafka_server_replicamanager_"
BROKERS = 'cluster=~"$cluster"'


def query(expr: str, legend: str = "__auto", ref: str = "A", instant: bool = False):
    q = prometheus.Dataquery().expr(expr).legend_format(legend).ref_id(ref).datasource(DS)
    if instant:
        q = q.instant().format(PromQueryFormat.TABLE)
    return q


def thresholds(*steps: tuple[float | None, str]):
    return (dashboard.ThresholdsConfig().mode(ThresholdsMode.ABSOLUTE)
            .steps([Threshold(value=v, color=c) for v, c in steps]))


def last(title: str, expr: str, unit: str = ""):
    """A stat panel showing the query's latest value."""
    p = (stat.Panel().title(title).datasource(DS).with_target(query(expr))
         .reduce_options(common.ReduceDataOptions().calcs(["lastNotNull"])))
    return p.unit(unit) if unit else p


def count(title: str, expr: str, bad: str, x: int, w: int = 4):
    """A stat panel: green at 0, `bad` from 1."""
    return (last(title, expr).thresholds(thresholds((None, GREEN), (1, bad)))
            .color_mode(BigValueColorMode.BACKGROUND).grid_pos(GridPos(h=4, w=w, x=x, y=0)))


def series(title: str, exprs: list[tuple[str, str]], x: int, y: int, unit: str = "",
           w: int = 12, h: int = 8):
    p = timeseries.Panel().title(title).datasource(DS).grid_pos(
        GridPos(h=h, w=w, x=x, y=y))
    for i, (expr, legend) in enumerate(exprs):
        p = p.with_target(query(expr, legend, chr(65 + i)))
    return p.unit(unit) if unit else p


def variable(name: str, expr: str, multi: bool = True):
    v = (dashboard.QueryVariable(name).label(name).datasource(DS).query(expr)
         .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED))
    if multi:
        return v.multi(True).include_all(True).all_value(".*").current(
            VariableOption(text="All", value="$__all"))
    return v


def policy_variable():
    """One policy at a time: several side by side would count each partition
    once per policy."""
    return variable("policy", "label_values(isr_partitions, policy)", multi=False).current(
        VariableOption(text="kafka", value="kafka"))


def datasource_variable():
    return dashboard.DatasourceVariable("datasource").label("Prometheus").type("prometheus")


def board(uid: str, title: str):
    return (dashboard.Dashboard(title).uid(uid).tags(["kafka", "isr"]).timezone("utc")
            .refresh("10s").time("now-1h", "now").with_variable(datasource_variable()))


def overview():
    c = CLUSTER
    return (board("isr-overview", "Kafka ISR - cluster overview")
            .with_variable(variable("cluster", "label_values(isr_partitions, cluster)"))
            .with_variable(policy_variable())
            .with_panel(count("Under min ISR", f"sum(isr_under_min_isr_partitions{{{c}}})", RED, 0))
            .with_panel(count("Leader alone in ISR", f"sum(isr_leader_only_partitions{{{c}}})",
                              RED, 4))
            .with_panel(count("Offline", f"sum(isr_offline_partitions{{{c}}})", RED, 8))
            .with_panel(count("Under-replicated",
                              f"sum(isr_under_replicated_partitions{{{c}}})", ORANGE, 12))
            .with_panel(count("At min ISR", f"sum(isr_at_min_isr_partitions{{{c}}})", ORANGE, 16))
            .with_panel(last("Partitions", f"sum(isr_partitions{{{c}}})")
                        .grid_pos(GridPos(h=4, w=4, x=20, y=0)))
            .with_panel(series("ISR shrinks and expands per second",
                               [(f"sum(isr:shrinks:rate5m{{{c}}})", "shrinks"),
                                (f"sum(isr:expands:rate5m{{{c}}})", "expands")], 0, 4, "ops"))
            .with_panel(table.Panel().title("Top lagging followers (now)").datasource(DS)
                        .with_target(query(f"topk(10, isr_follower_lag_seconds{{{c}}})",
                                           instant=True))
                        .unit("s").grid_pos(GridPos(h=8, w=12, x=12, y=4)))
            # Ours beside the brokers' own counters: a leader counts a change
            # only when its AlterPartition response commits it, and the
            # controller's removals (cause "controller") are in neither.
            .with_panel(series("ISR shrinks and expands per second: monitor vs brokers",
                               [(f'sum(rate(isr_shrinks_total{{{c}, cause="leader"}}[5m]))',
                                 "shrinks (monitor)"),
                                (f"sum(rate({BROKER}isrshrinkspersec_total{{{BROKERS}}}[5m]))",
                                 "shrinks (brokers)"),
                                (f'sum(rate(isr_expands_total{{{c}, cause="leader"}}[5m]))',
                                 "expands (monitor)"),
                                (f"sum(rate({BROKER}isrexpandspersec_total{{{BROKERS}}}[5m]))",
                                 "expands (brokers)")], 0, 12, "ops"))
            .with_panel(series("Under-replicated, under and at min ISR: monitor vs brokers",
                               [(f"sum(isr_under_replicated_partitions{{{c}}})",
                                 "under-replicated (monitor)"),
                                (f"sum({BROKER}underreplicatedpartitions{{{BROKERS}}})",
                                 "under-replicated (brokers)"),
                                (f"sum(isr_under_min_isr_partitions{{{c}}})",
                                 "under min ISR (monitor)"),
                                (f"sum({BROKER}underminisrpartitioncount{{{BROKERS}}})",
                                 "under min ISR (brokers)"),
                                (f"sum(isr_at_min_isr_partitions{{{c}}})",
                                 "at min ISR (monitor)"),
                                (f"sum({BROKER}atminisrpartitioncount{{{BROKERS}}})",
                                 "at min ISR (brokers)")], 12, 12))
            .with_panel(bargauge.Panel().title("Alerts fired (1 h)").datasource(DS)
                        .with_target(query('sum by (alertname) '
                                           '(increase(isr_alerts_total{status="firing"}[1h]))',
                                           "{{alertname}}"))
                        .grid_pos(GridPos(h=6, w=24, x=0, y=20)))
            # The Spark job itself (its progress reports): is the monitor keeping up?
            .with_panel(series("Job: input vs processed rows per second",
                               [("sum(isr_stream_input_rows_per_second)", "input"),
                                ("sum(isr_stream_processed_rows_per_second)", "processed")],
                               0, 26, "rowsps", w=8))
            .with_panel(series("Job: micro-batch duration",
                               [("max(isr_stream_batch_duration_seconds)", "batch")],
                               8, 26, "s", w=8))
            .with_panel(series("Job: state store",
                               [("sum(isr_stream_state_rows)", "rows"),
                                ("sum(isr_stream_state_memory_bytes)", "memory (bytes)")],
                               16, 26, w=8)))


def partition():
    p = PARTITION
    legend = "{{topic}}-{{partition}}"
    return (board("isr-partition", "Kafka ISR - partition drill-down")
            .with_variable(variable("cluster", "label_values(isr_partitions, cluster)"))
            .with_variable(policy_variable())
            .with_variable(variable("topic", 'label_values(isr_partition_in_sync_replicas'
                                             '{cluster=~"$cluster"}, topic)'))
            .with_variable(variable("partition", 'label_values(isr_partition_in_sync_replicas'
                                                 '{topic=~"$topic"}, partition)'))
            .with_panel(series("ISR size, replicas, min ISR",
                               [(f"isr_partition_in_sync_replicas{{{p}}}", f"ISR {legend}"),
                                (f"isr_partition_replicas{{{p}}}", f"replicas {legend}"),
                                (f"isr_partition_min_insync_replicas{{{p}}}",
                                 f"min ISR {legend}")], 0, 0))
            .with_panel(series("High watermark vs leader LEO",
                               [(f"isr_partition_high_watermark{{{p}}}", f"hw {legend}"),
                                (f"isr_partition_leader_log_end_offset{{{p}}}",
                                 f"leader LEO {legend}")], 12, 0))
            .with_panel(series("Follower lag", [(f"isr_follower_lag_seconds{{{p}}}",
                                                 f"{legend} replica {{{{replica}}}}")], 0, 8, "s"))
            .with_panel(series("Time since caught up",
                               [(f"isr_follower_time_since_caught_up_seconds{{{p}}}",
                                 f"{legend} replica {{{{replica}}}}")], 12, 8, "s"))
            .annotation(dashboard.AnnotationQuery().name("ISR changes").datasource(DS)
                        .enable(True).icon_color("red")
                        .expr(f"changes(isr_partition_in_sync_replicas{{{p}}}[1m]) > 0")))


def job():
    i = 'instance=~"$instance"'
    return (board("isr-job", "Kafka ISR monitor - job health")
            .with_variable(variable("instance", "label_values(isr_stream_batches_total, instance)"))
            .with_panel(last("Input lag (records)", f"sum(isr_stream_input_lag_records{{{i}}})")
                        .thresholds(thresholds((None, GREEN), (10000, ORANGE), (100000, RED)))
                        .grid_pos(GridPos(h=4, w=8, x=0, y=0)))
            .with_panel(last("Watermark delay",
                             f"max(isr_stream_watermark_delay_seconds{{{i}}})", "s")
                        .thresholds(thresholds((None, GREEN), (60, ORANGE), (300, RED)))
                        .grid_pos(GridPos(h=4, w=8, x=8, y=0)))
            .with_panel(last("Webhook outbox", f"sum(isr_webhook_outbox_alerts{{{i}}})")
                        .thresholds(thresholds((None, GREEN), (1, ORANGE)))
                        .grid_pos(GridPos(h=4, w=8, x=16, y=0)))
            .with_panel(series("Input and processed rows per second",
                               [(f"isr_stream_input_rows_per_second{{{i}}}", "input"),
                                (f"isr_stream_processed_rows_per_second{{{i}}}", "processed")],
                               0, 4, "rowsps"))
            .with_panel(series("Micro-batch duration",
                               [(f"isr_stream_batch_duration_seconds{{{i}}}", "{{instance}}")],
                               12, 4, "s"))
            .with_panel(series("State store rows and memory",
                               [(f"isr_stream_state_rows{{{i}}}", "rows {{instance}}"),
                                (f"isr_stream_state_memory_bytes{{{i}}}",
                                 "bytes {{instance}}")], 0, 12))
            .with_panel(series("Dead letters per second",
                               [(f"sum by (reason_class) (rate(isr_dead_letters_total{{{i}}}[5m]))",
                                 "{{reason_class}}")], 12, 12))
            .with_panel(series("Webhook deliveries per second",
                               [(f"sum by (receiver, outcome) "
                                 f"(rate(isr_webhook_deliveries_total{{{i}}}[5m]))",
                                 "{{receiver}} {{outcome}}")], 0, 20, w=24)))


DASHBOARDS = {"isr-overview": overview, "isr-partition": partition, "isr-job": job}


def render(name: str) -> str:
    data = json.loads(JSONEncoder().encode(DASHBOARDS[name]().build()))
    for panel in data["panels"]:
        if panel.get("options") is None:  # unset in the builder: Grafana's defaults
            panel.pop("options", None)
    return json.dumps(data, sort_keys=True, indent=2) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(HERE / "dashboards"))
    out = Path(ap.parse_args().out)
    out.mkdir(parents=True, exist_ok=True)
    for name in DASHBOARDS:
        (out / f"{name}.json").write_text(render(name))
    json.loads(render("isr-overview"))  # what we wrote is JSON


if __name__ == "__main__":
    main()
