"""The realistic cluster as request logs through the request-log tap (issue 23):
its volume and the tap's CPU per second of cluster time.

    python bench/bench_reqtap.py EVENTS.jsonl DIR [--render] [--compare] [--set KEY=VALUE ...]

--render writes DIR's request logs from EVENTS (bench/render_requestlog.py:
one kafka-request-N.log per leader broker, and metadata-events.jsonl).
Then every broker's log goes through `isr tap request-log`'s own path
(RequestLogTap at the session grain, read_lines, the file Sink: what the CLI
runs after its start-up) in this process, one broker after the other, into
DIR/tap-N.jsonl; each broker's CPU seconds (time.process_time, the tap and
its reading and writing, not the interpreter's start or imports) are summed.
In a real cluster each broker's log is tapped on its own machine, so the
per-broker maximum is what one tap must keep up with; the sum is what one core
tapping every broker's log would need.

--compare replays EVENTS and the taps' outputs merged with
metadata-events.jsonl (`isr replay --merge`, policy kafka, with --set's) and
compares the isr_change and partition_state records.
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import subprocess
import sys
import time

import orjson

HERE = os.path.dirname(os.path.abspath(__file__))


def span_s(events: str) -> float:
    first = last = None
    with open(events, "rb") as f:
        for raw in f:
            ts = orjson.loads(raw)["ts"]
            first = ts if first is None else first
            last = ts
    return ((last - first) / 1000) if first is not None else 0.0


def broker_logs(out_dir: str) -> list[tuple[int, str]]:
    """(broker, path) of each rendered kafka-request-<broker>.log, by broker id."""
    logs = glob.glob(os.path.join(out_dir, "kafka-request-*.log"))
    return sorted((int(re.search(r"-(\d+)\.log$", p).group(1)), p) for p in logs)


def tap_all(out_dir: str) -> list[tuple[int, int, int, int, float]]:
    """(broker, log bytes, lines, events written, CPU s) per broker log."""
    from isr.tap.lines import events_of, read_lines
    from isr.tap.request_log import RequestLogTap

    rows = []
    for broker, path in broker_logs(out_dir):
        start = time.process_time()
        tap = RequestLogTap(broker, grain="session")
        written = 0
        with open(os.path.join(out_dir, f"tap-{broker}.jsonl"), "wb") as out:
            for ev in events_of(tap, read_lines(path, False)):
                out.write(orjson.dumps(ev) + b"\n")
                written += 1
        rows.append((broker, os.path.getsize(path), tap.lines, written,
                     time.process_time() - start))
    return rows


def decisions(args: list[str]) -> list[bytes]:
    r = subprocess.run([sys.executable, "-m", "isr.cli", "replay", "-q", *args],
                       capture_output=True, check=True)
    return [line for line in r.stdout.splitlines()
            if b'"type":"isr_change"' in line or b'"type":"partition_state"' in line]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("events")
    ap.add_argument("dir")
    ap.add_argument("--render", action="store_true")
    ap.add_argument("--compare", action="store_true")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    a = ap.parse_args()
    seconds = span_s(a.events)
    if a.render:
        sys.path.insert(0, HERE)
        import render_requestlog

        start = time.process_time()
        render_requestlog.render(a.events, a.dir)
        print(f"render: {time.process_time() - start:.1f} CPU s")
    rows = tap_all(a.dir)
    size = sum(r[1] for r in rows)
    lines = sum(r[2] for r in rows)
    cpu = sum(r[4] for r in rows)
    worst = max(rows, key=lambda r: r[4])
    print(f"cluster time {seconds:.1f} s; {len(rows)} broker logs, {size:,} bytes, {lines:,} lines "
          f"({size / seconds / 1e6:.2f} MB/s, {lines / seconds:,.0f} lines/s of cluster time)")
    print(f"tap: {cpu:.1f} CPU s in all = {cpu / seconds:.3f} CPU s per cluster s "
          f"({seconds / cpu:.1f}x real time on one core); busiest broker {worst[0]}: "
          f"{worst[4]:.2f} CPU s, {worst[1]:,} bytes, {worst[2]:,} lines "
          f"({worst[4] / seconds:.4f} CPU s per cluster s); "
          f"{sum(r[3] for r in rows):,} events written")
    if a.compare:
        sets = [x for kv in a.set for x in ("--set", kv)]
        want = decisions([a.events, *sets])
        got = decisions(["--merge", os.path.join(a.dir, "metadata-events.jsonl"),
                         *sorted(glob.glob(os.path.join(a.dir, "tap-*.jsonl"))), *sets])
        changes = sum(b'"isr_change"' in x for x in want)
        same = "identical" if got == want else f"DIFFERENT ({len(set(got) ^ set(want))} records)"
        print(f"decisions: {changes} isr_change + {len(want) - changes} partition_state "
              f"directly; through the tap: {same}")


if __name__ == "__main__":
    main()
