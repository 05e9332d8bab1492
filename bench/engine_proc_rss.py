"""The job's bucket calls through two real engine processes (engineproc.call),
batches packed as bench_live_bucket.py packs them; after each call the engine
process's VmHWM (peak since the previous reset) and VmRSS, then the peak is
reset. Usage (from /tmp, PYTHONPATH=TREE):
    python bench/engine_proc_rss.py FILE --batch 100000 --buckets 2 \
        --set monitor.replica_lag_time_max_ms=10000 [--probe] [--end]
--probe: the engine processes are bench/engine_proc_probe.py, which resets the
peak around each phase of a call and logs it to $PROBE_LOG (the per-call peaks
printed here are then only the last phases'; read the log).
--census N: the engine processes are bench/engine_proc_census.py, which write
what they hold after their Nth call to $CENSUS_OUT.<pid> (read its docstring).
Issue 23,
docs/benchmarks.md, branch `enginerss`."""
import argparse, hashlib, os, subprocess, sys, time, zlib
import orjson
from isr.config import load_settings
from isr.contract.events import routing_key
from isr.stream import engineproc
from isr.stream.operator import OutputRecord, job_processor_config
from isr.stream.packing import END_OF_INPUT, Packer

ap = argparse.ArgumentParser()
ap.add_argument("file"); ap.add_argument("--batch", type=int, default=100000)
ap.add_argument("--buckets", type=int, default=2); ap.add_argument("--input-partitions", type=int, default=2)
ap.add_argument("--probe", action="store_true"); ap.add_argument("--end", action="store_true")
ap.add_argument("--census", type=int, help="engine processes write a census after this call")
ap.add_argument("--set", action="append", default=[])
args = ap.parse_args()
settings = load_settings(None, ['monitor.policy=["kafka"]', "monitor.alerts.enabled=true", *args.set])
monitor = settings.monitor
settings_json = job_processor_config(
    settings, settings.metrics.enabled and settings.metrics.per_partition)
parts = [[] for _ in range(args.input_partitions)]
for line in open(args.file, "rb"):
    line = line.rstrip(b"\r\n")
    if line.strip():
        parts[zlib.crc32(routing_key(orjson.loads(line))) % args.input_partitions].append(line)
labels = list(range(args.buckets))
packers = [Packer(labels, monitor.max_future_ms) for _ in parts]
end_packer = Packer(labels, monitor.max_future_ms)
# start the engine processes ourselves (the probing one with --probe)
procs = []
env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="1048576")
if args.census:
    env.update(CENSUS_AT=str(args.census), CENSUS_OUT=os.environ.get("CENSUS_OUT", "census"))
here = os.path.dirname(os.path.abspath(__file__))
probe = "engine_proc_census.py" if args.census else "engine_proc_probe.py" if args.probe else None
for b in labels:
    path = engineproc.address((b, args.buckets))
    cmd = [sys.executable, *([os.path.join(here, probe)] if probe else ["-m", "isr.stream.engineproc"]),
           path, str(os.getppid())]
    procs.append(subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL))
for b, p in zip(labels, procs):
    while engineproc._try_connect(engineproc.address((b, args.buckets))) is None:
        time.sleep(0.05)
def status(pid):
    d = {}
    for line in open(f"/proc/{pid}/status"):
        if line.startswith(("VmRSS", "VmHWM")):
            k, v = line.split(":"); d[k] = int(v.split()[0]) // 1024
    return d
def cpu(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
for p in procs:
    open(f"/proc/{p.pid}/clear_refs", "w").write("5")
blobs = [None] * len(labels)
digest = hashlib.md5()
share = -(-args.batch // len(parts)); pos = [0] * len(parts)
last_ts = max(orjson.loads(lines[-1])["ts"] for lines in parts if lines)
ended = not args.end; batch = 0
peaks = [0] * len(labels); cpus = [0.0] * len(labels)
query = ("bench", settings_json)
while not ended or any(p < len(l) for p, l in zip(pos, parts)):
    rows_by_bucket = [[] for _ in labels]
    if all(p >= len(l) for p, l in zip(pos, parts)):
        ended = True
        for b, (_l, pack, summ) in enumerate(end_packer.pack([str(last_ts)], [END_OF_INPUT], ["in"], [-1], [0], None)):
            rows_by_bucket[b].append((pack, summ))
    for i, lines in enumerate(parts):
        chunk = lines[pos[i]:pos[i] + share]
        if not chunk: continue
        offsets = list(range(pos[i], pos[i] + len(chunk))); pos[i] += len(chunk)
        for b, (_l, pack, summ) in enumerate(packers[i].pack([None] * len(chunk), chunk, ["in"] * len(chunk), [i] * len(chunk), offsets, None, [False] * len(chunk))):
            rows_by_bucket[b].append((pack, summ))
    line = [f"batch {batch}:"]
    for b in labels:
        pid = procs[b].pid
        c0 = cpu(pid); before = status(pid)["VmRSS"]
        reply = engineproc.call(settings_json, (b, args.buckets), blobs[b],
                                [p for p, _ in rows_by_bucket[b]], [s for _, s in rows_by_bucket[b]], query)
        if isinstance(reply, tuple):  # a tree before the reply in pieces
            rows, blobs[b] = reply
        else:
            rows = [r for piece in reply.pieces() for r in piece]; blobs[b] = reply.row
        time.sleep(0.05)
        s = status(pid); c = cpu(pid) - c0; cpus[b] += c
        open(f"/proc/{pid}/clear_refs", "w").write("5")
        peaks[b] = max(peaks[b], s["VmHWM"])
        line.append(f"b{b} before {before} peak {s['VmHWM']} after {s['VmRSS']} MB cpu {c:.2f}s rows {len(rows)} row {len(blobs[b])/1e6:.1f}MB;")
        for r in rows:
            digest.update(orjson.dumps([batch, b, *r]) + b"\n")
        del rows
    print(" ".join(line), flush=True)
    batch += 1
print(f"peaks per engine process {peaks} MB; engine CPU s {[round(c,2) for c in cpus]} sum {sum(cpus):.2f}; md5 {digest.hexdigest()}")
for b, p in zip(labels, procs):
    engineproc.stop((b, args.buckets)); p.wait()
