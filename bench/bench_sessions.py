"""Fetch sessions (issue 23): how many input events an idle cluster produces
per second at each grain, and the local engine's throughput on both.

The cluster: `--partitions` partitions, RF 3, `--brokers` brokers, leaders
and followers spread round-robin; every follower sends one FETCH per leader
every 500 ms (one fetcher thread), and `--active` of the partitions get an
append every 500 ms, which their followers fetch in the next request. At the
partition grain each FETCH is one `fetch` per partition of its session (what
the tap and the generator emit today); at the session grain it is one
`fetch_session` listing only the partitions whose offset moved.

    .venv/bin/python bench/bench_sessions.py --partitions 5000 --brokers 30 --seconds 30

`--check-ms N` runs the checks every N ms of event time, as the stream does
at each micro-batch (`advance_all` up to the batch's end; 0: once, at the
end), and reports the time they took. `--index both` runs the engine with
and without its deadline index (isr/engine/deadlines.py); `--grain session`
skips the partition grain (at 100 k partitions it is millions of events).
"""

from __future__ import annotations

import argparse
import time

from isr.config import MonitorSettings
from isr.contract.events import SessionPartition
from isr.contract.fast import _NESTED, STRUCTS
from isr.engine.local import LocalEngine

T0 = 1_800_000_000_000
FETCH, APPEND, LEADER, SESSION = (STRUCTS[k] for k in ("fetch", "append", "leader",
                                                       "fetch_session"))


def cluster(partitions: int, brokers: int):
    """{partition: (leader, [replicas])}, round-robin."""
    return {p: (p % brokers, [p % brokers, (p + 1) % brokers, (p + 2) % brokers])
            for p in range(partitions)}


def events(partitions: int, brokers: int, seconds: int, active: float, sessions: bool):
    layout = cluster(partitions, brokers)
    out = [LEADER(v=1, ts=T0, topic="t", partition=p, leader=l, leader_epoch=1, replicas=r,
                  isr=r, leader_epoch_start_offset=0) for p, (l, r) in layout.items()]
    pairs: dict[tuple[int, int], list[int]] = {}
    for p, (l, r) in layout.items():
        for f in r[1:]:
            pairs.setdefault((l, f), []).append(p)
    hot = set(range(0, partitions, max(1, round(1 / active)))) if active > 0 else set()
    leo = {p: 0 for p in layout}
    SPart = _NESTED[SessionPartition]
    epochs = {pair: 0 for pair in pairs}
    held = {pair: {} for pair in pairs}
    for tick in range(seconds * 2):
        ts = T0 + 500 * tick + 1
        for p in hot:
            leo[p] += 10
            out.append(APPEND(v=1, ts=ts, topic="t", partition=p, leader=layout[p][0],
                              leader_epoch=1, leader_leo=leo[p]))
        for n, ((l, f), parts) in enumerate(pairs.items()):
            t = ts + 1 + n % 400
            if not sessions:
                out.extend(FETCH(v=1, ts=t, topic="t", partition=p, leader=l, leader_epoch=1,
                                 replica=f, fetch_offset=leo[p], leader_leo=leo[p])
                           for p in parts)
                continue
            h, e = held[(l, f)], epochs[(l, f)]
            listed = [SPart(topic="t", partition=p, leader_epoch=1, fetch_offset=leo[p],
                            leader_leo=leo[p]) for p in parts if h.get(p) != leo[p]]
            for sp in listed:
                h[sp.partition] = sp.fetch_offset
            out.append(SESSION(v=1, ts=t, leader=l, replica=f, session_id=1000 + n,
                               session_epoch=e, full=e == 0, partitions=listed))
            epochs[(l, f)] = e + 1
    out.sort(key=lambda ev: ev.ts)
    return out


def run(evs, policies, alerts: bool, check_ms: int = 0, index: bool = True):
    """(seconds in all, [seconds of each check], decisions, models visited)."""
    from isr.pipeline.listeners import standard_listeners
    monitor = MonitorSettings(policy=policies, alerts={"enabled": alerts})
    engine = LocalEngine(monitor, listeners=standard_listeners(monitor), deadline_index=index)
    checks = []
    start = time.perf_counter()
    if check_ms > 0:
        i, n = 0, len(evs)
        until = evs[0].ts + check_ms
        while i < n:
            j = i
            while j < n and evs[j].ts < until:
                j += 1
            engine.apply_in_order(evs[i:j])
            t = time.perf_counter()
            engine.advance_all(until, inclusive=False)
            checks.append(time.perf_counter() - t)
            i, until = j, until + check_ms
    else:
        engine.apply_in_order(evs)
    engine.finish()
    engine.states()  # every partition brought up to date
    return time.perf_counter() - start, checks, len(engine.decisions), engine.visits


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--partitions", type=int, default=5000)
    ap.add_argument("--brokers", type=int, default=30)
    ap.add_argument("--seconds", type=int, default=30)
    ap.add_argument("--active", type=float, default=0.10)
    ap.add_argument("--policy", default="kafka")
    ap.add_argument("--alerts", action="store_true")
    ap.add_argument("--check-ms", type=int, default=0)
    ap.add_argument("--index", choices=["on", "off", "both"], default="on")
    ap.add_argument("--grain", choices=["partition", "session", "both"], default="both")
    args = ap.parse_args()
    policies = args.policy.split(",")
    print(f"{args.partitions} partitions, RF 3, {args.brokers} brokers, {args.seconds} s of "
          f"event time, {args.active:.0%} active, policies {policies}, alerts {args.alerts}, "
          f"checks every {args.check_ms or 'end'} ms")
    grains = [g for g in (("partition", False), ("session", True))
              if args.grain in ("both", g[0])]
    indexes = {"on": [True], "off": [False], "both": [True, False]}[args.index]
    for grain, sessions in grains:
        evs = events(args.partitions, args.brokers, args.seconds, args.active, sessions)
        rate = len(evs) / args.seconds
        for index in indexes:
            secs, checks, decisions, visits = run(evs, policies, args.alerts, args.check_ms, index)
            in_checks = sum(checks)
            # the median check: the first ones index (or catch up) every partition once
            per_check = (f"median {sorted(checks)[len(checks) // 2] * 1000:8.2f} ms/check, "
                         f"first {checks[0] * 1000:8.2f} ms" if checks else "")
            print(f"{grain:9} grain, index {'on ' if index else 'off'}: {len(evs):9,} events "
                  f"({rate:10,.0f} /s of event time); engine {secs:6.2f} s = "
                  f"{len(evs) / secs:9,.0f} events/s, {args.seconds / secs:6.1f}x real time; "
                  f"checks {in_checks:6.2f} s {per_check}, {visits:,} visits; "
                  f"{decisions} decisions", flush=True)


if __name__ == "__main__":
    main()
