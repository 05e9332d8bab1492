"""Prometheus metrics served by the streaming job (prometheus-client).

Names follow Prometheus conventions: `isr_` prefix, base units (seconds),
`_total` for counters. Per-partition gauges come from each micro-batch's
`partition_state` records (the partitions that changed), counters from its
`isr_change`, `alert` and `dead_letter` records, the stream's health from
Spark's progress reports, webhook outcomes from the deliverer. Cardinality
controls for large clusters: `metrics.per_partition`, `metrics.per_follower`
and a topic allow list (`metrics.topics`, regular expressions).
"""

from __future__ import annotations

import re
import sys
import time
from typing import Iterable, Optional

import orjson
from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

from isr.config import MetricsSettings
from isr.contract.records import WATERMARK, OutputRecord

P_LABELS = ("cluster", "topic", "partition", "policy")


class Metrics:
    def __init__(self, settings: MetricsSettings,
                 registry: Optional[CollectorRegistry] = None) -> None:
        self.settings = settings
        self.registry = registry or CollectorRegistry()
        self._topic_patterns = [re.compile(p) for p in settings.topics]
        self._delivery_seen: dict[tuple[str, str], int] = {}
        r = self.registry

        def gauge(name: str, doc: str, labels=P_LABELS) -> Gauge:
            return Gauge(name, doc, labels, registry=r)

        self.isr_size = gauge("isr_partition_isr_size", "Members of the computed ISR.")
        self.replicas = gauge("isr_partition_replicas", "Assigned replicas (AR).")
        self.min_isr = gauge("isr_partition_min_insync_replicas",
                             "Effective min.insync.replicas.")
        self.under_replicated = gauge("isr_partition_under_replicated",
                                      "1 if the ISR is smaller than the assignment.")
        self.under_min_isr = gauge("isr_partition_under_min_isr",
                                   "1 if the ISR is below min.insync.replicas.")
        self.at_min_isr = gauge("isr_partition_at_min_isr",
                                "1 if the ISR is at min.insync.replicas.")
        self.hw = gauge("isr_partition_high_watermark", "High watermark (offset).")
        self.leader_leo = gauge("isr_partition_leader_log_end_offset", "Leader LEO (offset).")
        self.state_ts = gauge("isr_partition_state_timestamp_seconds",
                              "Event time of the partition's latest state.")
        f_labels = P_LABELS + ("replica",)
        self.lag = gauge("isr_follower_lag_seconds",
                         "Follower lag in time (0 at the leader's LEO).", f_labels)
        self.since_caught_up = gauge("isr_follower_time_since_caught_up_seconds",
                                     "Event time since the follower was last caught up.",
                                     f_labels)
        self.in_isr = gauge("isr_follower_in_isr", "1 if the follower is in the ISR.", f_labels)
        self.changes = Counter("isr_isr_changes_total", "ISR shrinks and expands.",
                               ("cluster", "topic", "policy", "action", "cause"), registry=r)
        self.alerts = Counter("isr_alerts_total", "Alert status changes.",
                              ("alertname", "severity", "status"), registry=r)
        self.dead_letters = Counter("isr_dead_letters_total", "Input that could not be applied.",
                                    ("reason_class",), registry=r)
        self.deliveries = Counter("isr_webhook_deliveries_total",
                                  "Alert webhook deliveries by outcome.",
                                  ("receiver", "outcome"), registry=r)
        self.outbox = Gauge("isr_webhook_outbox_alerts",
                            "Alerts waiting in the outbox for a receiver.", registry=r)
        self.batches = Counter("isr_stream_batches_total", "Micro-batches completed.",
                               registry=r)
        self.input_rows = Counter("isr_stream_input_rows_total", "Input rows read.", registry=r)
        self.input_rate = Gauge("isr_stream_input_rows_per_second",
                                "Input rows per second in the last micro-batch.", registry=r)
        self.processed_rate = Gauge("isr_stream_processed_rows_per_second",
                                    "Rows processed per second in the last micro-batch.",
                                    registry=r)
        self.batch_duration = Gauge("isr_stream_batch_duration_seconds",
                                    "Duration of the last micro-batch.", registry=r)
        self.watermark_delay = Gauge("isr_stream_watermark_delay_seconds",
                                     "Wall-clock time minus the stream's event-time watermark.",
                                     registry=r)
        self.state_rows = Gauge("isr_stream_state_rows", "Rows in Spark's state store.",
                                registry=r)

    def serve(self) -> bool:
        """Serve /metrics; a busy port is reported, not fatal (the job matters more)."""
        try:
            start_http_server(self.settings.port, addr=self.settings.address,
                              registry=self.registry)
            return True
        except OSError as exc:
            print(f"isr: metrics not served on {self.settings.address}:{self.settings.port}: "
                  f"{exc}", file=sys.stderr)
            return False

    # ------------------------------------------------------------ batches
    def _wanted(self, topic: str) -> bool:
        return not self._topic_patterns or any(p.fullmatch(topic) for p in
                                               self._topic_patterns)

    def observe_records(self, records: Iterable[OutputRecord], now: Optional[float] = None
                        ) -> None:
        """One micro-batch's output records."""
        watermark = -1
        for r in records:
            kind, value = r.kind, r.value
            if kind == WATERMARK:  # every bucket reports the same one
                watermark = max(watermark, r.ts)
                continue
            if kind == "partition_state":
                self._state(orjson.loads(value))
            elif kind == "isr_change":
                d = orjson.loads(value)
                self.changes.labels(d["cluster"], d["topic"], d["policy"], d["action"],
                                    d["cause"]).inc()
            elif kind == "alert":
                a = orjson.loads(value)
                self.alerts.labels(a["labels"]["alertname"], a["labels"]["severity"],
                                   a["status"]).inc()
            elif kind == "dead_letter":
                self.dead_letters.labels(orjson.loads(value)["reason_class"]).inc()
        if watermark >= 0:
            self.watermark_delay.set(max(0.0, (now or time.time()) - watermark / 1000))

    def _state(self, s: dict) -> None:
        if not self.settings.per_partition or not self._wanted(s["topic"]):
            return
        labels = (s["cluster"], s["topic"], str(s["partition"]), s["policy"])
        isr = s["isr"]
        self.isr_size.labels(*labels).set(len(isr))
        self.replicas.labels(*labels).set(len(s["replicas"]))
        self.min_isr.labels(*labels).set(s["min_insync_replicas"])
        self.under_replicated.labels(*labels).set(int(s["under_replicated"]))
        self.under_min_isr.labels(*labels).set(int(s["under_min_isr"]))
        self.at_min_isr.labels(*labels).set(int(s["at_min_isr"]))
        self.hw.labels(*labels).set(s["hw"])
        self.leader_leo.labels(*labels).set(s["leader_leo"])
        self.state_ts.labels(*labels).set(s["ts"] / 1000)
        if not self.settings.per_follower:
            return
        for f in s["followers"]:
            fl = labels + (str(f["replica"]),)
            if f["lag_ms"] is not None:
                self.lag.labels(*fl).set(f["lag_ms"] / 1000)
            if f["last_caught_up_ts"] > 0:
                self.since_caught_up.labels(*fl).set(
                    max(0, s["ts"] - f["last_caught_up_ts"]) / 1000)
            self.in_isr.labels(*fl).set(int(f["in_isr"]))

    def observe_delivery(self, counts, pending: int) -> None:
        """The deliverer's cumulative counts: add what is new since last time."""
        for (receiver, outcome), n in counts.items():
            seen = self._delivery_seen.get((receiver, outcome), 0)
            if n > seen:
                self.deliveries.labels(receiver, outcome).inc(n - seen)
                self._delivery_seen[(receiver, outcome)] = n
        self.outbox.set(pending)

    def observe_progress(self, p: dict, now: Optional[float] = None) -> None:
        """One StreamingQueryProgress (as a dict, Spark's JSON)."""
        self.batches.inc()
        self.input_rows.inc(p.get("numInputRows", 0) or 0)
        self.input_rate.set(p.get("inputRowsPerSecond") or 0)
        self.processed_rate.set(p.get("processedRowsPerSecond") or 0)
        self.batch_duration.set((p.get("durationMs", {}).get("triggerExecution", 0) or 0) / 1000)
        ops = p.get("stateOperators") or []
        self.state_rows.set(sum(op.get("numRowsTotal", 0) for op in ops))
