"""bench_live_bucket.py of the tree on PYTHONPATH with each statelog.save
traced: per save the bucket, S (whole snapshot) or d (delta), the share of
the models changed, its CPU seconds, the snapshot's and the log's bytes
before it and the row's after; then the saves' and the rebuilds' CPU in all
(a rebuild: a cache miss, statelog._rebuild). SAVEPROF=1: a cProfile of the
saves only.

    PYTHONPATH=TREE python -P bench/live_save_trace.py FILE [bench_live_bucket.py's arguments]
"""
import os, sys, time, runpy, resource
tree = os.environ["PYTHONPATH"]
sys.path.insert(0, tree + "/bench")
from isr.stream import statelog
_save = statelog.save
rows = []
import cProfile, pstats
PROF = cProfile.Profile() if os.environ.get("SAVEPROF") else None
def save(stored, arrived, key):
    eng = stored.bucket.engine
    models = sum(len(p) for p in eng.partitions.values())
    dirty = len(eng.dirty)
    logb = stored.log_bytes; snapb = len(stored.snapshot) if stored.snapshot else 0
    nlog = len(stored.log)
    s0 = statelog.STATS["snapshots"]
    t = time.process_time()
    if PROF: PROF.enable()
    row = _save(stored, arrived, key)
    if PROF: PROF.disable()
    dt = time.process_time() - t
    kind = "S" if statelog.STATS["snapshots"] > s0 else "d"
    rows.append((key, kind, dirty / max(models, 1), dt, snapb, logb, nlog, len(row), models))
    return row
statelog.save = save
_rebuild = statelog._rebuild
rb = [0.0, 0, 0]
def rebuild(processor, blob, header, at, layout, version):
    t = time.process_time()
    try:
        return _rebuild(processor, blob, header, at, layout, version)
    finally:
        rb[0] += time.process_time() - t; rb[1] += 1; rb[2] = max(rb[2], len(blob))
statelog._rebuild = rebuild
sys.argv = ["bench_live_bucket.py"] + sys.argv[1:]
try:
    runpy.run_path(tree + "/bench/bench_live_bucket.py", run_name="__main__")
finally:
    if PROF:
        st = pstats.Stats(PROF); st.sort_stats("tottime").print_stats(30); st.sort_stats("cumulative").print_stats(40)
    tot = sum(r[3] for r in rows)
    for r in rows:
        print(f"SAVE {str(r[0])[:20]:20s} {r[1]} dirty {r[2]*100:5.1f}% {r[3]:6.3f}s snap_before {r[4]:9d} log_before {r[5]:9d} ({r[6]}) row {r[7]:9d} models {r[8]}")
    print(f"REBUILD_CPU {rb[0]:.3f} s in {rb[1]} rebuilds; largest row {rb[2]}")
    print(f"SAVE_CPU {tot:.3f} s in {len(rows)} saves; S {sum(r[3] for r in rows if r[1]=='S'):.3f} d {sum(r[3] for r in rows if r[1]=='d'):.3f}; maxrss {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss/1024:.0f} MB", flush=True)
