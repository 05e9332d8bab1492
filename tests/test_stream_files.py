"""The file source of `isr replay --engine spark` (isr/stream/files.py) reads
its ranges in blocks and packs their lines without a trip through Arrow:
the same lines, line numbers, row indices and packed rows as reading line
by line (linecap.bounded_lines) and packing Arrow batches
(source.packed_batches)."""

from __future__ import annotations

import io

import numpy as np
import pytest
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from isr.config import load_settings
from isr.linecap import Overlong, block_lines, bounded_lines
from isr.stream.files import LineRange, line_starts, packed_lines, read_lines
from isr.stream.packing import END_OF_INPUT, pack_schema
from isr.stream.source import packed_batches

EVENT = (b'{"type":"append","ts":%d,"cluster":"c","topic":"t","partition":%d,'
         b'"leader":1,"leader_epoch":0,"leo":%d}')
PIECES = [EVENT % (1000 + i, i % 3, i) for i in range(5)] + [
    b"", b"  ", b"\r", b"not json", b"x" * 40, b"{}", b'{"type":"append"}']


def reference_starts(path: str, max_line_bytes: int) -> list[tuple[int, int]]:
    """line_starts as it was, line by line with bounded_lines."""
    starts, pos = [], 0
    with open(path, "rb") as f:
        for number, line in enumerate(bounded_lines(f, max_line_bytes), 1):
            if isinstance(line, Overlong):
                starts.append((pos, number))
                pos += line.length + 1
                continue
            if line.strip():
                starts.append((pos, number))
            pos += len(line)
    return starts


def as_list(lines) -> list:
    return [(x.length,) if isinstance(x, Overlong) else x for x in lines]


contents = st.lists(st.sampled_from(PIECES), max_size=30).map(b"\n".join) | st.binary(max_size=300)


@settings(max_examples=100, deadline=None)
@given(contents, st.sampled_from([b"", b"\n"]), st.integers(1, 40), st.integers(1, 50))
def test_block_lines_are_bounded_lines(data, tail, block, max_line_bytes):
    data += tail
    expected = as_list(x.rstrip(b"\n") if isinstance(x, bytes) else x
                       for x in bounded_lines(io.BytesIO(data), max_line_bytes))
    assert as_list(block_lines(io.BytesIO(data), max_line_bytes, block)) == expected


@settings(max_examples=50, deadline=None)
@given(contents, st.integers(5, 200), st.data())
def test_ranges_read_and_pack_the_same_lines_as_line_by_line(tmp_path_factory, data,
                                                            max_line_bytes, draw):
    path = str(tmp_path_factory.mktemp("lines") / "events.jsonl")
    with open(path, "wb") as f:
        f.write(data)
    starts = line_starts(path, max_line_bytes)
    assert starts == reference_starts(path, max_line_bytes)
    if not starts:
        return
    first = draw.draw(st.integers(0, len(starts) - 1))
    count = draw.draw(st.integers(1, len(starts) - first))
    skip = frozenset(draw.draw(st.lists(st.integers(first, first + count - 1), max_size=3)))
    byte, number = starts[first]
    r = LineRange(path, "events.jsonl", first, number, count, byte, False, 0, skip,
                  max_line_bytes)
    # Line by line, as read_lines did before: every non-blank line of the
    # range in order, an overlong one counted and left out.
    expected, index = [], first
    with open(path, "rb") as f:
        f.seek(byte)
        for line_no, raw in enumerate(bounded_lines(f, max_line_bytes), number):
            if index == first + count:
                break
            if isinstance(raw, Overlong):
                index += 1
                continue
            raw = raw.rstrip(b"\r\n")
            if raw.strip():
                if index not in skip:
                    expected.append((str(line_no).encode(), raw, index))
                index += 1
    batches = list(read_lines(r, batch_rows=4))
    got = [row for b in batches for row in zip(b.column("key").to_pylist(),
                                               b.column("value").to_pylist(),
                                               b.column("offset").to_pylist())]
    assert got == expected
    pack = {"labels": [0, 1, 2], "max_future_ms": 60_000}
    # Both in batches of 4 rows (a row's bucket and order within it are
    # what the buckets read; batch bounds are where each path cuts).
    direct = list(packed_lines(r, pack, batch_rows=4))
    through_arrow = list(packed_batches(pack, iter(batches), None))
    assert unpacked(direct) == unpacked(through_arrow)
    assert summaries(direct) == summaries(through_arrow)


