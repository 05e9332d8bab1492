"""The row index of `isr replay --engine spark`: what the driver's admission
pass (replay_spark.Admission), which decodes every line anyway, learned of
each row, so that the file source's readers need not decode it again.

One record per row (a non-blank line, or one over `input.max_line_bytes`)
over all files, in input order (the row index is the line's arrival order):

- `start`, `line`: its byte offset and 1-based line number in its file;
- `ts`: its event time (valid events only);
- `code`: where it goes: a bucket index (0..buckets-1), or `ALL` (a broker
  event: every bucket), `SESSION` (a fetch session: the reader decodes it
  to split it, packing.session_shares), `REJECTED` (the reader decodes it
  for its reason), `SKIP` (late or future: the admission dead-lettered it),
  `OVERLONG` (never read).

The readers map the file (numpy memory map): Spark ships them only its name.
So a bucket count must be known before the admission: the replay resolves it
first (buckets.resolve), as the job would.
"""

from __future__ import annotations

import numpy as np

DTYPE = np.dtype([("start", "<i8"), ("line", "<i8"), ("ts", "<i8"), ("code", "<i4")])
ALL, SESSION, REJECTED, SKIP, OVERLONG = -1, -2, -3, -4, -5


class Builder:
    """The index's columns as they are learned, a chunk of rows at a time."""

    def __init__(self) -> None:
        self.parts: list[np.ndarray] = []

    def add(self, starts, lines, stamps, codes) -> None:
        part = np.empty(len(codes), DTYPE)
        part["start"], part["line"], part["ts"], part["code"] = starts, lines, stamps, codes
        self.parts.append(part)

    def save(self, path: str) -> None:
        whole = np.concatenate(self.parts) if self.parts else np.empty(0, DTYPE)
        np.save(path, whole, allow_pickle=False)


def load(path: str) -> np.ndarray:
    """The index as a read-only memory map (only the rows a reader reads are paged in)."""
    return np.load(path, mmap_mode="r", allow_pickle=False)


def file_starts(index: np.ndarray, rows: list[int]) -> list[np.ndarray]:
    """Each file's rows (`rows`: how many each file has) as (start, line) pairs."""
    out, base = [], 0
    for n in rows:
        out.append(index[base:base + n])
        base += n
    return out
