"""`isr replay`: JSON-lines event files in, decisions out.

Data flows one way: lines -> decode -> LocalEngine (sequencer, leader
models, listeners) -> decisions in canonical order + final partition states;
bad lines become dead-letter records. Printing is the CLI's (console.py).
"""

from __future__ import annotations

import heapq
from itertools import islice

import sys
from contextlib import ExitStack
from pathlib import Path
from typing import Any, BinaryIO, Iterator, Optional

import orjson

from isr.config import MonitorSettings
from isr.contract import DeadLetter, Rejection
from isr.contract.decisions import PartitionStates, output_order
from isr.contract.decode import decode_many
from isr.engine.local import APPLIED, LocalEngine
from isr.engine.summary import summary
from isr.engine.whatif import WhatIf
from isr.gc_tuning import no_gc_passes
from isr.linecap import DEFAULT_MAX_LINE_BYTES, Line, Overlong, block_line_lists
from isr.pipeline.listeners import standard_listeners
from isr.pipeline.results import TOO_LONG, Progress, ReplayResult, ReplayStats, too_long

LINES_PER_DECODE = 4096  # lines decoded together when files are merged (else a block's)
READ_BYTES = 1 << 20  # a block read (`_line_chunks`): ~4,000 lines, as many decoded together
REPLAY_LOG_CUT_FACTOR = 4  # SessionDriver.cut_factor for `isr replay` (the default: 2)


def _line_chunks(sources: list[str], progress: Optional[Progress],
                 max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
                 ) -> Iterator[list[tuple[str, int, Line]]]:
    """(source name, 1-based line number, raw bytes) for every non-blank line,
    a list per block read (`block_line_lists`: one read per READ_BYTES and a
    list comprehension per block, not a readline and a generator step per
    line);
    `Overlong` instead of the bytes for a line over `max_line_bytes`."""
    progress = progress or Progress()
    with ExitStack() as stack:
        for name in sources:
            if name == "-":
                stream: BinaryIO = sys.stdin.buffer
                total = None
            else:
                stream = stack.enter_context(open(name, "rb"))
                total = Path(name).stat().st_size
            task = progress.start("stdin" if name == "-" else Path(name).name, total)
            number = read = 0
            seekable = stream.seekable()
            lines: Any  # of bytes or Overlong, told apart by `__class__` (mypy does not)
            for lines in block_line_lists(stream, max_line_bytes, READ_BYTES):
                chunk = [(name, n, raw if raw.__class__ is Overlong else raw.rstrip(b"\r"))
                         for n, raw in enumerate(lines, number + 1)
                         if raw.__class__ is Overlong or raw.strip()]
                number += len(lines)
                read = stream.tell() if seekable else read + len(lines) + sum(
                    len(x) if x.__class__ is bytes else x.length for x in lines)  # (a pipe)
                progress.advance(task, read)
                if chunk:
                    yield chunk
            progress.done(task)


