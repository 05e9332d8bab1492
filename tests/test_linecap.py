"""Issue 24, item 6: an input line is capped (input.max_line_bytes, 1 MiB by
default, like Kafka's message.max.bytes). A longer one becomes a dead letter
(replay) or a counted skip (taps) with its length, is never held in memory,
and the run goes on."""

from __future__ import annotations

import io
import json
import resource
import subprocess
import sys
import threading
import time

from helpers import ROOT, cli

from isr.linecap import Overlong, bounded_lines
from isr.tap.lines import read_lines

MiB = 2**20
# `isr replay -` and `isr tap ... -` run in ~150 MB of address space here; a
# line longer than the whole limit can only pass if it is never held.
ADDRESS_SPACE = 256 * MiB
ENDLESS = 384 * MiB


def run_with_endless_line(args: list[str], after: bytes) -> tuple[int, str, float]:
    """`isr ARGS` under RLIMIT_AS, fed ENDLESS bytes without a newline, then `after`."""
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))

    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "isr.cli", *args], cwd=ROOT,
                            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, preexec_fn=limit)
    err: list[bytes] = []
    reader = threading.Thread(target=lambda: err.append(proc.stderr.read()))
    reader.start()
    block = b"x" * MiB
    for _ in range(ENDLESS // MiB):
        proc.stdin.write(block)
    proc.stdin.write(b"\n" + after)
    proc.stdin.close()
    proc.wait(timeout=120)
    reader.join()
    return proc.returncode, err[0].decode(), time.monotonic() - started


def test_replay_of_an_endless_line_under_a_memory_limit_goes_on(tmp_path):
    events = (ROOT / "examples/kip501-slow-leader.jsonl").read_bytes()
    dead = tmp_path / "dead.jsonl"
    rc, err, _ = run_with_endless_line(
        ["replay", "-", "--policy", "kafka", "--set", "monitor.replica_lag_time_max_ms=10000",
         "--dead-letters", str(dead), "-o", str(tmp_path / "out.jsonl")], events)
    assert rc == 0, err
    assert "MemoryError" not in err and "Traceback" not in err, err
    (dl,) = [json.loads(x) for x in dead.read_text().splitlines()]
    assert (dl["reason_class"], dl["offset"], dl["raw_size"]) == ("too_long", 1, ENDLESS)
    assert dl["reason"] == (f"line of {ENDLESS:,} bytes is longer than input.max_line_bytes "
                            "(1,048,576); not read")
    assert "14 events read, 13 accepted, dead letters: too_long 1" in err  # the rest applied
    changes = [json.loads(x) for x in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert sum(c["type"] == "isr_change" for c in changes) == 6


def test_a_tap_reading_an_endless_line_under_a_memory_limit_goes_on(tmp_path):
    out = tmp_path / "isr.jsonl"
    rc, err, _ = run_with_endless_line(["tap", "server-log", "-", "--to", str(out)],
                                       (ROOT / "tests/fixtures/tap/server-2.8.log").read_bytes())
    assert rc == 0, err
    assert f"isr tap server-log: warning: line 1: {ENDLESS:,} bytes, longer than " \
           "input.max_line_bytes: skipped" in err, err
    assert "1 lines over input.max_line_bytes" in err
    assert [json.loads(x)["isr"] for x in out.read_text().splitlines()] == [[1, 2], [1, 2, 3]]


def test_the_cap_is_a_setting_and_a_file_is_read_the_same(tmp_path):
    path = tmp_path / "e.jsonl"
    lines = (ROOT / "examples/kip501-slow-leader.jsonl").read_text().splitlines(True)
    path.write_text(lines[0] + '{"pad": "' + "y" * 500 + '"}\n' + "".join(lines[1:]))
    r = cli("replay", str(path), "--set", "input.max_line_bytes=400", "-q",
            "--dead-letters", str(tmp_path / "dl.jsonl"))
    assert r.returncode == 0, r.stderr
    (dl,) = [json.loads(x) for x in (tmp_path / "dl.jsonl").read_text().splitlines()]
    assert (dl["offset"], dl["raw_size"], dl["reason_class"]) == (2, 511, "too_long")


def test_bounded_lines_at_the_cap():
    data = b"a" * 8 + b"\n" + b"b" * 9 + b"\n" + b"c" * 30 + b"\nlast"
    got = list(bounded_lines(io.BufferedReader(io.BytesIO(data), 4), 8))
    assert got == [b"a" * 8 + b"\n", Overlong(9, 8), Overlong(30, 8), b"last"]


def test_a_followed_file_drops_a_long_line_written_in_pieces(tmp_path):
    log = tmp_path / "server.log"
    log.write_bytes(b"")
    stop = threading.Event()
    got: list = []

    def follow() -> None:
        for line in read_lines(str(log), True, stop.is_set, poll_s=0.01, max_line_bytes=100):
            got.append(line)

    t = threading.Thread(target=follow)
    t.start()
    with open(log, "ab", buffering=0) as f:
        f.write(b"ok 1\n")
        for _ in range(10):  # a writer that is slow to finish its line
            f.write(b"z" * 50)
            time.sleep(0.02)
        f.write(b"\nok 2\n")
    deadline = time.monotonic() + 5
    while len(got) < 3 and time.monotonic() < deadline:
        time.sleep(0.02)
    stop.set()
    t.join(5)
    assert got == ["ok 1\n", Overlong(500, 100), "ok 2\n"]