def test_the_end_row_packs_as_through_arrow():
    r = LineRange("", "events.jsonl", 7, 0, 0, 0, True, 1234)
    pack = {"labels": [0, 1], "max_future_ms": 60_000}
    got = unpacked(packed_lines(r, pack))
    assert got == unpacked(packed_batches(pack, read_lines(r), None))
    assert [row["value"] for row in got] == [END_OF_INPUT, END_OF_INPUT]
    assert {row["end_ts"] for row in got} == {1234}


def unpacked(batches) -> list[dict]:
    """Every packed record, with its bucket, in order."""
    rows = []
    for batch in batches:
        for bucket, blob in zip(batch.column("bucket").to_pylist(),
                                batch.column("pack").to_pylist()):
            if blob:
                for part in pa.ipc.open_stream(blob):
                    assert part.schema == pack_schema()
                    rows.extend({"bucket": bucket, **row} for row in part.to_pylist())
    return rows


def summaries(batches) -> list:
    return [(b.column("bucket").to_pylist(), b.column("summary").to_pylist()) for b in batches]


# The row index (isr/stream/rowindex.py): the admission's verdicts and each
# row's bucket, so that the readers pack without decoding.
APPEND = (b'{"v":1,"type":"append","ts":%d,"cluster":"c","topic":"t","partition":%d,'
          b'"leader":1,"leader_epoch":0,"leader_leo":%d}')
SESSION = (b'{"v":1,"type":"fetch_session","ts":%d,"cluster":"c","leader":1,"replica":2,'
           b'"session_id":7,"session_epoch":%d,"full":false,"partitions":[{"topic":"t",'
           b'"partition":0,"leader_epoch":0,"fetch_offset":3},{"topic":"t","partition":1,'
           b'"leader_epoch":0,"fetch_offset":1}],"forgotten":[]}')
BROKER = b'{"v":1,"type":"broker","ts":%d,"cluster":"c","broker":2,"broker_epoch":5,"state":"fenced"}'


ROW_SETTINGS = load_settings(None, ["input.max_line_bytes=200", "monitor.allowed_lateness_ms=5000",
                                    "monitor.max_future_ms=60000"])


@st.composite
def event_files(draw) -> bytes:
    """Lines of every kind: events of a few partitions, sessions, broker
    events, late and future ones, rejected, blank, carriage returns, overlong."""
    out, ts = [], 1_000_000
    for i in range(draw(st.integers(0, 60))):
        ts += draw(st.integers(0, 3000))
        kind = draw(st.sampled_from(["append"] * 6 + ["late", "future", "session", "broker",
                                                       "cr", "bad", "blank", "long"]))
        if kind == "append":
            out.append(APPEND % (ts, draw(st.integers(0, 5)), i))
        elif kind == "late":
            out.append(APPEND % (ts - 9000, 1, i))
        elif kind == "future":
            out.append(APPEND % (ts + 100_000, 2, i))
        elif kind == "session":
            out.append(SESSION % (ts, i))
        elif kind == "broker":
            out.append(BROKER % ts)
        elif kind == "cr":
            out.append(APPEND % (ts, 3, i) + b"\r")
        else:
            out.append(draw(st.sampled_from(PIECES[5:])) if kind in ("bad", "blank")
                       else b"x" * 300)
    return b"\n".join(out) + draw(st.sampled_from([b"", b"\n"]))


