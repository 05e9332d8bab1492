"""Reading log lines: follow a file like `tail -F` (rotation survived) or read
it to its end, or read stdin; and split Kafka's log4j lines.

Kafka's log4j layouts are `[%d] %p %m (%c)%n` for server.log and
kafka-request.log (config/log4j.properties, docs/tap.md); `%d` is
`yyyy-MM-dd HH:mm:ss,SSS` in the broker's time zone.
"""

from __future__ import annotations

import os
import re
import sys
import time
from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from typing import Callable, Iterable, Iterator, Optional, Union
from zoneinfo import ZoneInfo

from isr.linecap import DEFAULT_MAX_LINE_BYTES, Line, LineAssembler, Overlong, bounded_lines

LOG4J = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\] ([A-Z]+) (.*) \(([^()]*)\)$")


@dataclass(frozen=True)
class LogLine:
    ts: int        # epoch ms of %d
    level: str
    message: str
    logger: str


class Log4j:
    """Parses `[%d] %p %m (%c)` lines; the time zone is the broker's."""

    def __init__(self, timezone: str = "UTC") -> None:
        self.zone = ZoneInfo(timezone)
        self._cached: tuple[str, int] = ("", 0)  # lines share their second

    def parse(self, line: str) -> Optional[LogLine]:
        m = LOG4J.match(line.rstrip("\r\n"))
        if m is None:
            return None
        stamp = m.group(1)
        second, millis = stamp[:19], int(stamp[20:])
        if self._cached[0] != second:
            dt = datetime.strptime(second, "%Y-%m-%d %H:%M:%S").replace(tzinfo=self.zone)
            self._cached = (second, int(dt.timestamp()) * 1000)
        return LogLine(self._cached[1] + millis, m.group(2), m.group(3), m.group(4))


class LineTap:
    """A tap: `feed(line)` gives the line's events (often none), `finish()`
    those of the end of input. Counted: `lines` read, `skipped` lines or parts
    by reason, and `approximate`: what was written from incomplete knowledge."""

    OVERLONG = "lines over input.max_line_bytes"
    SHOWN = 3  # overlong lines named one by one in the warnings

    def __init__(self) -> None:
        self.skipped: Counter = Counter()
        self.approximate: Counter = Counter()
        self.lines = 0
        self.overlong: list[tuple[int, int]] = []  # (line number, length), the first SHOWN

    def feed(self, line: str) -> list[dict]:
        self.lines += 1
        return self.read(line)

    def feed_overlong(self, line: Overlong) -> list[dict]:
        """A line too long to read: counted, and the first few named."""
        self.lines += 1
        if len(self.overlong) < self.SHOWN:
            self.overlong.append((self.lines, line.length))
        return self.skip(self.OVERLONG)

    def read(self, line: str) -> list[dict]:
        raise NotImplementedError

    def skip(self, reason: str, count: int = 1) -> list[dict]:
        self.skipped[reason] += count
        return []

    def finish(self) -> list[dict]:
        return []

    def warnings(self) -> list[str]:
        """Lines for the user about what was skipped and how to avoid it."""
        out = [f"line {number:,}: {length:,} bytes, longer than input.max_line_bytes: skipped"
               for number, length in self.overlong]
        more = self.skipped[self.OVERLONG] - len(self.overlong)
        if more > 0:
            out.append(f"... and {more:,} more lines over input.max_line_bytes")
        return out


class Log4jTap(LineTap):
    """A tap of a Kafka log4j file: each `[%d] %p %m (%c)` line to `entry`."""

    def __init__(self, timezone: str = "UTC") -> None:
        super().__init__()
        self.log4j = Log4j(timezone)

    def read(self, line: str) -> list[dict]:
        parsed = self.log4j.parse(line)
        if parsed is None:
            return self.skip("not a log4j line")
        return self.entry(parsed)

    def entry(self, line: LogLine) -> list[dict]:
        raise NotImplementedError


def read_lines(path: str, follow: bool, stop: Callable[[], bool] = lambda: False,
               poll_s: float = 0.25,
               max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> Iterator[Union[str, Overlong]]:
    """The lines of `path` (`-`: stdin), until `stop()`. With `follow`, wait
    for more like `tail -F`: a file replaced (rotation) or truncated is
    reopened from its start, and a file not there yet is waited for. A line
    over `max_line_bytes` comes as `Overlong`, never held in memory."""
    if path == "-":
        yield from _decoded(bounded_lines(sys.stdin.buffer, max_line_bytes), stop)
        return
    if not follow:
        with open(path, "rb") as f:
            yield from _decoded(bounded_lines(f, max_line_bytes), stop)
        return
    yield from _follow(path, stop, poll_s, max_line_bytes)


def _decoded(lines: Iterator[Line], stop: Callable[[], bool]) -> Iterator[Union[str, Overlong]]:
    for line in lines:
        if stop():
            return
        yield line if isinstance(line, Overlong) else line.decode("utf-8", "replace")


def _follow(path: str, stop: Callable[[], bool], poll_s: float,
            max_line_bytes: int) -> Iterator[Union[str, Overlong]]:
    f = None
    identity = None
    lines = LineAssembler(max_line_bytes)
    while not stop():
        if f is None:
            try:
                f = open(path, "rb")
                identity = os.fstat(f.fileno()).st_ino
            except FileNotFoundError:
                time.sleep(poll_s)
                continue
        piece = f.readline(lines.read_size())
        if piece:
            line = lines.feed(piece)
            if line is not None:
                yield line if isinstance(line, Overlong) else line.decode("utf-8", "replace")
            continue
        # At the end: rotated (another file under the name) or truncated?
        try:
            st = os.stat(path)
            rotated = st.st_ino != identity
            truncated = st.st_size < f.tell()
        except FileNotFoundError:
            rotated, truncated = False, False
        if rotated or truncated:
            f.close()
            f = None
            lines.reset()
            continue
        time.sleep(poll_s)
    if f is not None:
        f.close()


def events_of(tap, lines: Iterable[Union[str, Overlong]]) -> Iterator[dict]:
    """The events of a tap over the lines of its source, then what it held back."""
    for line in lines:
        if isinstance(line, Overlong):
            tap.feed_overlong(line)
            continue
        yield from tap.feed(line)
    yield from tap.finish()
