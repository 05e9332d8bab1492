"""bench_live_bucket.py of the tree on PYTHONPATH, with the CPU seconds
spent in statelog.save summed (and the process's peak RSS):

    PYTHONPATH=TREE python bench/live_save_cpu.py FILE [bench_live_bucket.py's arguments]

prints bench_live_bucket.py's output, then `SAVE_CPU <s> s in <n> saves;
maxrss <MB> MB`. compare_live_trees.py runs it for several trees.
"""

import os
import resource
import runpy
import sys
import time

tree = os.environ["PYTHONPATH"]
sys.path.insert(0, tree + "/bench")
from isr.stream import statelog  # noqa: E402

_save = statelog.save
spent = [0.0, 0]


def save(stored, arrived, key):
    t = time.process_time()
    try:
        return _save(stored, arrived, key)
    finally:
        spent[0] += time.process_time() - t
        spent[1] += 1


statelog.save = save
sys.argv = ["bench_live_bucket.py"] + sys.argv[1:]
try:
    runpy.run_path(tree + "/bench/bench_live_bucket.py", run_name="__main__")
finally:
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"SAVE_CPU {spent[0]:.3f} s in {spent[1]} saves; maxrss {rss:.0f} MB", flush=True)
