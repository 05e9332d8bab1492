"""Input lines with a cap on their length (`input.max_line_bytes`, 1 MiB by
default, as Kafka caps a message with `message.max.bytes`): a longer line is
never held in memory. It is read in bounded pieces and dropped up to its
newline, and handed on as `Overlong` (its length), so that `isr replay` writes
a dead letter and a tap counts it, and the run goes on (docs/reliability.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import BinaryIO, Iterator, Optional, Union, cast

DEFAULT_MAX_LINE_BYTES = 1024 * 1024
PIECE = 64 * 1024  # what is read at a time while a long line is dropped


@dataclass(frozen=True)
class Overlong:
    """A line longer than the cap: its length in bytes, without the newline."""
    length: int
    limit: int

    @property
    def reason(self) -> str:
        return (f"line of {self.length:,} bytes is longer than input.max_line_bytes "
                f"({self.limit:,}); not read")


Line = Union[bytes, Overlong]


def bounded_lines(stream: BinaryIO, max_bytes: int) -> Iterator[Line]:
    """The lines of a binary stream (each with its newline; the last one may
    have none), or `Overlong` for one longer than `max_bytes`."""
    limit = max_bytes + 1  # the longest line allowed, with its newline
    readline = stream.readline
    while True:
        line = readline(limit)
        if not line:
            return
        if len(line) < limit or line.endswith(b"\n"):
            yield line
            continue
        length = len(line)
        while True:  # drop the rest of the line, a piece at a time
            piece = readline(PIECE)
            if not piece:
                break
            if piece.endswith(b"\n"):
                length += len(piece) - 1
                break
            length += len(piece)
        yield Overlong(length, max_bytes)


BLOCK_BYTES = 1 << 22  # what `block_lines` reads at a time


def block_lines(f: BinaryIO, max_line_bytes: int,
                block_bytes: int = BLOCK_BYTES) -> Iterator[Line]:
    """`bounded_lines` of a file read in blocks (one `read` per 4 MiB, not a
    `readline` per line: the Spark replay's file source), each line without
    its newline, or `Overlong` for one longer than `max_line_bytes`, which
    is dropped as it is read. Not for a pipe or a followed file: a read
    waits for the whole block."""
    for lines in block_line_lists(f, max_line_bytes, block_bytes):
        yield from lines


def block_line_lists(f: BinaryIO, max_line_bytes: int,
                     block_bytes: int = BLOCK_BYTES) -> Iterator[list[Line]]:
    """`block_lines`, a list per block read (the lines that end in it): for
    callers that take lines in bulk, without a generator step per line."""
    carry, dropping = b"", 0  # the unfinished line; or the length dropped so far
    while True:
        block = f.read(block_bytes)
        if not block:
            break
        parts = block.split(b"\n")
        last = parts.pop()  # the unfinished line after the block's last newline
        if parts:
            first = parts[0]
            # The same list, whose lines too long become Overlong (one cast a block).
            lines = cast("list[Line]", parts)
            if dropping:  # the end of a line being dropped
                lines[0] = Overlong(dropping + len(first), max_line_bytes)
                dropping = 0
            else:
                lines[0] = carry + first
                carry = b""
            head = lines[0]
            if (max(map(len, parts[1:]), default=0) > max_line_bytes
                    or type(head) is bytes and len(head) > max_line_bytes):
                lines = [Overlong(len(line), max_line_bytes)
                         if type(line) is bytes and len(line) > max_line_bytes else line
                         for line in lines]
            yield lines
        else:  # no newline in the whole block
            if dropping:
                dropping += len(last)
                continue
            last = carry + last
        if len(last) > max_line_bytes:  # never held whole: counted, then dropped
            dropping, carry = len(last), b""
        else:
            carry = last
    if dropping:
        yield [Overlong(dropping, max_line_bytes)]
    elif carry:
        yield [carry]  # the last line, without a newline


class LineAssembler:
    """Lines from pieces that may end before their newline (a followed file
    read up to where its writer is). The same cap: a line that grows past
    `max_bytes` is dropped as it comes and reported once its newline is seen."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.partial = b""
        self.dropped: Optional[int] = None  # length so far of a line being dropped

    def read_size(self) -> int:
        """How much the next read may take: the rest the cap allows (+ newline)."""
        if self.dropped is not None:
            return PIECE
        return max(1, self.max_bytes + 1 - len(self.partial))

    def feed(self, piece: bytes) -> Optional[Line]:
        """`piece` from readline(read_size()); a whole line once its newline came."""
        ends = piece.endswith(b"\n")
        if self.dropped is not None:
            self.dropped += len(piece) - ends
            if ends:
                length, self.dropped = self.dropped, None
                return Overlong(length, self.max_bytes)
            return None
        if len(self.partial) + len(piece) - ends > self.max_bytes:
            self.dropped = len(self.partial) + len(piece) - ends
            self.partial = b""
            if ends:
                length, self.dropped = self.dropped, None
                return Overlong(length, self.max_bytes)
            return None
        self.partial += piece
        if ends:
            line, self.partial = self.partial, b""
            return line
        return None

    def reset(self) -> None:
        """The file was replaced or truncated: what was half read is gone."""
        self.partial, self.dropped = b"", None
