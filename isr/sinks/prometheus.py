"""Prometheus metrics served by the streaming job (prometheus-client).

Names follow Prometheus conventions (`isr_` prefix, base units, `_total` for
counters) and Kafka's own where Kafka has one: docs/operations.md maps each
to its JMX and kafka_exporter counterpart.

- Cluster-level counts per (cluster, policy), whatever the cardinality
  switches say: partitions, under-replicated, under min ISR, at min ISR,
  leader alone in the ISR, offline (leaderless). They are kept from every
  partition's latest state, with the health conditions' own definitions
  (isr/model/health.py), so Prometheus rules need not redefine them.
- Per-partition and per-follower gauges from each micro-batch's
  `partition_metrics` records (the state of every partition the batch
  touched; never the `partition_state` records, which
  `output.state_interval_ms` throttles), limited by `metrics.per_partition`,
  `metrics.per_follower` and `metrics.topics`. A follower that left the
  assignment or became the leader loses its series at once; a partition
  without a state for `metrics.series_ttl_s` (a deleted one) loses all of its.
  They are kept as one tuple per partition (PartitionSeries), not as Gauge
  children, and made into samples only when scraped.
- Counters from `isr_change`, `alert` and `dead_letter` records; the stream's
  health from Spark's progress reports and the buckets' watermark; webhook
  outcomes from the deliverer.
"""

from __future__ import annotations

import base64
import hmac
import os
import re
import ssl
import sys
import threading
import time
from typing import Iterable, Optional
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import orjson
from prometheus_client import CollectorRegistry, Counter, Gauge, make_wsgi_app
from prometheus_client.core import GaugeMetricFamily
from socketserver import ThreadingMixIn

from isr.config import MetricsSettings
from isr.contract.records import PARTITION_METRICS, WATERMARK, OutputRecord
from isr.model.health import isr_health
from isr.sinks.base import Run, Sink
from isr.sinks.progress import input_lag, input_records
from isr.sinks.webhooks import Deliverer

P_LABELS = ("cluster", "topic", "partition", "policy")
F_LABELS = P_LABELS + ("replica",)
C_LABELS = ("cluster", "policy")
# Cluster-level counts: metric name -> (help, index in a partition's flags).
COUNTS = {
    "isr_partitions": ("Partitions the monitor follows.", None),
    "isr_under_replicated_partitions": (
        "Partitions whose ISR is smaller than the assignment (Kafka: UnderReplicatedPartitions).",
        0),
    "isr_under_min_isr_partitions": (
        "Partitions whose ISR is below min.insync.replicas: acks=all produces fail "
        "(Kafka: UnderMinIsrPartitionCount).", 1),
    "isr_at_min_isr_partitions": (
        "Partitions whose ISR is at min.insync.replicas (Kafka: AtMinIsrPartitionCount).", 2),
    "isr_leader_only_partitions": (
        "Partitions whose ISR is the leader alone although they have more replicas.", 3),
    "isr_offline_partitions": (
        "Partitions without a leader (Kafka: OfflinePartitionsCount).", 4),
}

# Per-partition gauges (name, help), in the order of a partition's values
# (Metrics._state), then the per-follower ones, in the order of a follower's.
PARTITION_GAUGES = (
    ("isr_partition_in_sync_replicas", "Members of the computed ISR "
     "(kafka_exporter: kafka_topic_partition_in_sync_replica)."),
    ("isr_partition_replicas", "Assigned replicas (AR)."),
    ("isr_partition_leader", "Broker id of the leader, -1 without one."),
    ("isr_partition_min_insync_replicas", "Effective min.insync.replicas."),
    ("isr_partition_under_replicated", "1 if the ISR is smaller than the assignment."),
    ("isr_partition_under_min_isr", "1 if the ISR is below min.insync.replicas."),
    ("isr_partition_at_min_isr", "1 if the ISR is at min.insync.replicas."),
    ("isr_partition_high_watermark", "High watermark (offset)."),
    ("isr_partition_leader_log_end_offset", "Leader LEO (offset)."),
    ("isr_partition_state_timestamp_seconds", "Event time of the partition's latest state."),
)
FOLLOWER_GAUGES = (
    ("isr_follower_lag_seconds", "Follower lag in time (0 at the leader's LEO)."),
    ("isr_follower_time_since_caught_up_seconds",
     "Event time since the follower was last caught up."),
    ("isr_follower_in_isr", "1 if the follower is in the ISR."),
)
_NEVER = (None, None, None, None)  # a follower's values before its first state


