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
  children, and made into samples only when scraped. /metrics
  (_Exposition) writes their lines itself from label text cached per
  partition, streamed in chunks, byte for byte what prometheus-client
  would write (~7x less CPU, no 168 MB string at 100 k partitions).
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
import zlib
from socketserver import ThreadingMixIn
from typing import Iterable, Optional
from urllib.parse import parse_qs
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import orjson
from prometheus_client import CollectorRegistry, Counter, Gauge, make_wsgi_app
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import choose_encoder, gzip_accepted
from prometheus_client.metrics_core import Metric
from prometheus_client.utils import floatToGoString

try:  # prometheus-client's label escaping (0.26; private): _Exposition's labels
    from prometheus_client.openmetrics.exposition import ALLOWUTF8
    from prometheus_client.openmetrics.exposition import _escape as _om_escape
except ImportError:  # another version: /metrics is make_wsgi_app's alone
    _om_escape = None  # type: ignore[assignment]

from isr.config import MetricsSettings
from isr.contract.records import WATERMARK, OutputRecord, metrics_states
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
        # the same key -> its label text (labels()), made at its first scrape
        self._labels: dict[tuple, tuple[str, str]] = {}

    def followers(self, key: tuple) -> tuple:
        entry = self._entries.get(key)  # (only the batch's thread writes)
        return entry[1] if entry is not None else ()

    def put(self, key: tuple, values: tuple, followers: tuple) -> None:
        with self._lock:
            self._entries[key] = (values, followers)

    def drop(self, key: tuple) -> None:
        with self._lock:
            self._entries.pop(key, None)
            self._labels.pop(key, None)

    def describe(self) -> list[GaugeMetricFamily]:
        """The names, for the registry (duplicates, `?name[]=` scrapes)."""
        return ([GaugeMetricFamily(n, doc, labels=P_LABELS) for n, doc in PARTITION_GAUGES]
                + [GaugeMetricFamily(n, doc, labels=F_LABELS) for n, doc in FOLLOWER_GAUGES])

    def collect(self) -> Iterable[Metric]:
        """The families, each over one snapshot of the entries taken here
        (every family sees every partition as one state left it). Their
        samples are made only if something reads them (prometheus-client's
        generate_latest, tests); the endpoint writes their lines itself
        (_Exposition) from the labels cached per partition."""
        with self._lock:
            rows = list(self._entries.items())
        return self.families(rows)

    def families(self, rows: list) -> list["_SeriesFamily"]:
        """The 13 gauges over `rows` ((key, (values, followers)) pairs)."""
        return ([_SeriesFamily(name, doc, self, rows, i, False)
                 for i, (name, doc) in enumerate(PARTITION_GAUGES)]
                + [_SeriesFamily(name, doc, self, rows, i, True)
                   for i, (name, doc) in enumerate(FOLLOWER_GAUGES, start=1)])

    def labels(self, rows: list) -> list[tuple[str, str]]:
        """Each row's label text, as prometheus-client writes it (label names
        sorted, values escaped): ('{cluster="..",partition="..",policy="..",',
        'topic=".."}'); a follower's line puts 'replica="..",' between.
        Cached per partition key, made at its first scrape (not in the batch);
        a dropped partition's goes with it."""
        cache = self._labels
        out, new = [], {}
        for key, _entry in rows:
            text = cache.get(key)
            if text is None:
                cluster, policy, topic, partition = key
                text = new[key] = (
                    f'{{cluster="{_esc(cluster)}",partition="{_esc(str(partition))}",'
                    f'policy="{_esc(policy)}",', f'topic="{_esc(topic)}"}}')
            out.append(text)
        if new:
            with self._lock:  # only for partitions not dropped meanwhile
                entries = self._entries
                cache.update((k, v) for k, v in new.items() if k in entries)
        return out


def _esc(value: str) -> str:
    """A label value as prometheus-client escapes it (both formats)."""
    return _om_escape(value, ALLOWUTF8, None)  # type: ignore[arg-type]  # (unused with ALLOWUTF8)


class _SeriesFamily(Metric):
    """One per-partition or per-follower gauge over a snapshot of
    PartitionSeries' entries: `samples` is made on demand, the endpoint
    writes the lines without it (_Exposition._lines)."""

    def __init__(self, name: str, doc: str, series: PartitionSeries, rows: list, index: int,
                 follower: bool) -> None:
        super().__init__(name, doc, "gauge")
        self.series, self.rows, self.index, self.follower = series, rows, index, follower

    @property
    def samples(self) -> list:
        family = GaugeMetricFamily(self.name, self.documentation,
                                   labels=F_LABELS if self.follower else P_LABELS)
        i = self.index
        for (cluster, policy, topic, partition), (values, followers) in self.rows:
            labels = (cluster, topic, str(partition), policy)
            if not self.follower:
                family.add_metric(labels, float(values[i]))
                continue
            for f in followers:
                if f[i] is not None:
                    family.add_metric(labels + (str(f[0]),), float(f[i]))
        return family.samples

    @samples.setter
    def samples(self, _value) -> None:  # Metric.__init__ sets []
        pass

    def any_sample(self) -> bool:
        if not self.follower:
            return bool(self.rows)
        i = self.index
        return any(f[i] is not None for _k, (_v, fs) in self.rows for f in fs)

    def _restricted_metric(self, names):
        """`?name[]=`: this family whole if asked and not empty (as
        Metric._restricted_metric keeps the samples of the names asked)."""
        return self if self.name in names and self.any_sample() else None


