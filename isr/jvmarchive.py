"""Class-data sharing archives (AppCDS, JDK 13+) of the JVMs `isr` starts:
Kafka's nodes (isr/kafka/cluster.py) and Spark's driver (isr/stream/jvm.py).

A starting JVM spends much of its CPU reading, parsing and verifying the
classes it loads (a broker ~4,000, Spark's driver ~20,000). A JVM started
with -XX:ArchiveClassesAtExit writes the classes it loaded into an archive
when it exits; every later JVM of the same Java and jars maps it
(-XX:SharedArchiveFile) instead (measured: docs/real-kafka.md for the
nodes, docs/benchmarks.md "Spark's driver JVM start" for the driver).

- Written once, never partially: the JVM writes a `.partial` name, which
  whoever saw that JVM exit cleanly renames into place. The kept name holds
  the archive's byte size, checked before every use: Java 17 dies of
  SIGBUS mapping a truncated archive, where it shrugs off any other bad one.
  Of two writers of one key (two clusters started together) the second to
  exit drops its copy.
- Keyed by the real java binary and whatever the caller adds (its jars, its
  flags): another Java or other jars get an archive of their own. A JVM
  that still cannot map one (another base archive, a heap without
  compressed oops) runs without it; QUIET keeps its warning off stdout.
- ISR_CLASS_ARCHIVE=0 turns it off (docs/operations.md).
"""

from __future__ import annotations

import hashlib
import os
import uuid
from pathlib import Path
from typing import Iterable, Optional

SWITCH = "ISR_CLASS_ARCHIVE"
WRITE = "-XX:ArchiveClassesAtExit="
USE = "-XX:SharedArchiveFile="
# CDS's warnings (an archive it cannot map, the classes it skips while
# writing one: signed jars, old class files) go to the JVM's stdout, where
# `isr replay` writes its decisions: off.
QUIET = "-Xlog:cds=off,cds+dynamic=off"


def enabled() -> bool:
    return os.environ.get(SWITCH, "1").strip() != "0"


def stem(directory: Path, name: str, java: str, *parts: str) -> Path:
    """Where the archive of this java and these `parts` lives, without its
    suffix: <directory>/<name>-<key>."""
    real = Path(os.path.realpath(java))
    st = real.stat()
    key = hashlib.sha256(f"{real}:{st.st_size}:{st.st_mtime_ns}".encode())
    for part in parts:
        key.update(b"\0" + part.encode())
    return directory / f"{name}-{key.hexdigest()[:12]}"


def files_key(paths: Iterable[str]) -> str:
    """A key part for jars: each one's path, size and modification time
    (the JVM refuses an archive whose jars changed; so does the key)."""
    out = []
    for path in paths:
        try:
            st = os.stat(path)
            out.append(f"{path}:{st.st_size}:{st.st_mtime_ns}")
        except OSError:
            out.append(f"{path}:-")
    return "\n".join(out)


def find(archive_stem: Path) -> Optional[Path]:
    """The kept archive of `archive_stem` if it is whole (<stem>.<bytes>.jsa)."""
    try:  # (sorted: every JVM of a key maps the same one)
        candidates = sorted(archive_stem.parent.glob(f"{archive_stem.name}.*.jsa"))
    except OSError:
        return None
    for path in candidates:
        size = path.name[len(archive_stem.name) + 1:-len(".jsa")]
        try:
            if size.isdigit() and path.stat().st_size == int(size):
                return path
        except OSError:
            continue
    return None


def options(archive_stem: Path, write: bool = False) -> list[str]:
    """A JVM's options for the archive of `archive_stem`: map the kept one;
    else, if `write`, write one at its exit (to a partial name, for keep);
    else none. None either with ISR_CLASS_ARCHIVE=0."""
    if not enabled():
        return []
    kept = find(archive_stem)
    if kept is not None:
        return [f"{USE}{kept}", QUIET]
    return [f"{WRITE}{partial(archive_stem)}", QUIET] if write else []


def partial(archive_stem: Path) -> Path:
    """A name for a JVM to write to; it holds this process's pid (abandoned())."""
    return archive_stem.with_name(f"{archive_stem.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}"
                                  ".partial")


def written_by(args: Iterable[str]) -> Optional[Path]:
    """The archive a JVM with these command-line arguments writes at its exit."""
    for arg in args:
        if arg.startswith(WRITE):
            return Path(arg[len(WRITE):])
    return None


def keep(written: Optional[Path]) -> Optional[Path]:
    """After the writer's clean exit: its archive, whole, into place."""
    if not written or not written.name.endswith(".partial"):
        return None
    # Another JVM of the same key kept one first (two clusters or sessions
    # started together on a machine without the archive: seen in CI): the
    # second copy would only take room, one more ~50-180 MB.
    archive_stem = written.with_name(written.name.split(".")[0])  # (partial's inverse)
    already = find(archive_stem)
    if already is not None:
        drop(written)
        return already
    try:
        size = written.stat().st_size
        if size == 0:
            raise OSError("empty")
        kept = archive_stem.with_name(f"{archive_stem.name}.{size}.jsa")
        os.replace(written, kept)
        return kept
    except OSError:  # nothing written, or a cache we cannot write: next time
        drop(written)
        return None


def drop(written: Optional[Path]) -> None:
    """A writer killed (or one that wrote nothing): nothing half-written stays."""
    if written:
        try:
            written.unlink(missing_ok=True)
        except OSError:
            pass


def abandoned(directory: Path) -> list[Path]:
    """Partial archives whose process is gone (a run stopped by a signal
    does not wait for its JVM to write; one killed cannot)."""
    from isr.signals import pid_alive

    out: list[Path] = []
    try:
        partials = list(directory.glob("*.partial"))
    except OSError:
        return out
    for path in partials:
        pid = path.name.split(".")[-2].split("-")[0]
        if pid.isdigit() and not pid_alive(int(pid)):
            out.append(path)
    return out