class PartitionSeries:
    """The per-partition and per-follower gauges, as a prometheus-client
    custom collector: one immutable entry per partition, turned into
    GaugeMetricFamily samples only when Prometheus scrapes.

    prometheus-client's Gauge keeps a child object (a lock and a value) per
    label set per gauge, 10 per partition and 3 per follower: ~1.2 GB at
    100 k partitions of RF 3, and setting them is a `.labels()` lookup per
    gauge per state.
    Here a partition is one tuple of values and one tuple of followers,
    (replica, lag, time since caught up, in ISR), None for a value never set
    (that series is not shown, as a Gauge child never created).

    Batches replace a partition's entry whole, and a scrape copies the
    references under the lock once, so it sees every partition as one state
    left it, in every family, and never a dict changing size under it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # (cluster, policy, topic, partition) -> (values, followers)
        self._entries: dict[tuple, tuple[tuple, tuple]] = {}

    def followers(self, key: tuple) -> tuple:
        entry = self._entries.get(key)  # (only the batch's thread writes)
        return entry[1] if entry is not None else ()

    def put(self, key: tuple, values: tuple, followers: tuple) -> None:
        with self._lock:
            self._entries[key] = (values, followers)

    def drop(self, key: tuple) -> None:
        with self._lock:
            self._entries.pop(key, None)

    def describe(self) -> list[GaugeMetricFamily]:
        """The names, for the registry (duplicates, `?name[]=` scrapes)."""
        return ([GaugeMetricFamily(n, doc, labels=P_LABELS) for n, doc in PARTITION_GAUGES]
                + [GaugeMetricFamily(n, doc, labels=F_LABELS) for n, doc in FOLLOWER_GAUGES])

    def collect(self) -> Iterable[GaugeMetricFamily]:
        with self._lock:
            entries = list(self._entries.items())
        rows = [((cluster, topic, str(partition), policy), values, followers)
                for (cluster, policy, topic, partition), (values, followers) in entries]
        # One family at a time, as Gauge does: the exposition formats each
        # before the next is built, so only one family's samples are held.
        for i, (name, doc) in enumerate(PARTITION_GAUGES):
            family = GaugeMetricFamily(name, doc, labels=P_LABELS)
            for labels, values, _f in rows:
                family.add_metric(labels, float(values[i]))
            yield family
        for i, (name, doc) in enumerate(FOLLOWER_GAUGES, start=1):
            family = GaugeMetricFamily(name, doc, labels=F_LABELS)
            for labels, _v, followers in rows:
                for f in followers:
                    if f[i] is not None:
                        family.add_metric(labels + (str(f[0]),), float(f[i]))
            yield family


def _flags(s: dict) -> tuple[bool, ...]:
    """A partition_state as the counts see it (the order of COUNTS' indices)."""
    return (s["under_replicated"], s["under_min_isr"], s["at_min_isr"],
            isr_health(s["isr"], s["leader"], len(s["replicas"]), s["min_insync_replicas"])[2],
            s["leader"] < 0)


class Metrics(Sink):
    wants_partition_metrics = True  # the per-partition gauges
    _deliverer: Optional[Deliverer] = None

    def __init__(self, settings: MetricsSettings,
                 registry: Optional[CollectorRegistry] = None) -> None:
        self.settings = settings
        self.registry = registry or CollectorRegistry()
        self._server = None  # the endpoint, once served
        self._topic_patterns = [re.compile(p) for p in settings.topics]
        self._delivery_seen: dict[tuple[str, str], int] = {}
        # (cluster, policy, topic, partition) -> flags; -> wall time of its last state
        self._partitions: dict[tuple, tuple[bool, ...]] = {}
        self._seen: dict[tuple, float] = {}
        r = self.registry

        self.counts = {name: Gauge(name, doc, C_LABELS, registry=r)
                       for name, (doc, _i) in COUNTS.items()}
        # After the counts, before the counters: the exposition's order of old.
        self.series = PartitionSeries()
        r.register(self.series)
        changes = ("cluster", "topic", "policy", "cause")
        self.shrinks = Counter("isr_shrinks_total", "ISR shrinks (Kafka: IsrShrinksPerSec); "
                               "cause leader or controller.", changes, registry=r)
        self.expands = Counter("isr_expands_total", "ISR expands (Kafka: IsrExpandsPerSec).",
                               changes, registry=r)
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
        self.input_lag = Gauge("isr_stream_input_lag_records",
                               "Records in the input topics not read yet (after the last "
                               "micro-batch).", registry=r)
        self.watermark_delay = Gauge("isr_stream_watermark_delay_seconds",
                                     "Wall-clock time minus the stream's event-time watermark.",
                                     registry=r)
        self.state_rows = Gauge("isr_stream_state_rows", "Rows in Spark's state store.",
                                registry=r)
        self.state_memory = Gauge("isr_stream_state_memory_bytes",
                                  "Memory Spark's state store uses (its progress report's "
                                  "memoryUsedBytes, summed over stateful operators).",
                                  registry=r)

    # ------------------------------------------------------------ endpoint
    def serve(self) -> bool:
        """Serve /metrics (TLS and basic auth if configured); a busy port is
        reported, not fatal (the job matters more)."""
        s = self.settings
        app = make_wsgi_app(self.registry)
        if s.basic_auth_username:
            password = os.environ.get(s.basic_auth_password_env or "", "")
            app = _basic_auth(app, s.basic_auth_username, password)
        try:
            server = make_server(s.address, s.port, app, _ThreadingWSGIServer, _QuietHandler)
        except OSError as exc:
            print(f"isr: metrics not served on {s.address}:{s.port}: {exc}", file=sys.stderr)
            return False
        if s.tls_cert_file:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(s.tls_cert_file, s.tls_key_file)
            server.socket = context.wrap_socket(server.socket, server_side=True)
        threading.Thread(target=server.serve_forever, daemon=True, name="isr-metrics").start()
        self._server = server
        return True

    def close(self) -> None:
        """The run ended: the endpoint stops, its port is free again."""
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()

    # ------------------------------------------------------------ as a sink
    def open(self, run: Run) -> None:
        self.serve()
        run.watch_progress(self.observe_progress)
        self._deliverer = next((s for s in run.sinks if isinstance(s, Deliverer)), None)

    def write_batch(self, batch_id: int, records: list[OutputRecord]) -> None:
        self.observe_records(records)
        if self._deliverer is not None:
            self.observe_delivery(self._deliverer.counts, self._deliverer.outbox_size)

    # ------------------------------------------------------------ batches
    def _wanted(self, topic: str) -> bool:
        return not self._topic_patterns or any(p.fullmatch(topic) for p in
                                               self._topic_patterns)

    def observe_records(self, records: Iterable[OutputRecord], now: Optional[float] = None
                        ) -> None:
        """One micro-batch's output records."""
        now = time.time() if now is None else now
        watermark = -1
        for r in records:
            kind, value = r.kind, r.value
            if kind == WATERMARK:  # every bucket reports the same one
                watermark = max(watermark, r.ts)
            elif kind == PARTITION_METRICS:  # every partition the batch touched
                for state in orjson.loads(value):
                    self._state(state, now)
            elif kind == "isr_change":
                d = orjson.loads(value)
                counter = self.shrinks if d["action"] == "shrink" else self.expands
                counter.labels(d["cluster"], d["topic"], d["policy"], d["cause"]).inc()
            elif kind == "alert":
                a = orjson.loads(value)
                self.alerts.labels(a["labels"]["alertname"], a["labels"]["severity"],
                                   a["status"]).inc()
            elif kind == "dead_letter":
                self.dead_letters.labels(orjson.loads(value)["reason_class"]).inc()
        if watermark >= 0:
            self.watermark_delay.set(max(0.0, now - watermark / 1000))
        self._expire(now)

    def _state(self, s: dict, now: float) -> None:
        key = (s["cluster"], s["policy"], s["topic"], s["partition"])
        self._count(key, _flags(s))
        self._seen[key] = now
        if not self.settings.per_partition or not self._wanted(s["topic"]):
            return
        isr, ts = s["isr"], s["ts"]
        values = (len(isr), len(s["replicas"]), s["leader"], s["min_insync_replicas"],
                  int(s["under_replicated"]), int(s["under_min_isr"]), int(s["at_min_isr"]),
                  s["hw"], s["leader_leo"], ts / 1000)
        followers = ()
        if self.settings.per_follower:
            # Only the followers in this state keep series: a replica reassigned
            # away, or now the leader, loses its own at once. A lag or time since
            # caught up this state does not have keeps its last value.
            before = {f[0]: f for f in self.series.followers(key)}
            followers = tuple(
                (f["replica"],
                 f["lag_ms"] / 1000 if f["lag_ms"] is not None
                 else before.get(f["replica"], _NEVER)[1],
                 max(0, ts - f["last_caught_up_ts"]) / 1000 if f["last_caught_up_ts"] > 0
                 else before.get(f["replica"], _NEVER)[2],
                 int(f["in_isr"]))
                for f in s["followers"])
        self.series.put(key, values, followers)

    def _count(self, key: tuple, flags: Optional[tuple[bool, ...]]) -> None:
        """Move a partition's contribution to the cluster-level counts."""
        old = self._partitions.pop(key, None) if flags is None else self._partitions.get(key)
        if flags is not None:
            self._partitions[key] = flags
        cluster, policy = key[0], key[1]
        for name, (_doc, i) in COUNTS.items():
            delta = (0 if flags is None else (1 if i is None else int(flags[i]))) - (
                0 if old is None else (1 if i is None else int(old[i])))
            if delta or old is None:
                self.counts[name].labels(cluster, policy).inc(delta)

    def _expire(self, now: float) -> None:
        """Partitions without a state for series_ttl_s (deleted ones) go."""
        ttl = self.settings.series_ttl_s
        for key in [k for k, seen in self._seen.items() if now - seen > ttl]:
            self.series.drop(key)
            self._count(key, None)
            del self._seen[key]

    def observe_delivery(self, counts, outbox_size: int) -> None:
        """The deliverer's cumulative counts: add what is new since last time."""
        for (receiver, outcome), n in counts.items():
            seen = self._delivery_seen.get((receiver, outcome), 0)
            if n > seen:
                self.deliveries.labels(receiver, outcome).inc(n - seen)
                self._delivery_seen[(receiver, outcome)] = n
        self.outbox.set(outbox_size)

    def observe_progress(self, p: dict) -> None:
        """One StreamingQueryProgress (as a dict, Spark's JSON)."""
        self.batches.inc()
        # Records, not Spark's rows: the Python source packs many into one row.
        records = input_records(p)
        rows = p.get("numInputRows", 0) or 0
        scale = records / rows if rows else 0.0
        self.input_rows.inc(records)
        self.input_rate.set((p.get("inputRowsPerSecond") or 0) * scale)
        self.processed_rate.set((p.get("processedRowsPerSecond") or 0) * scale)
        self.batch_duration.set((p.get("durationMs", {}).get("triggerExecution", 0) or 0) / 1000)
        lag = [input_lag(s) for s in p.get("sources") or []]
        if lag and all(v is not None for v in lag):
            self.input_lag.set(sum(lag))
        ops = p.get("stateOperators") or []
        self.state_rows.set(sum(op.get("numRowsTotal", 0) for op in ops))
        self.state_memory.set(sum(op.get("memoryUsedBytes", 0) or 0 for op in ops))


def _basic_auth(app, username: str, password: str):
    expected = "Basic " + base64.b64encode(f"{username}:{password}".encode()).decode()

    def guarded(environ, start_response):
        given = environ.get("HTTP_AUTHORIZATION", "")
        if not hmac.compare_digest(given.encode(), expected.encode()):
            start_response("401 Unauthorized",
                           [("WWW-Authenticate", 'Basic realm="isr-monitor"'),
                            ("Content-Type", "text/plain")])
            return [b"unauthorized\n"]
        return app(environ, start_response)
    return guarded


class _ThreadingWSGIServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, *args) -> None:  # one line per scrape is noise
        pass
