"""CPU seconds of a command and every process it starts (the JVM, Python
workers, daemons), for timings on a machine shared with other work, where
wall-clock time says little.

    python bench/cputime.py -- isr replay -q --no-state --engine spark events.jsonl

    python bench/cputime.py --by-process -- isr replay ... --engine spark events.jsonl

Polls /proc every 0.2 s and keeps each process's last utime + stime, so a
process that ends between two polls loses at most its last 0.2 s. Prints the
total, and the load average at the end, on stderr; with `--by-process` also
the CPU seconds per kind of process (the program, or `python -m` its module:
the JVM, the driver, PySpark's worker daemons and data-source planners).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

from isr.stream.running import descendants  # the same walk as isr run's


def _stats() -> dict[int, tuple[int, float]]:
    """pid -> (parent pid, CPU seconds) of every process readable now."""
    ticks = os.sysconf("SC_CLK_TCK")
    out = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[int(pid)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / ticks)
    return out


def _parents(stats: dict) -> dict[int, int]:
    return {pid: parent for pid, (parent, _cpu) in stats.items()}


def tree_cpu_seconds(root: int) -> float:
    """CPU seconds of `root` and its live descendants, now."""
    stats = _stats()
    return sum(stats[pid][1] for pid in descendants(_parents(stats), {root}) if pid in stats)


def _kind(pid: int) -> str:
    """What a process runs: `python -m MODULE`'s module, else the program's name."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            args = f.read().decode(errors="replace").split("\0")
    except OSError:  # gone
        return "?"
    if "-m" in args[:-1]:
        return " ".join(args[args.index("-m"):args.index("-m") + 3]).strip()
    return os.path.basename(args[0]) or "?"


def main() -> int:
    argv = sys.argv[1:]
    by_process = argv[:1] == ["--by-process"]
    if by_process:
        argv = argv[1:]
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv or argv[0].startswith("-"):  # --help, a typo, or no command at all
        print("usage: cputime.py [--by-process] [--] COMMAND [ARG ...]", file=sys.stderr)
        return 2
    started = time.perf_counter()
    try:
        child = subprocess.Popen(argv)
    except OSError as e:
        print(f"cputime: cannot start {argv[0]}: {e.strerror}", file=sys.stderr)
        return 127
    mine, seen, kinds = {child.pid}, {}, {}
    while child.poll() is None:
        stats = _stats()
        mine = descendants(_parents(stats), mine)  # once seen, kept: a parent may end first
        for pid in mine:
            if pid in stats:
                seen[pid] = stats[pid][1]
                if by_process:  # each time: `bash spark-class` becomes `java`
                    kind = _kind(pid)
                    if kind != "?":  # gone since `_stats`: keep what it last ran
                        kinds[pid] = kind
        time.sleep(0.2)
    total = sum(seen.values())
    if by_process:
        groups: dict[str, list[float]] = {}
        for pid, cpu in seen.items():
            groups.setdefault(kinds.get(pid, "?"), []).append(cpu)
        for kind, cpus in sorted(groups.items(), key=lambda kv: -sum(kv[1])):
            print(f"cputime: {sum(cpus):7.1f} CPU s in {len(cpus):3d} x {kind[:90]}",
                  file=sys.stderr)
    print(f"cputime: {total:.1f} CPU s over {time.perf_counter() - started:.1f} s wall, "
          f"{len(seen)} processes, load average {os.getloadavg()[0]:.1f}, exit {child.returncode}",
          file=sys.stderr)
    return child.returncode


if __name__ == "__main__":
    sys.exit(main())
