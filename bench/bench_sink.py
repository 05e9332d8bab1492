"""The driver's Prometheus sink alone (isr/sinks/prometheus.py Metrics), on a
run's recorded output records, in several source trees interleaved: its CPU
per batch, the memory its series hold, one full scrape, and the scrape's
text after every batch.

    python bench/bench_live_bucket.py FILE --set monitor.replica_lag_time_max_ms=10000 \\
        --batch 100000 --dump /tmp/x/records.jsonl
    python bench/bench_sink.py /tmp/x/records.jsonl main=/work/main new=. --rounds 2 \\
        [--set metrics.series_ttl_s=2] [--exposition] [--tracemalloc]

Each run is a child process (`--one`) importing `isr` from its tree only
(PYTHONPATH), fed the dump's batches as bench_live_bucket.py `--sink` feeds
them (`observe_records(records, now=1e9 + batch)`, so one batch is one
second for `metrics.series_ttl_s`). Measured: CPU seconds
(time.process_time) of the first batch with partition states, which
creates every series, and of the later ones; RSS before and after the
first batch; after the last batch one scrape
(prometheus_client.generate_latest, what /metrics serves): CPU and wall
seconds, bytes, and the peak RSS it reached. `--tracemalloc`: also the
bytes the sink holds after the first batch (traced allocations still
live; the times of such a run are inflated). `--exposition`: after every batch an md5
of the scrape text with each family's lines sorted (families in their
order, HELP and TYPE included), and one of the text as served; per batch in
`--out`. Trees agree when the sorted md5s are equal after every batch.
"""

from __future__ import annotations

import gc
import hashlib
import json
import resource
import sys
import time

from treeruns import interleaved, parser  # bench/ is on sys.path: the scripts run from it


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def sorted_exposition(text: bytes, order: bool = True) -> bytes:
    """The text with each family's lines sorted (the order of series within
    a family is the only freedom the exposition format leaves; `order`
    False: as served) and the counters' `_created` values blanked (the wall
    time the sink was made)."""
    blocks: list[list[bytes]] = []
    for line in text.splitlines():
        if line.startswith(b"# HELP ") or not blocks:
            blocks.append([])
        if b"_created" in line and not line.startswith(b"#"):
            line = line.rsplit(b" ", 1)[0] + b" CREATED"
        blocks[-1].append(line)
    return b"\n".join(b"\n".join(sorted(b) if order else b) for b in blocks) + b"\n"


FILTER = "name[]=isr_partitions&name[]=isr_partition_leader&name[]=isr_follower_lag_seconds"
# what a scrape asks /metrics: the text format, OpenMetrics, each gzipped, a name filter
VARIANTS = {"text": ("", "", ""),
            "openmetrics": ("application/openmetrics-text; version=1.0.0", "", ""),
            "text-gzip": ("", "gzip", ""),
            "openmetrics-gzip": ("application/openmetrics-text; version=1.0.0", "gzip", ""),
            "text-filter": ("", "", FILTER)}


def endpoint(sink):
    """The WSGI app /metrics serves: the sink's own if it has one
    (`wsgi_app`, branch scrapefast), else prometheus-client's make_wsgi_app."""
    app = getattr(sink, "wsgi_app", None)
    if app is None:
        from prometheus_client import make_wsgi_app
        app = make_wsgi_app(sink.registry)
    return app


def scrape(app, accept: str = "", encoding: str = "", query: str = "",
           keep: bool = True) -> tuple[bytes, int]:
    """One GET of /metrics through the app: (the body, decompressed if
    gzipped, or b"" if not `keep`; its size as served)."""
    import gzip
    import zlib
    environ = {"REQUEST_METHOD": "GET", "PATH_INFO": "/metrics", "QUERY_STRING": query,
               "HTTP_ACCEPT": accept, "HTTP_ACCEPT_ENCODING": encoding}
    headers = []
    body = app(environ, lambda status, h: headers.extend(h))
    gz = ("Content-Encoding", "gzip") in headers
    z = zlib.decompressobj(31) if gz else None
    parts, size = [], 0
    for chunk in body:
        size += len(chunk)
        if keep:
            parts.append(chunk if z is None else z.decompress(chunk))
    if keep and z is not None:
        parts.append(z.flush())
    return b"".join(parts), size


def load(path: str) -> list[list]:
    """The dump's records by batch (bench_live_bucket.py --dump lines:
    [batch, bucket, kind, key, id, ts, value])."""
    import orjson

    from isr.contract.records import OutputRecord
    batches: list[list] = []
    with open(path, "rb") as f:
        for line in f:
            batch, _bucket, *record = orjson.loads(line)
            while len(batches) <= batch:
                batches.append([])
            batches[batch].append(OutputRecord(*record))
    return batches