@settings(max_examples=60, deadline=None)
@given(event_files(), st.integers(1, 3), st.integers(1, 7), st.data())
def test_ranges_packed_from_the_row_index_are_packed_as_when_each_line_is_decoded(
        tmp_path_factory, data, buckets, rows_per_batch, draw):
    from isr.stream.packrows import packed_rows
    from isr.stream.replay_spark import Admission

    tmp = tmp_path_factory.mktemp("rows")
    path = str(tmp / "events.jsonl")
    with open(path, "wb") as f:
        f.write(data)
    admitted = Admission([path], ["events.jsonl"], ROW_SETTINGS, buckets)
    admitted.save_index(str(tmp / "rows.npy"))
    starts = line_starts(path, 200)
    assert [(int(r["start"]), int(r["line"])) for r in np.load(str(tmp / "rows.npy"))] == starts
    if not starts:
        return
    first = draw.draw(st.integers(0, len(starts) - 1))
    count = draw.draw(st.integers(1, len(starts) - first))
    byte, number = starts[first]
    skip = frozenset(i for i in admitted.skip if first <= i < first + count)
    pack = {"labels": list(range(buckets)), "max_future_ms": 60_000}
    decoding = LineRange(path, "events.jsonl", first, number, count, byte, False, 0, skip, 200)
    indexed = LineRange(path, "events.jsonl", first, number, count, byte, False, 0,
                        frozenset(), 200, str(tmp / "rows.npy"), len(starts))
    expected = list(packed_lines(decoding, pack))
    got = list(packed_rows(indexed, pack, rows_per_batch))
    assert by_bucket(got) == by_bucket(expected)  # batches cut elsewhere: each bucket's rows
    assert hold(got) == hold(expected)


def by_bucket(batches) -> dict:
    rows: dict = {}
    for row in unpacked(batches):
        rows.setdefault(row["bucket"], []).append(row)
    return rows


def hold(batches):
    from isr.stream.packing import hold_of
    return hold_of([s for b in batches for s in b.column("summary").to_pylist()])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 20_000), max_size=40), st.integers(-1, 9000),
       st.sampled_from([None, 3000]))
def test_offering_stamps_in_bulk_refuses_as_offering_them_one_at_a_time(stamps, start, future):
    from isr.engine.sequencer import FUTURE, Sequencer

    one, bulk = Sequencer(1000, future, max_ts=start), Sequencer(1000, future, max_ts=start)
    refused = [(i, one.refusal(v, ts)) for i, ts in enumerate(stamps)
               if (v := one.offer(ts, i, None)) is not None]
    got = bulk.offer_stamps(np.array(stamps, np.int64))
    if got is None:  # a future one among them: the caller offers one at a time
        again = Sequencer(1000, future, max_ts=start)
        assert FUTURE in [again.offer(ts, i, None) for i, ts in enumerate(stamps)]
        return
    assert got == refused
    assert bulk.max_ts == one.max_ts


@settings(max_examples=60, deadline=None)
@given(event_files(), st.integers(1, 3), st.integers(1, 5), st.integers(1, 400))
def test_the_admission_judges_alike_whatever_its_chunks_and_blocks(
        tmp_path_factory, data, buckets, chunk, block):
    """The admission judges a block's lines in chunks (most in one msgspec
    call); where the blocks and chunks are cut changes no verdict, no dead
    letter and no row of the index."""
    from functools import partial

    from isr.linecap import block_line_lists
    from isr.stream import replay_spark
    from isr.stream.replay_spark import Admission

    tmp = tmp_path_factory.mktemp("admission")
    path = str(tmp / "events.jsonl")
    with open(path, "wb") as f:
        f.write(data)

    def judged(admitted: Admission, name: str):
        admitted.save_index(str(tmp / name))
        return (admitted.lines, admitted.skip, admitted.end_ts, admitted.rows,
                [d.model_dump() for d in admitted.dead], np.load(str(tmp / name)).tolist())

    whole = judged(Admission([path], ["events.jsonl"], ROW_SETTINGS, buckets), "a.npy")
    small = partial(block_line_lists, block_bytes=block)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Admission, "CHUNK", chunk)
        mp.setattr(replay_spark, "block_line_lists", small)
        cut = judged(Admission([path], ["events.jsonl"], ROW_SETTINGS, buckets), "b.npy")
    assert cut == whole
