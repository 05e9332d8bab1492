"""One bucket's save, alone, for instruction counts (valgrind cachegrind):

    # once, with any tree: bucket 0's row before batch B and batches B..B+2
    PYTHONPATH=TREE python bench/save_instructions.py capture B OUT.pkl FILE \\
        --set monitor.replica_lag_time_max_ms=10000 --batch 20000 --buckets 2 --end
    # per tree: the row rebuilt, the three batches through operator._call
    PYTHONPATH=TREE valgrind --tool=cachegrind --cache-sim=no --cachegrind-out-file=/dev/null \\
        python bench/save_instructions.py run OUT.pkl [--skip-last-save] [--snapshot]

`--skip-last-save`: the last batch's statelog.save is a stub, so the
difference of the counts with and without it is that save's instructions;
`--snapshot`: the last save writes a new snapshot (COMPACT_AFTER 0). Run
with PYTHONHASHSEED=0. The settings are bench_live_bucket.py's (policy
kafka, alerts on, lag 10 s).
"""

import os
import pickle
import runpy
import sys


def capture(first: int, out: str, bench_argv: list) -> None:
    tree = os.environ["PYTHONPATH"]
    sys.path.insert(0, tree + "/bench")
    import isr.stream.operator as operator

    call, kept, n = operator._call, {"calls": []}, [0]

    def keep(processor, layout, frames, state, key):
        frames = list(frames)
        batch = n[0] // layout[1]
        n[0] += 1
        if layout[0] == 0 and batch == first:
            kept["row"] = state.row
        if layout[0] == 0 and first <= batch < first + 3:
            kept["calls"].append(frames)
            if batch == first + 2:
                with open(out, "wb") as f:
                    pickle.dump(kept, f)
                raise SystemExit(0)
        return call(processor, layout, iter(frames), state, key)

    operator._call = keep
    sys.argv = ["bench_live_bucket.py", *bench_argv]
    runpy.run_path(tree + "/bench/bench_live_bucket.py", run_name="__main__")


def run(path: str, flags: list) -> None:
    from isr.config import load_settings
    from isr.stream import statelog
    from isr.stream.operator import BucketProcessor, _call

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from bench_live_bucket import FakeState  # noqa: E402 - the bench's own state handle

    with open(path, "rb") as f:
        kept = pickle.load(f)
    settings = load_settings(None, ['monitor.policy=["kafka"]', "monitor.alerts.enabled=true",
                                    "monitor.replica_lag_time_max_ms=10000"])
    refresh = getattr(settings.metrics, "refresh_interval_ms", None)
    processor = BucketProcessor(settings.monitor, settings.output.state_interval_ms,
                                settings.metrics.enabled and settings.metrics.per_partition,
                                *([] if refresh is None else [refresh]))
    state = FakeState(kept["row"])
    for i, frames in enumerate(kept["calls"]):
        if i == len(kept["calls"]) - 1:
            if "--snapshot" in flags:
                statelog.COMPACT_AFTER = 0
            if "--skip-last-save" in flags:
                statelog.save = lambda stored, arrived, key: state.row[0]
        _call(processor, (0, 2), iter(frames), state, ("bench",))
    print("cache", statelog.STATS, file=sys.stderr)


if __name__ == "__main__":
    if sys.argv[1] == "capture":
        capture(int(sys.argv[2]), sys.argv[3], sys.argv[4:])
    else:
        run(sys.argv[2], sys.argv[3:])