class _Exposition:
    """/metrics: what make_wsgi_app serves, byte for byte (its content
    negotiation, `?name[]=`, gzip), but PartitionSeries' families written
    here from cached label text, and the whole streamed in chunks instead
    of one string (~168 MB at 100 k partitions of RF 3).

    Everything else, and every header line, is prometheus-client's own
    encoder's output. A format whose sample lines would not be ours (a
    name escaping that rewrites names: checked on a probe sample, per
    Accept header) is left to prometheus-client whole."""

    CHUNK = 1 << 18  # characters per chunk written

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.fallback = make_wsgi_app(registry)
        self._probed: dict[str, bool] = {}

    def __call__(self, environ, start_response):
        if environ.get("REQUEST_METHOD") != "GET" or environ.get("PATH_INFO") == "/favicon.ico":
            return self.fallback(environ, start_response)
        accept = environ.get("HTTP_ACCEPT")
        encoder, content_type = choose_encoder(accept)
        if not self._ours(accept or "", encoder):
            return self.fallback(environ, start_response)
        params = parse_qs(environ.get("QUERY_STRING", ""))
        headers = [("Content-Type", content_type)]
        chunks = self.chunks(encoder, params.get("name[]"))
        if gzip_accepted(environ.get("HTTP_ACCEPT_ENCODING")):
            headers.append(("Content-Encoding", "gzip"))
            chunks = _gzip(chunks)
        start_response("200 OK", headers)
        return chunks

    def _ours(self, accept: str, encoder) -> bool:
        """Whether prometheus-client writes a sample line of ours as we do."""
        ok = self._probed.get(accept)
        if ok is None:
            rows = [(("c\\a\"b\nc", 'p"1', "t.o-p_ic", 7),
                     ((3, 2, -1, 2, 1, 0, 1, 123456789, 1e21, 1.5),
                      ((2, None, 0.25, 1), (3, 1e-7, None, 0))))]
            families = PartitionSeries().families(rows)
            plain = [GaugeMetricFamily(f.name, f.documentation) for f in families]
            for f, g in zip(families, plain):
                g.samples = f.samples
            try:
                ok = b"".join(self._write(families, encoder)) == encoder(_Collected(plain))
            except Exception:  # noqa: BLE001 (prometheus-client then does it all)
                ok = False
            self._probed[accept] = ok
        return ok

    def chunks(self, encoder, names: Optional[list]) -> Iterable[bytes]:
        """The exposition in chunks: the registry's families in its order
        (RestrictedRegistry's with `names`, as prometheus-client does)."""
        registry = self.registry.restricted_registry(names) if names else self.registry
        return self._write(registry.collect(), encoder)

    def _write(self, families: Iterable[Metric], encoder) -> Iterable[bytes]:
        end = encoder(_Collected([]))  # b"" or OpenMetrics' b"# EOF\n"
        others: list[Metric] = []
        for family in families:
            if not isinstance(family, _SeriesFamily):
                others.append(family)
                continue
            if others:
                yield encoder(_Collected(others))[:-len(end) or None]
                others = []
            head = encoder(_Collected([Metric(family.name, family.documentation, "gauge")]))
            yield head[:-len(end) or None]
            yield from self._lines(family)
        if others:
            yield encoder(_Collected(others))[:-len(end) or None]
        if end:
            yield end

    def _lines(self, family: _SeriesFamily) -> Iterable[bytes]:
        rows = family.rows
        labels = family.series.labels(rows)
        name, i, fmt = family.name, family.index, floatToGoString
        step = max(1, self.CHUNK // 100)
        for start in range(0, len(rows), step):
            part = zip(labels[start:start + step], rows[start:start + step])
            if not family.follower:
                text = "".join([f"{name}{head}{tail} {fmt(values[i])}\n"
                                for (head, tail), (_k, (values, _f)) in part])
            else:
                text = "".join([f'{name}{head}replica="{f[0]}",{tail} {fmt(f[i])}\n'
                                for (head, tail), (_k, (_v, followers)) in part
                                for f in followers if f[i] is not None])
            if text:
                yield text.encode()


class _Collected:
    """Families already collected, as a registry for prometheus-client's encoders."""

    def __init__(self, families: list) -> None:
        self.families = families

    def collect(self) -> list:
        return self.families


def _gzip(chunks: Iterable[bytes]) -> Iterable[bytes]:
    z = zlib.compressobj(6, zlib.DEFLATED, 31)  # gzip container
    for chunk in chunks:
        out = z.compress(chunk)
        if out:
            yield out
    yield z.flush()


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
        self._server: Optional[WSGIServer] = None  # the endpoint, once served
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
        # what /metrics serves (serve())
        self.wsgi_app = _Exposition(r) if _om_escape is not None else make_wsgi_app(r)

    # ------------------------------------------------------------ endpoint
    def serve(self) -> bool:
        """Serve /metrics (TLS and basic auth if configured); a busy port is
        reported, not fatal (the job matters more)."""
        s = self.settings
        app = self.wsgi_app
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
        records = records if isinstance(records, list) else list(records)
        watermark = -1
        moves: dict[tuple, list] = {}  # the cluster counts' changes (_count, _move_counts)
        for state in metrics_states(records):  # every partition the batch touched
            self._state(state, now, moves)
        for r in records:
            kind, value = r.kind, r.value
            if kind == WATERMARK:  # every bucket reports the same one
                watermark = max(watermark, r.ts)
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
        self._expire(now, moves)
        self._move_counts(moves)

    def _state(self, s: dict, now: float, moves: dict) -> None:
        key = (s["cluster"], s["policy"], s["topic"], s["partition"])
        flags = _flags(s)
        if self._partitions.get(key) != flags:  # (most states move no count)
            self._count(key, flags, moves)
        self._seen[key] = now
        settings = self.settings
        if not settings.per_partition or (self._topic_patterns and not self._wanted(s["topic"])):
            return
        isr, ts = s["isr"], s["ts"]
        values = (len(isr), len(s["replicas"]), s["leader"], s["min_insync_replicas"],
                  int(s["under_replicated"]), int(s["under_min_isr"]), int(s["at_min_isr"]),
                  s["hw"], s["leader_leo"], ts / 1000)
        followers: tuple = ()
        if settings.per_follower:
            # Only the followers in this state keep series: a replica reassigned
            # away, or now the leader, loses its own at once. A lag or time since
            # caught up this state does not have keeps its last value.
            followers = tuple([
                (f["replica"], f["lag_ms"] / 1000, max(0, ts - f["last_caught_up_ts"]) / 1000,
                 int(f["in_isr"]))
                if f["lag_ms"] is not None and f["last_caught_up_ts"] > 0
                else self._follower_kept(key, f, ts) for f in s["followers"]])
        self.series.put(key, values, followers)

    def _follower_kept(self, key: tuple, f: dict, ts: int) -> tuple:
        """A follower's values, the lag or time since caught up the state
        lacks (never measured yet) kept from the partition's last state."""
        before = next((b for b in self.series.followers(key) if b[0] == f["replica"]), _NEVER)
        return (f["replica"],
                f["lag_ms"] / 1000 if f["lag_ms"] is not None else before[1],
                max(0, ts - f["last_caught_up_ts"]) / 1000 if f["last_caught_up_ts"] > 0
                else before[2],
                int(f["in_isr"]))

    def _count(self, key: tuple, flags: Optional[tuple[bool, ...]], moves: dict) -> None:
        """Move a partition's contribution to the cluster-level counts, in
        `moves` ((cluster, policy) -> [a change per count..., whether a
        partition came or went]), which _move_counts applies after the batch:
        one Gauge child's `.inc` per count that moved in the batch instead of
        six `.labels().inc()` per new partition (600 k of them for 100 k
        partitions' first states; docs/benchmarks.md, branch `drivercost`)."""
        old = self._partitions.pop(key, None) if flags is None else self._partitions.get(key)
        if flags is not None:
            self._partitions[key] = flags
        move = moves.get(key[:2])
        if move is None:
            move = moves[key[:2]] = [0] * (len(COUNTS) + 1)
        if old is None:
            move[-1] = 1  # each count's child exists (a 0 shown) from a first state on
        for j, (_doc, i) in enumerate(COUNTS.values()):
            move[j] += (0 if flags is None else (1 if i is None else int(flags[i]))) - (
                0 if old is None else (1 if i is None else int(old[i])))

    def _move_counts(self, moves: dict) -> None:
        """Apply a batch's changes to the counts (_count): every count of a
        (cluster, policy) a partition came to or left, and every other that
        moved."""
        for (cluster, policy), move in moves.items():
            for j, name in enumerate(COUNTS):
                if move[j] or move[-1]:
                    self.counts[name].labels(cluster, policy).inc(move[j])

    def _expire(self, now: float, moves: dict) -> None:
        """Partitions without a state for series_ttl_s (deleted ones) go."""
        ttl = self.settings.series_ttl_s
        for key in [k for k, seen in self._seen.items() if now - seen > ttl]:
            self.series.drop(key)
            self._count(key, None, moves)
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
            self.input_lag.set(sum(lag))  # type: ignore[arg-type]  # (no None: all() above)
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
