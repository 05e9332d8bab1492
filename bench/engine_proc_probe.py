"""bench/engine_proc_rss.py --probe runs this: an engine process (isr.stream.engineproc.serve) with RSS probes around a
call's phases: before each phase the peak (VmHWM) is reset (clear_refs 5),
after it the phase's peak and the RSS are appended to PROBE_LOG."""
import os, sys, time, json

LOG = os.environ["PROBE_LOG"]

def status():
    d = {}
    for line in open("/proc/self/status"):
        if line.startswith(("VmRSS", "VmHWM")):
            k, v = line.split(":"); d[k] = int(v.split()[0]) // 1024
    return d

def reset():
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")

def wrap(mod, name, label):
    fn = getattr(mod, name)
    def w(*a, **k):
        reset(); before = status()["VmRSS"]
        r = fn(*a, **k)
        s = status()
        with open(LOG, "a") as f:
            f.write(json.dumps({"pid": os.getpid(), "phase": label, "before": before,
                                "peak": s["VmHWM"], "after": s["VmRSS"]}) + "\n")
        return r
    setattr(mod, name, w)

from isr.stream import engineproc, operator, statelog
wrap(engineproc, "_recv", "recv")
wrap(statelog, "load", "load")
wrap(operator, "unpack", "unpack")
orig_process = operator.BucketProcessor.process
class P: pass
def process(self, *a, **k):
    reset(); before = status()["VmRSS"]
    r = orig_process(self, *a, **k)
    s = status()
    with open(LOG, "a") as f:
        f.write(json.dumps({"pid": os.getpid(), "phase": "process", "before": before,
                            "peak": s["VmHWM"], "after": s["VmRSS"]}) + "\n")
    return r
operator.BucketProcessor.process = process
wrap(statelog, "save", "save")
from isr.engine import snapshot as snapmod
wrap(statelog, "_chunk", "chunk")
wrap(snapmod, "snapshot", "snapshot")
wrap(snapmod, "delta", "delta")
wrap(statelog, "_compress", "compress")
wrap(engineproc, "_send", "send")
wrap(engineproc.trim, "give_back", "trim")
engineproc.serve(sys.argv[1], int(sys.argv[2]))
