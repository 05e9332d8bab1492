"""Writes this directory's row.bin and input.jsonl with the state layout of
the time (see README.md): one bucket's state row after STOP_AT batches of
the fetch-session workload, its log holding a delta per batch.

    PYTHONPATH=. .venv/bin/python tests/data/state-layout2/make.py
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))
sys.path.insert(0, str(HERE.parents[1] / "integration"))

import orjson  # noqa: E402
import test_statelog as t  # noqa: E402 - the unit tests' bucket calls (MONITOR, rows, State)
import workload  # noqa: E402

from isr.stream import statelog  # noqa: E402
from isr.stream.operator import BucketProcessor, _call  # noqa: E402

SECONDS = 36
ROWS_PER_BATCH = 150
STOP_AT = 5  # the row after batches 0..4


def batches() -> list[list[bytes]]:
    lines = (HERE / "input.jsonl").read_bytes().splitlines()
    return [lines[i:i + ROWS_PER_BATCH] for i in range(0, len(lines), ROWS_PER_BATCH)]


def main() -> None:
    workload.write_file(HERE / "input.jsonl",
                        [orjson.dumps(e) for e in workload.session_events(SECONDS)])
    # A delta every batch after the first snapshot, whatever changed.
    statelog.DIRTY_SHARE, statelog.LOG_SHARE, statelog.COMPACT_AFTER = 2, 1e9, 100
    p, state, first = BucketProcessor(t.MONITOR), t.State(), 0
    for values in batches()[:STOP_AT]:
        _call(p, t.LAYOUT, iter(t.rows(values, first)), state, ("make",))
        first += len(values)
    header, _at = statelog._header(state.row)
    assert state.row.startswith(b"isr-state-layout:2\n") and len(header["log"]) == STOP_AT - 1
    (HERE / "row.bin").write_bytes(state.row)
    print(f"row.bin: {len(state.row)} bytes, {len(header['log'])} deltas, after {first} lines")


if __name__ == "__main__":
    main()
