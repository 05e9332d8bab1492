"""A bench-only shim: the floor of `isr run` with (almost) free Python work
(issue 23, branch `floor`; docs/benchmarks.md, "The floor of `isr run`").

Not a product code path. bench/bench_realistic_run.py `--floor MODE` puts
this directory first on the job's PYTHONPATH and sets ISR_BENCH_FLOOR=MODE;
Spark's Python workers inherit both (the JVM's environment), and each
bucket's engine process inherits the worker's sys.path (engineproc._connect),
so Python imports this `sitecustomize` at the start of every process of the
job. Without ISR_BENCH_FLOOR it does nothing. MODE, comma-separated:

- `engine`: a bucket call (isr.stream.operator._call_rows, in the engine
  process or the worker) reads its input packs and summaries and does no
  domain work: no decision, state or alert rows, and a constant 6-byte state
  row. Spark's operator, the source, the packing, the hand-over to the
  engine process, the state store and the sinks all still run.
- `outputs` (with `engine`): each bucket call also hands out
  ISR_BENCH_FLOOR_ROWS (default 14,743) partition_state rows of ~550 bytes
  of JSON (a real one's shape, keys and ids distinct): the unmodified run's
  206,408 state records of the realistic 100 k file over its 14 calls, so
  the outputs' path (the reply frames, Spark's Arrow, the driver's collect,
  the Kafka producer) runs as in that run while the domain core does not.
- `pack`: the packing (isr.stream.packing.Packer.pack, in the Python
  source's read tasks or the packing stage) decodes nothing: each bucket's
  pack is the raw record values of its share of the batch (the batch split
  in contiguous slices, the values joined by newlines, the same bytes as
  the input), its summary `{}`. Use with `engine` (the engines cannot read
  such packs).

The patches are applied when the module is first imported (a meta path
finder wraps its loader's exec_module), so a process that never imports the
module pays nothing. The system's own sitecustomize (Debian's apport hook)
is shadowed in these runs.

    PYTHONPATH=. PYSPARK_PYTHON=/work/main/.venv/bin/python python -P bench/bench_realistic_run.py run \\
        /tmp/cheapfetch/real100k/session-20.jsonl --set monitor.replica_lag_time_max_ms=10000 \\
        --max-offsets 100000 --period 1 --source python --rss-log --floor engine \\
        --port-base 21100 --work /tmp/floor/run --keep
"""

from __future__ import annotations

import os
import sys

MODES = {m for m in os.environ.get("ISR_BENCH_FLOOR", "").split(",") if m}
STATE_ROW = b"floor!"


ROWS = int(os.environ.get("ISR_BENCH_FLOOR_ROWS", "14743"))
STATE_VALUE = (
    '{"type":"partition_state","cluster":"default","topic":"busy","partition":%d,'
    '"ts":%d,"leader":5,"leader_epoch":1,"replicas":[5,6,7],"isr":[5,6,7],"hw":200,'
    '"leader_leo":200,"under_replicated":false,"under_min_isr":false,"at_min_isr":false,'
    '"min_insync_replicas":2,"policy":"kafka","followers":[{"replica":6,"leo":200,'
    '"lag_ms":0,"last_caught_up_ts":1700000011778,"last_fetch_ts":1700000011778,'
    '"in_isr":true},{"replica":7,"leo":200,"lag_ms":0,"last_caught_up_ts":1700000011766,'
    '"last_fetch_ts":1700000011766,"in_isr":true}],"bootstrap":false}')
_calls = [0]


def _state_rows(layout) -> list:
    from isr.contract.records import OutputRecord

    _calls[0] += 1
    ts = 1_700_000_000_000 + _calls[0]
    out = []
    for i in range(ROWS):
        p = i * layout[1] + layout[0]
        key = f"default/busy/{p}"
        out.append(OutputRecord("partition_state", key, f"{key}@{ts}", ts, STATE_VALUE % (p, ts)))
    return out


def _floor_call_rows(processor, layout, blob, packs, summaries, query, hand_over=None):
    """operator._call_rows without the domain work: the packs read (engine
    process: a generator handing each over), nothing made (`outputs`: the
    synthetic state rows)."""
    n = 0
    for p in packs:
        n += len(p) if p else 0
    for s in summaries:
        n += len(s)
    rows = _state_rows(layout) if "outputs" in MODES else []
    if hand_over is not None:
        hand_over(rows)
    return rows, STATE_ROW


def _patch_operator(module) -> None:
    module._call_rows = _floor_call_rows


def _raw_pack(self, keys, values, topics, partitions, offsets, clock_ms, behind=None):
    """Packer.pack without decoding: one slice of the raw values per bucket."""
    n = len(self.labels)
    size = -(-len(values) // n) if values else 0
    out = []
    for i, label in enumerate(self.labels):
        share = values[i * size:(i + 1) * size]
        out.append((label, b"\n".join(v for v in share if v) if share else b"", b"{}"))
    return out


def _patch_packing(module) -> None:
    module.Packer.pack = _raw_pack


PATCHES = {}
if "engine" in MODES:
    PATCHES["isr.stream.operator"] = _patch_operator
if "pack" in MODES:
    PATCHES["isr.stream.packing"] = _patch_packing

if PATCHES:
    import importlib.abc

    class _PatchingFinder(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            patch = PATCHES.get(name)
            if patch is None:
                return None
            for finder in sys.meta_path:
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(name, path, target)
                if spec is not None:
                    break
            else:
                return None
            loader = spec.loader
            exec_module = loader.exec_module

            def patched_exec(module, _exec=exec_module, _patch=patch):
                _exec(module)
                _patch(module)

            loader.exec_module = patched_exec
            return spec

    sys.meta_path.insert(0, _PatchingFinder())
