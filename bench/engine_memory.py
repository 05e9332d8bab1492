"""Where the local engine's memory goes, per partition (issue 23): a file
loaded into the engine as `isr replay` loads it (pipeline/local.py: decoded
in chunks, the decisions taken away, `forget_changes` where the tree has
it), then every component sized once (sys.getsizeof; an object shared by
two components counts in the first), the process's RSS, and the state row
the engine would save (engine/snapshot.py; stream/statelog.py's zstd).

    PYTHONPATH=. python bench/engine_memory.py FILE [--set KEY=VALUE ...] [--trace]

Defaults: policy kafka, alerts on. `--trace`: also tracemalloc's top lines
(slower, and its own memory is in the RSS then). Prints a markdown table.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import os
import sys
import time
import tracemalloc
from itertools import islice

from isr.config import load_settings
from isr.contract import Rejection
from isr.contract.decode import decode_many
from isr.engine import snapshot
from isr.engine.local import LocalEngine
from isr.pipeline.listeners import standard_listeners
from isr.pipeline.local import LINES_PER_DECODE, REPLAY_LOG_CUT_FACTOR, _lines
from isr.stream import statelog


def load(path: str, overrides: list[str]) -> LocalEngine:
    monitor = load_settings(None, ["monitor.policy=kafka", *overrides]).monitor
    engine = LocalEngine(monitor, listeners=standard_listeners(monitor),
                         on_reject=lambda _origin, _reason: None)
    engine.session_driver.cut_factor = REPLAY_LOG_CUT_FACTOR
    lines, seq = _lines([path], None), -1
    for chunk in iter(lambda: list(islice(lines, LINES_PER_DECODE)), []):
        events = decode_many([raw for _s, _o, raw in chunk])
        for event in events:
            seq += 1
            if not isinstance(event, Rejection):
                engine.submit(event, seq, None)
        engine.take_decisions()  # they leave, as a batch's output does
        if hasattr(engine, "forget_changes"):  # (a tree before issue 23's memory work has none)
            engine.forget_changes()
    return engine


class Sizer:
    """Bytes by component; each object counted once, small ints never."""

    def __init__(self) -> None:
        self.seen: set[int] = set()
        self.by: dict[str, int] = {}

    def size(self, *objs) -> int:
        n = 0
        for o in objs:
            if o is None or isinstance(o, bool) or id(o) in self.seen:
                continue
            if isinstance(o, int) and -5 <= o <= 256:
                continue
            self.seen.add(id(o))
            n += sys.getsizeof(o)
        return n

    def add(self, component: str, *objs) -> None:
        self.by[component] = self.by.get(component, 0) + self.size(*objs)


def _ints(obj) -> list:
    return [v for v in (getattr(obj, s) for s in type(obj).__slots__) if isinstance(v, int)]


def size_engine(engine: LocalEngine) -> dict[str, int]:
    z = Sizer()
    for parts in engine.partitions.values():
        z.add("model: engine.partitions table", parts)
        for key, m in parts.items():
            z.add("model: key tuple (cluster, topic, partition)", key, *key)
            z.add("model: PartitionModel object", m)
            z.add("model: its ints (leader_leo, hw, ts, ...)", *_ints(m))
            z.add("model: replicas + isr lists", m.replicas, m.isr)
            z.add("model: followers dict", m.followers)
            for f in m.followers.values():
                z.add("model: Follower objects + ints (leo, last_caught_up_ts, ...)", f, *_ints(f))
            z.add("sessions: model.sessions dict", m.sessions)
            for sid, link in m.sessions.items():
                z.add("sessions: links [replica, position]", sid, link, *link)
    alerts = next((l for l in engine.listeners if getattr(l, "name", "") == "alerts"), None)
    if alerts is not None:
        z.add("alerts: watches table", alerts.watches)
        for key, w in alerts.watches.items():
            z.add("alerts: watch key tuple", key, *key)
            z.add("alerts: Watch object + ints", w, *_ints(w))
            z.add("alerts: served_ms / unserved / alerts dicts", w.served_ms, w.unserved, w.alerts)
            for d in (w.served_ms, w.unserved, w.alerts):
                for k, v in d.items():
                    z.add("alerts: served_ms / unserved / alerts dicts", k, v)
            z.add("alerts: HwStall + FlapWindow (+ times)", w.stall, *_ints(w.stall), w.flaps,
                  w.flaps.times)
            z.add("alerts: reported / held", w.reported, w.held)
        z.add("change records (engine.dirty, watches' dirty)", alerts.dirty)
    z.add("change records (engine.dirty, watches' dirty)", engine.dirty)
    z.add("deadline index", engine.deadlines.heap, engine.deadlines.dirty)
    for entry in engine.deadlines.heap:
        z.add("deadline index", entry, *entry[:2])
    for s in engine.session_driver.sessions.by_sid.values():
        z.add("sessions: cached dict", s.cached)
        for k, v in s.cached.items():
            z.add("sessions: cached keys (topic, partition) + (leader_epoch, fetch_offset)",
                  k, *k, v, *v)
        z.add("sessions: logs", s.log, *(x for e in s.log for x in (e, *e)))
    queued = engine.sequencer.queued
    z.add("queue for the watermark (decoded events)", queued)
    for e in queued:
        z.add("queue for the watermark (decoded events)", e, e[0], e[1], e[2])
        for name in getattr(e[2], "__struct_fields__", ()):
            value = getattr(e[2], name)
            z.add("queue for the watermark (decoded events)", value)
            if isinstance(value, list):
                for p in value:
                    z.add("queue for the watermark (decoded events)", p,
                          *(getattr(p, f) for f in p.__struct_fields__))
    return z.by


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file")
    ap.add_argument("--set", action="append", default=[], dest="settings", metavar="KEY=VALUE")
    ap.add_argument("--trace", action="store_true")
    args = ap.parse_args()
    gc.disable()  # as isr replay (gc_tuning.no_gc_passes)
    if args.trace:
        tracemalloc.start(1)
    started = time.process_time()
    engine = load(args.file, [f"monitor.{s}" if not s.startswith("monitor.") else s
                              for s in args.settings])
    gc.enable()
    gc.collect()
    n = sum(len(parts) for parts in engine.partitions.values())
    with open("/proc/self/status") as f:
        rss = {k: v.strip() for k, v in (line.split(":", 1) for line in f)
               if k in ("VmRSS", "VmHWM")}
    print(f"{n:,} partitions, load {time.process_time() - started:.1f} CPU s, "
          f"RSS {rss['VmRSS']}, peak {rss['VmHWM']}")
    by = size_engine(engine)
    print("\n| component | bytes / partition |\n|---|---:|")
    for name, size in sorted(by.items(), key=lambda kv: -kv[1]):
        print(f"| {name} | {size / n:,.0f} |")
    print(f"| **sum** | **{sum(by.values()) / n:,.0f}** |")
    row = snapshot.snapshot(engine, with_queue=False)
    queue = snapshot.queued_raw(engine)
    chunk = statelog._chunk(queue)[1] if queue else b""
    print(f"\nstate row: snapshot {len(row) / n:,.0f} B/partition as JSON, "
          f"{len(statelog._compress(row)) / n:,.0f} zstd (md5 {hashlib.md5(row).hexdigest()}); "
          f"queue chunk of {len(queue):,} events {len(chunk) / n:,.0f} B/partition zstd")
    if args.trace:
        snap = tracemalloc.take_snapshot()
        root = os.environ.get("PYTHONPATH", "/")
        print("\ntracemalloc, bytes / partition by line:")
        for stat in snap.statistics("lineno")[:25]:
            frame = stat.traceback[0]
            print(f"  {stat.size / n:8,.0f}  {os.path.relpath(frame.filename, root)}:{frame.lineno}")


if __name__ == "__main__":
    main()
