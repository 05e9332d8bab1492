"""Packing a range of lines for the buckets from the admission's row index
(rowindex.py), without decoding them: the same packed rows as `Packer.pack`
of the range's lines gives (tests/test_stream_files.py), built column by
column in Arrow.

Each row's bucket and ts come from the index. Only a fetch session (split
into one share per bucket, packing.session_shares) and a rejected line (for
its reason) are decoded, by the Packer itself. A line is cut from the
range's bytes by Arrow (`split_pattern`), so a regular row costs no Python
object here.
"""

from __future__ import annotations

from typing import Iterator

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from isr.stream import rowindex
from isr.stream.packing import (END_OF_INPUT, PACK_COLUMNS, Packer, _source_tag, pack_schema,
                                packed_batch, to_ipc, unpack)

ROWS_PER_BATCH = 65_536  # rows packed at a time (~9 MB of lines of 140 bytes)


def packed_rows(r, pack: dict, rows_per_batch: int = ROWS_PER_BATCH) -> Iterator:
    """PACKED_SCHEMA's batches of a LineRange `r` whose `index` is set."""
    packer = Packer(pack["labels"], pack["max_future_ms"])
    if r.end_row:
        yield packed_batch(packer.pack([r.end_ts], [END_OF_INPUT], [r.label], [-1],
                                       [r.first_index], None))
        return
    index = rowindex.load(r.index)
    end = r.first_index + r.count
    with open(r.path, "rb") as f:
        for lo in range(r.first_index, end, rows_per_batch):
            hi = min(end, lo + rows_per_batch)
            yield packed_batch(_pack(packer, f, index, lo, hi, r))


def _segments(codes: np.ndarray, lo: int) -> list[tuple[int, int]]:
    """[lo, hi) row spans without an overlong row (never read)."""
    cuts = (np.flatnonzero(codes == rowindex.OVERLONG) + lo).tolist()
    spans, at = [], lo
    for cut in cuts + [lo + len(codes)]:
        if cut > at:
            spans.append((at, cut))
        at = cut + 1
    return spans


def _lines(f, index: np.ndarray, lo: int, hi: int, file_end: int):
    """The lines of rows lo..hi-1 (no overlong one among them) as an Arrow
    array (large_binary), each without its newline or trailing carriage
    returns, in row order."""
    rows = index[lo:hi]
    start = int(rows["start"][0])
    f.seek(start)
    block = f.read(int(index["start"][hi]) - start) if hi < file_end else f.read()
    parts = pc.split_pattern(pa.array([block], pa.large_binary()), pattern=b"\n").flatten()
    where = pa.array(rows["line"] - rows["line"][0])  # each row's line in the block
    if b"\r" not in block:
        return parts.take(where)
    return pa.array([v.rstrip(b"\r\n") for v in parts.take(where).to_pylist()],
                    pa.large_binary())


def _pack(packer: Packer, f, index: np.ndarray, lo: int, hi: int, r) -> list:
    """[(bucket label, pack, summary)] of rows lo..hi-1 of the range."""
    labels = packer.labels
    n = len(labels)
    tables: list[list] = [[] for _ in range(n)]
    latest = -1
    tag = _source_tag(r.label)
    for a, b in _segments(index["code"][lo:hi], lo):
        rows = index[a:b]
        codes = rows["code"]
        values = _lines(f, index, a, b, r.file_end)
        accepted = codes >= rowindex.SESSION  # a bucket, every bucket, or a session
        if accepted.any():
            latest = max(latest, int(rows["ts"][accepted].max()))
        seqs = np.arange(a, b, dtype=np.int64) * (1 << 20) + tag
        everyone = codes == rowindex.ALL
        for bucket in range(n):
            take = np.flatnonzero((codes == bucket) | everyone)
            if len(take):
                tables[bucket].append(_regular(rows, values, seqs, take, r.label))
        odd = np.flatnonzero((codes == rowindex.SESSION) | (codes == rowindex.REJECTED))
        if len(odd):  # decoded by the Packer, as it packs every line without the index
            for bucket, table in enumerate(_decoded(packer, rows, values, odd, a, r.label)):
                if table is not None:
                    tables[bucket].append(table)
    summary = orjson.dumps({r.label: [latest, False]} if latest >= 0 else {})
    return [(label, _ipc(parts), summary) for label, parts in zip(labels, tables)]


def _regular(rows: np.ndarray, values, seqs: np.ndarray, take: np.ndarray, source: str):
    """A bucket's rows that need no decoding, as Packer.pack packs them."""
    k = len(take)
    schema = pack_schema()
    nulls = [pa.nulls(k, schema.field(name).type) for name in PACK_COLUMNS[5:]]
    return pa.Table.from_arrays(
        [pa.array(rows["ts"][take]), pa.array(seqs[take]),
         values.take(pa.array(take)).cast(pa.binary()), pa.repeat(pa.scalar(source), k),
         pa.array(rows["line"][take]), *nulls], schema=schema)


def _decoded(packer: Packer, rows: np.ndarray, values, odd: np.ndarray, first: int,
             source: str) -> list:
    """Each bucket's share of the rows that are decoded (sessions, rejected
    lines), packed by the Packer as it packs them without the index."""
    take = pa.array(odd)
    out = packer.pack(rows["line"][odd].tolist(), values.take(take).to_pylist(),
                      [source] * len(odd), [-1] * len(odd), (odd + first).tolist(), None)
    return [unpack([blob]) if blob else None for _label, blob, _summary in out]


def _ipc(parts: list) -> bytes:
    """A bucket's tables as one blob, its records in arrival order."""
    if not parts:
        return b""
    table = parts[0] if len(parts) == 1 else pa.concat_tables(parts).sort_by("seq")
    return to_ipc(table.combine_chunks())