def one(args) -> dict:
    import tracemalloc

    from prometheus_client import generate_latest

    from isr.config import load_settings
    from isr.contract.records import PARTITION_METRICS
    from isr.sinks.prometheus import Metrics
    batches = load(args.dump)
    settings = load_settings(None, args.set)
    gc.collect()
    out = {"rss_before_mb": rss_mb()}
    if args.tracemalloc:
        tracemalloc.start()
    sink = Metrics(settings.metrics)
    app = endpoint(sink)
    cpu, digests = [], []
    # the first batch with partition states (the stream's first ones
    # release no events yet): the one that creates every series
    first = next(n for n, records in enumerate(batches)
                 if any(r.kind == PARTITION_METRICS and r.value != "[]" for r in records))
    for n, records in enumerate(batches):
        t = time.process_time()
        sink.observe_records(records, now=1e9 + n)
        cpu.append(time.process_time() - t)
        if n == first:
            gc.collect()
            out["rss_after_first_mb"] = rss_mb()
            if args.tracemalloc:
                out["traced_after_first_mb"] = tracemalloc.get_traced_memory()[0] / 2**20
        if args.exposition:
            text = generate_latest(sink.registry)
            served = {}
            for v, (accept, encoding, query) in VARIANTS.items():
                body = scrape(app, accept, encoding, query)[0]
                if v == "text-filter":  # RestrictedRegistry's family order is a set's
                    body = b"\n".join(sorted(sorted_exposition(body).splitlines())) + b"\n"
                served[v] = hashlib.md5(sorted_exposition(body, False)).hexdigest()
            digests.append((hashlib.md5(sorted_exposition(text)).hexdigest(),
                            hashlib.md5(sorted_exposition(text, False)).hexdigest(),
                            len(text), served))
    if args.tracemalloc:
        tracemalloc.stop()
    out.update(first_cpu_s=cpu[first], later_cpu_s=sum(cpu[first + 1:]), cpu_per_batch=cpu,
               first=first, batches=len(batches))
    gc.collect()
    out["rss_before_scrape_mb"] = rss_mb()
    if args.scrape == "generate_latest":
        t, w = time.process_time(), time.perf_counter()
        text = generate_latest(sink.registry)
        cpu, wall, size = time.process_time() - t, time.perf_counter() - w, len(text)
    else:  # through /metrics' app, its chunks dropped as a socket would
        accept, encoding, query = VARIANTS[args.scrape]
        t, w = time.process_time(), time.perf_counter()
        size = scrape(app, accept, encoding, query, keep=False)[1]
        cpu, wall = time.process_time() - t, time.perf_counter() - w
        out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        text = scrape(app, accept, encoding, query)[0]
    out.update(scrape_cpu_s=cpu, scrape_wall_s=wall, scrape_bytes=size,
               scrape_lines=text.count(b"\n"),
               scrape_sorted_md5=hashlib.md5(sorted_exposition(text)).hexdigest())
    out.setdefault("peak_rss_mb", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    if args.exposition:
        out["exposition"] = digests
    return out


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--exposition", action="store_true")
    ap.add_argument("--tracemalloc", action="store_true")
    ap.add_argument("--scrape", default="generate_latest",
                    choices=["generate_latest", *VARIANTS],
                    help="the full scrape measured: prometheus_client.generate_latest (as "
                    "before), or a GET through the endpoint's WSGI app (endpoint()) in that "
                    "variant, bytes as served")
    ap.add_argument("--out", help="write every run's result here (JSON lines)")
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one(args)))
        return
    trees = [t.split("=", 1) for t in args.trees]
    flags = [f"--set={s}" for s in args.set] + ["--exposition"] * args.exposition \
        + ["--tracemalloc"] * args.tracemalloc + [f"--scrape={args.scrape}"]
    results = []
    for r, name, res in interleaved(__file__, args.dump, trees, args.rounds, flags):
        res.update(tree=name, round=r)
        results.append(res)
        print(f"round {r} {name}: first batch {res['first_cpu_s']:.2f} CPU s, later "
              f"{res['later_cpu_s']:.2f} ({res['batches'] - res['first'] - 1} batches); RSS "
              f"{res['rss_before_mb']:.0f} -> {res['rss_after_first_mb']:.0f} MB after the "
              f"first"
              + (f", traced {res['traced_after_first_mb']:.1f} MB" if args.tracemalloc
                 else "")
              + f"; scrape {res['scrape_cpu_s']:.2f} CPU s / {res['scrape_wall_s']:.2f} s "
              f"wall, {res['scrape_bytes']:,} bytes, {res['scrape_lines']:,} lines, "
              f"peak RSS {res['peak_rss_mb']:.0f} MB, sorted md5 "
              f"{res['scrape_sorted_md5'][:12]}", flush=True)
    if args.out:
        with open(args.out, "w") as f:
            for res in results:
                f.write(json.dumps(res) + "\n")
    if args.exposition and len(trees) > 1:
        by_tree = {}
        for res in results:
            by_tree.setdefault(res["tree"], res["exposition"])
        first, *others = by_tree.values()
        for name, seq in by_tree.items():
            same = sum(a[0] == b[0] for a, b in zip(first, seq))
            raw = sum(a[1] == b[1] for a, b in zip(first, seq))
            endpoint_same = {v: sum(a[3][v] == b[3][v] for a, b in zip(first, seq))
                             for v in VARIANTS}
            print(f"{name}: sorted exposition equal to {trees[0][0]}'s after {same} of "
                  f"{len(first)} batches (as served: {raw}); /metrics as served equal after "
                  + ", ".join(f"{v} {n}" for v, n in endpoint_same.items())
                  + "; per batch "
                  + ", ".join(f"{s[:8]}/{n:,}B" for s, _r, n, _e in seq))


if __name__ == "__main__":
    main()