def _lines(sources: list[str], progress: Optional[Progress],
           max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> Iterator[tuple[str, int, Line]]:
    """`_line_chunks`, one line at a time."""
    for chunk in _line_chunks(sources, progress, max_line_bytes):
        yield from chunk


def merged(sources: list[str], progress: Optional[Progress],
           max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> Iterator[tuple[str, int, Line]]:
    """The lines of several files (each in ts order, give or take the allowed
    lateness, as a tap writes them) interleaved by ts. A line without a
    readable ts keeps its place after its file's previous line."""
    def keyed(name: str):
        ts = -1
        for item in _lines([name], progress, max_line_bytes):
            try:
                value = orjson.loads(item[2]).get("ts")  # type: ignore[arg-type]  # (Overlong: below)
                if isinstance(value, int):
                    ts = max(ts, value)
            except (orjson.JSONDecodeError, AttributeError, TypeError):
                pass  # not JSON, not an object, or an Overlong
            yield ts, item

    for _ts, item in heapq.merge(*(keyed(name) for name in sources), key=lambda x: x[0]):
        yield item


def replay(sources: list[str], monitor: MonitorSettings, progress: Optional[Progress] = None,
           whatif: bool = False, merge: bool = False,
           max_line_bytes: int = DEFAULT_MAX_LINE_BYTES, states: bool = True) -> ReplayResult:
    """`whatif`: also follow every partition under every policy for the
    what-if report (result.whatif, result.whatif_rows). `merge`: interleave
    the files by ts (the outputs of several taps) instead of reading one after
    the other. A line over `max_line_bytes` is a `too_long` dead letter.
    `states`: False leaves result.states empty (`isr replay --no-state`)."""
    with no_gc_passes():
        return _replay(sources, monitor, progress, whatif, merge, max_line_bytes, states)


def _replay(sources: list[str], monitor: MonitorSettings, progress: Optional[Progress],
            with_whatif: bool, merge: bool = False,
            max_line_bytes: int = DEFAULT_MAX_LINE_BYTES, with_states: bool = True
            ) -> ReplayResult:
    stats = ReplayStats()
    dead: list[DeadLetter] = []

    def on_reject(origin, reason: str) -> None:
        source, offset, raw = origin
        stats.accepted -= 1
        stats.dead_letters["model"] += 1
        dead.append(DeadLetter.of(source, offset, raw, reason, "model"))

    whatif = WhatIf(monitor) if with_whatif else None
    listeners = standard_listeners(monitor) + ([whatif] if whatif is not None else [])
    engine = LocalEngine(monitor, listeners=listeners, on_reject=on_reject)
    # Session logs twice as long before a cut (sessions.py, cut_factor): half
    # the cuts' catch-ups, for the logs' memory; no state log to write here.
    engine.session_driver.cut_factor = REPLAY_LOG_CUT_FACTOR
    if merge and len(sources) > 1:
        lines = merged(sources, progress, max_line_bytes)
        chunks = iter(lambda: list(islice(lines, LINES_PER_DECODE)), [])
    else:
        chunks = _line_chunks(sources, progress, max_line_bytes)
    seq = -1  # arrival order: the line's place in the input
    accepted = 0  # added to stats at the end (on_reject takes back from it meanwhile)
    submit = engine.submit_raw
    for chunk in chunks:
        events = decode_many([raw if raw.__class__ is bytes else b"" for _s, _o, raw in chunk])
        stats.lines += len(chunk)
        line: Any  # (source, offset, raw): raw bytes or Overlong, told apart by `__class__`
        for line, event in zip(chunk, events):
            source, offset, raw = line
            seq += 1
            if raw.__class__ is Overlong:
                stats.dead_letters[TOO_LONG] += 1
                dead.append(too_long(source, offset, raw))
                continue
            if event.__class__ is Rejection:
                stats.dead_letters[event.reason_class] += 1
                dead.append(DeadLetter.of(source, offset, raw, event.reason, event.reason_class))
                continue
            # The origin, (source, offset, raw), rides along in case the
            # model rejects the event.
            outcome = submit(event.ts, event, seq, line)
            if outcome is not APPLIED:  # late or future
                stats.dead_letters[outcome.status] += 1
                dead.append(DeadLetter.of(source, offset, raw, outcome.reason, outcome.status))
            else:
                accepted += 1
        engine.forget_changes()  # no state log here: what changed need not be kept
    stats.accepted += accepted
    engine.finish()
    decisions = engine.take_decisions()
    stats.ignored = engine.ignored
    stats.session_anomalies = engine.session_driver.sessions.anomalies
    dead.sort(key=lambda d: (d.source, d.offset))  # as every engine reports them
    # The final states: the models brought up to date with their sessions'
    # fetches, which only moves followers' times now (finish ran every
    # check that could act); not even that without them (--no-state), unless
    # the what-if listener still hears them.
    states = engine.states() if with_states or whatif is not None else []
    result = ReplayResult(sorted(decisions, key=output_order),
                          states if with_states else [], dead, stats,
                          summary(engine, decisions))
    engine.close()  # freed by reference counting when this returns, not by a GC pass
    if whatif is not None:
        whatif.finish(engine.max_ts)
        result.whatif, result.whatif_rows = whatif, whatif.rows(result.summary)
    return result




def write_jsonl(records, stream: BinaryIO) -> None:
    if isinstance(records, PartitionStates):  # their JSON without the pydantic objects
        stream.writelines(records.jsonl())
        return
    for record in records:
        stream.write(record.model_dump_json().encode())
        stream.write(b"\n")
