"""How late the taps write (issue 23, branch taplate): per directory of tap
outputs (tap-*.jsonl), the events whose ts is behind the newest ts written
before them in the same file, and by how much.

    python bench/tap_order.py DIR [DIR ...]
"""
import glob, sys, orjson
for d in sys.argv[1:]:
    n = behind0 = behind1000 = behind5000 = 0; worst = 0; late_types = {}
    for path in sorted(glob.glob(d + "/tap-*.jsonl")):
        top = None
        for raw in open(path, "rb"):
            e = orjson.loads(raw); n += 1
            if top is not None and e["ts"] < top:
                gap = top - e["ts"]; behind0 += 1; worst = max(worst, gap)
                if gap > 1000: behind1000 += 1
                if gap > 5000:
                    behind5000 += 1; late_types[e["type"]] = late_types.get(e["type"], 0) + 1
            top = e["ts"] if top is None else max(top, e["ts"])
    print(f"{d}: {n:,} events; behind the newest ts before them: {behind0:,} "
          f"(>1000 ms: {behind1000:,}; >5000 ms: {behind5000:,} {late_types}); "
          f"worst {worst:,} ms")
