"""bench_live_bucket.py with each bucket's state row measured at every save
(FakeState.update): the bytes of the row's fields, per bucket; the last save
is the end's snapshot with --end. Arguments are bench_live_bucket.py's.

    PYTHONPATH=TREE python bench/state_row_bytes.py /tmp/cheapfetch/real100k/session-20.jsonl \\
        --set monitor.replica_lag_time_max_ms=10000 --batch 100000 --buckets 2 --end
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_live_bucket as blb  # noqa: E402

SAVES: list[tuple[int, int, list[int]]] = []


def size(x) -> int:
    if isinstance(x, (bytes, bytearray, str)):
        return len(x)
    if isinstance(x, (list, tuple)):
        return sum(size(y) for y in x)
    return 8


_update = blb.FakeState.update


def update(self, row) -> None:
    _update(self, row)
    SAVES.append((id(self), size(self.row), [size(f) for f in self.row]))


def main() -> None:
    blb.FakeState.update = update
    sys.argv = ["bench_live_bucket.py", *sys.argv[1:]]
    blb.main()
    by_bucket: dict[int, list] = {}
    for key, total, fields in SAVES:
        by_bucket.setdefault(key, []).append((total, fields))
    for i, saves in enumerate(by_bucket.values()):
        print(f"bucket {i}: {len(saves)} saves, row bytes max {max(s for s, _ in saves):,}, "
              f"last {saves[-1][0]:,} (fields {saves[-1][1]})")


if __name__ == "__main__":
    main()
