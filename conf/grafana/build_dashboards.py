"""Writes the three dashboards under conf/grafana/dashboards/ (run after editing):

    python conf/grafana/build_dashboards.py

Panels are plain Prometheus queries over the monitor's metrics (isr/metrics.py)
and the recording rules of conf/prometheus/rules.yml.
"""

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
DS = {"type": "prometheus", "uid": "prometheus"}
SEL = 'cluster=~"$cluster", topic=~"$topic", partition=~"$partition", policy=~"$policy"'


def panel(pid, title, exprs, kind="timeseries", x=0, y=0, w=12, h=8, unit=None, legend=None):
    targets = [{"refId": chr(65 + i), "expr": e, "datasource": DS,
                "legendFormat": (legend[i] if legend else "__auto")}
               for i, e in enumerate(exprs)]
    p = {"id": pid, "type": kind, "title": title, "datasource": DS, "targets": targets,
         "gridPos": {"x": x, "y": y, "w": w, "h": h}, "options": {}, "fieldConfig":
         {"defaults": {"unit": unit} if unit else {}, "overrides": []}}
    return p


def variable(name, query, label):
    return {"name": name, "label": label, "type": "query", "datasource": DS,
            "query": {"query": query, "refId": name}, "definition": query,
            "includeAll": True, "multi": True, "allValue": ".*", "refresh": 2,
            "current": {"text": "All", "value": "$__all"}}


def dashboard(uid, title, panels, variables=(), annotations=()):
    return {"uid": uid, "title": title, "tags": ["kafka", "isr"], "timezone": "utc",
            "schemaVersion": 39, "version": 1, "refresh": "10s",
            "time": {"from": "now-1h", "to": "now"}, "panels": panels,
            "templating": {"list": list(variables)},
            "annotations": {"list": list(annotations)}}


common = [variable("cluster", "label_values(isr_partition_isr_size, cluster)", "cluster"),
          variable("policy", "label_values(isr_partition_isr_size, policy)", "policy")]

overview = dashboard("isr-overview", "Kafka ISR - cluster overview", [
    panel(1, "Under-replicated partitions", ['sum(isr:under_replicated_partitions:sum{cluster=~"$cluster", policy=~"$policy"})'], "stat", 0, 0, 6, 4),
    panel(2, "Under min ISR", ['sum(isr:under_min_isr_partitions:sum{cluster=~"$cluster", policy=~"$policy"})'], "stat", 6, 0, 6, 4),
    panel(3, "At min ISR", ['sum(isr:at_min_isr_partitions:sum{cluster=~"$cluster", policy=~"$policy"})'], "stat", 12, 0, 6, 4),
    panel(4, "Offline risk (leader alone in ISR)", ['sum(isr:offline_risk_partitions:sum{cluster=~"$cluster", policy=~"$policy"})'], "stat", 18, 0, 6, 4),
    panel(5, "ISR shrinks and expands per second",
          ['sum by (policy) (isr:isr_shrinks:rate5m{cluster=~"$cluster", policy=~"$policy"})',
           'sum by (policy) (isr:isr_expands:rate5m{cluster=~"$cluster", policy=~"$policy"})'],
          x=0, y=4, legend=["shrinks {{policy}}", "expands {{policy}}"], unit="ops"),
    panel(6, "Top lagging followers",
          ['topk(10, isr_follower_lag_seconds{cluster=~"$cluster", policy=~"$policy"})'],
          "table", 12, 4, unit="s"),
    panel(7, "Alerts fired (1 h)",
          ['sum by (alertname) (increase(isr_alerts_total{status="firing"}[1h]))'],
          "bargauge", 0, 12, 24, 6),
], common)

drill = dashboard("isr-partition", "Kafka ISR - partition drill-down", [
    panel(1, "ISR size, replicas, min ISR",
          [f"isr_partition_isr_size{{{SEL}}}", f"isr_partition_replicas{{{SEL}}}",
           f"isr_partition_min_insync_replicas{{{SEL}}}"],
          x=0, y=0, legend=["ISR {{topic}}-{{partition}}", "replicas {{topic}}-{{partition}}",
                            "min ISR {{topic}}-{{partition}}"]),
    panel(2, "High watermark vs leader LEO",
          [f"isr_partition_high_watermark{{{SEL}}}",
           f"isr_partition_leader_log_end_offset{{{SEL}}}"],
          x=12, y=0, legend=["hw {{topic}}-{{partition}}", "leader LEO {{topic}}-{{partition}}"]),
    panel(3, "Follower lag", [f"isr_follower_lag_seconds{{{SEL}}}"], x=0, y=8, unit="s",
          legend=["{{topic}}-{{partition}} replica {{replica}}"]),
    panel(4, "Time since caught up", [f"isr_follower_time_since_caught_up_seconds{{{SEL}}}"],
          x=12, y=8, unit="s", legend=["{{topic}}-{{partition}} replica {{replica}}"]),
], common + [variable("topic", 'label_values(isr_partition_isr_size{cluster=~"$cluster"}, topic)', "topic"),
             variable("partition", 'label_values(isr_partition_isr_size{topic=~"$topic"}, partition)', "partition")],
    [{"name": "ISR changes", "datasource": DS, "enable": True, "iconColor": "red",
      "expr": f"changes(isr_partition_isr_size{{{SEL}}}[1m]) > 0",
      "titleFormat": "ISR change", "textFormat": "{{topic}}-{{partition}} ({{policy}})"}])

health = dashboard("isr-job", "Kafka ISR monitor - job health", [
    panel(1, "Input and processed rows per second",
          ["isr_stream_input_rows_per_second", "isr_stream_processed_rows_per_second"],
          x=0, y=0, legend=["input", "processed"], unit="rowsps"),
    panel(2, "Micro-batch duration", ["isr_stream_batch_duration_seconds"], x=12, y=0, unit="s"),
    panel(3, "Watermark delay (wall clock - event time)", ["isr_stream_watermark_delay_seconds"],
          x=0, y=8, unit="s"),
    panel(4, "State store rows", ["isr_stream_state_rows"], x=12, y=8),
    panel(5, "Dead letters per second", ["sum by (reason_class) (rate(isr_dead_letters_total[5m]))"],
          x=0, y=16, legend=["{{reason_class}}"]),
    panel(6, "Webhook deliveries and outbox",
          ["sum by (receiver, outcome) (rate(isr_webhook_deliveries_total[5m]))",
           "isr_webhook_outbox_alerts"], x=12, y=16,
          legend=["{{receiver}} {{outcome}}", "outbox"]),
    panel(7, "Micro-batches completed", ["isr_stream_batches_total"], "stat", 0, 24, 24, 4),
])

out = HERE / "dashboards"
out.mkdir(exist_ok=True)
for name, d in (("isr-overview", overview), ("isr-partition", drill), ("isr-job", health)):
    (out / f"{name}.json").write_text(json.dumps(d, indent=2) + "\n")
