"""A bucket's events that wait for the watermark, kept between micro-batches
as the Arrow rows they arrived in (packing's columns).

With `monitor.allowed_lateness_ms` of lateness a bucket holds every event of
the last few seconds: far more than one batch brings. Kept in the engine's
sequencer, they were pickled and unpickled as Python tuples by every batch;
kept here, a batch touches them with a vectorised filter and only the rows
the watermark releases become Python objects (docs/benchmarks.md, "The
queue as Arrow rows"). The engine's sequencer still orders what is released.
"""

from __future__ import annotations

from typing import Optional

# The columns a waiting event needs: its order (ts, seq) and its origin.
COLUMNS = ["ts", "seq", "value", "source", "offset"]


def split(table, watermark: int):
    """(the rows to process now, the events that wait): a valid event
    (no reason, a ts) waits while its ts is at or above the watermark; the
    rest (earlier events, rejections, markers) is processed now."""
    import pyarrow.compute as pc

    ts = table.column("ts")
    later = pc.fill_null(pc.and_(pc.is_null(table.column("reason")),
                                 pc.greater_equal(ts, watermark)), False)
    return table.filter(pc.invert(later)), table.filter(later).select(COLUMNS)


def release(waiting, watermark: Optional[int]):
    """(the waiting events below the watermark, those still waiting); all of
    them at the end of input (watermark None)."""
    import pyarrow.compute as pc

    if waiting is None or waiting.num_rows == 0:
        return None, waiting
    if watermark is None:
        return waiting, None
    below = pc.less(waiting.column("ts"), watermark)
    return waiting.filter(below), waiting.filter(pc.invert(below))


def join(waiting, more):
    """One table of the waiting events (either may be None)."""
    import pyarrow as pa

    parts = [t for t in (waiting, more) if t is not None and t.num_rows]
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else pa.concat_tables(parts).combine_chunks()


def to_bytes(waiting) -> bytes:
    """Arrow IPC, zstd-compressed (the values are JSON: they shrink several
    times, at a fraction of zlib's cost)."""
    import pyarrow as pa

    if waiting is None or waiting.num_rows == 0:
        return b""
    sink = pa.BufferOutputStream()
    options = pa.ipc.IpcWriteOptions(compression="zstd")
    with pa.ipc.new_stream(sink, waiting.schema, options=options) as writer:
        writer.write_table(waiting)
    return sink.getvalue().to_pybytes()


def from_bytes(blob: bytes):
    import pyarrow as pa

    if not blob:
        return None
    return pa.ipc.open_stream(blob).read_all()
