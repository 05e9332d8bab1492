"""Launch a job (`isr run`, spark-submit) in a test so that a crash of it can
be diagnosed after the fact: a process killed by a signal once in many CI runs
(a C++ `std::bad_alloc` that aborted spark-submit's driver JVM, rc -6, see
docs/real-kafka.md "Known issues") leaves too little in a 3,000-character
stderr tail to name the code that crashed, and does not repeat when rerun.

`run_kept` keeps the job's whole stdout and stderr in files (under spark-submit
the Python driver's own stderr arrives on spark-submit's stdout), lets it
write a core file (the soft core limit raised to the hard one) and tells the
JVM to write its fatal-error report (hs_err) there too. `crash_report` then
says how the process ended, where those files are, and, when a core was
written where the kernel's core_pattern puts it and gdb is installed, the
native frames of the thread that aborted or faulted."""

from __future__ import annotations

import importlib.util
import os
import re
import resource
import shutil
import signal
import subprocess
import time
import zipfile
from pathlib import Path
from typing import Optional

CORE_PATTERN = Path("/proc/sys/kernel/core_pattern")


def allow_core_dumps() -> None:
    """In the child before it runs: a core file as large as the hard limit allows
    (often 0 soft / unlimited hard, so no core unless a process asks)."""
    _soft, hard = resource.getrlimit(resource.RLIMIT_CORE)
    resource.setrlimit(resource.RLIMIT_CORE, (hard, hard))


def jvm_crash_options(out_dir: Path) -> str:
    """JVM options for a launch: HotSpot's fatal-error report (SIGSEGV, SIGBUS
    in native code, not an abort()) in out_dir instead of the working
    directory. It chooses neither a compiler nor a collector, so the driver
    JVM's own defaults (isr.stream.job.driver_java_options) still apply."""
    return f"-XX:ErrorFile={out_dir}/hs_err_pid%p.log"


def run_kept(command: list[str], *, cwd: Path, env: dict, out_dir: Path, name: str,
             timeout: float) -> subprocess.CompletedProcess:
    """Run `command`; its stdout and stderr are also in out_dir/name.stdout, .stderr."""
    out_dir.mkdir(parents=True, exist_ok=True)
    job = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True,
                         timeout=timeout, preexec_fn=allow_core_dumps)
    (out_dir / f"{name}.stdout").write_text(job.stdout)
    (out_dir / f"{name}.stderr").write_text(job.stderr)
    return job


def how_it_ended(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    if returncode > 128:  # a shell's or a JVM's report of its child's signal
        try:
            return f"exit code {returncode} (a child killed by {signal.Signals(returncode - 128).name}?)"
        except ValueError:
            pass
    return f"exit code {returncode}"


def core_files(cwd: Path, since: float) -> tuple[list[Path], str]:
    """Core files written since `since` where core_pattern puts them, and the
    pattern (a `|program` pattern hands cores to that program instead)."""
    try:
        pattern = CORE_PATTERN.read_text().strip()
    except OSError:
        return [], "(no core_pattern)"
    if pattern.startswith("|"):
        return [], pattern
    where = Path(pattern) if pattern.startswith("/") else cwd / pattern
    prefix = where.name.split("%")[0] or "core"
    found = [p for p in where.parent.glob(f"{prefix}*")
             if p.is_file() and p.stat().st_mtime >= since]
    return sorted(found), pattern


# Native libraries a JVM extracts from a jar into java.io.tmpdir and deletes
# as it exits: gdb needs the file back to name their frames (a core's frames
# in RocksDB's JNI library are "??" otherwise). Name pattern -> (jar, member).
JNI_LIBRARIES = {re.compile(r"librocksdbjni\d*\.so$"):
                 ("rocksdbjni-*.jar", "librocksdbjni-linux64.so")}


def restore_jni_libraries(gdb_warnings: str) -> list[Path]:
    """Put back, from pyspark's jars, the extracted JNI libraries gdb could not
    open; the paths written (to remove after)."""
    spec = importlib.util.find_spec("pyspark")
    jars = Path(spec.origin).parent / "jars" if spec and spec.origin else None
    restored = []
    for missing in sorted(set(re.findall(r"Can't open file (/\S+\.so)", gdb_warnings))):
        path = Path(missing)
        for pattern, (jar_glob, member) in JNI_LIBRARIES.items():
            jar = next(jars.glob(jar_glob), None) if jars and jars.is_dir() else None
            if pattern.search(path.name) and jar is not None and not path.exists():
                with zipfile.ZipFile(jar) as z, open(path, "wb") as out:
                    shutil.copyfileobj(z.open(member), out)
                restored.append(path)
    return restored


def native_frames(core: Path, limit: int = 30) -> Optional[str]:
    """The frames of the thread the signal killed, by gdb (every thread's go to
    a .bt.txt file beside the core); None without gdb."""
    gdb = shutil.which("gdb")
    if gdb is None:
        return None
    # no auto-loaded scripts, no symbol downloads (debuginfod): a report in seconds
    quiet = [gdb, "-batch", "-iex", "set auto-load off", "-iex", "set debuginfod enabled off"]
    head = subprocess.run([*quiet, "-c", str(core)], capture_output=True, text=True,
                          timeout=120).stdout
    program = re.search(r"Core was generated by `(\S+)", head)
    executable = program.group(1) if program else ""
    if not os.path.isfile(executable):  # a relative or truncated name: the JVM, most likely
        executable = shutil.which(os.path.basename(executable) or "java") or ""
    # `bt` first: gdb's current thread in a core is the one the signal killed
    command = [*quiet, "-ex", "bt", "-ex", "thread apply all bt",
               *([executable] if executable else []), str(core)]
    run = subprocess.run(command, capture_output=True, text=True, timeout=600)
    restored = restore_jni_libraries(run.stderr)
    try:
        if restored:
            run = subprocess.run(command, capture_output=True, text=True, timeout=600)
    finally:
        for path in restored:
            path.unlink(missing_ok=True)
    full = run.stdout
    core.with_name(core.name + ".bt.txt").write_text(full)
    crashed = re.split(r"\nThread \d+ ", full)[0]
    # dict: gdb also prints frame #0 as it loads the core
    frames = list(dict.fromkeys(line for line in crashed.splitlines() if line.startswith("#")))
    summary = [line for line in head.splitlines() if line.startswith(("Core was", "Program"))]
    return "\n".join(summary + frames[:limit])


def crash_report(job: subprocess.CompletedProcess, *, cwd: Path, out_dir: Path, name: str,
                 started: float) -> str:
    """What a failed launch left: how it ended, the kept files, a core's frames,
    the tails of its stderr and stdout. A core found is moved into out_dir
    (core_pattern `core` would leave it in the working directory, the repository)."""
    lines = [f"{name}: {how_it_ended(job.returncode)}",
             f"stdout, stderr: {out_dir / (name + '.stdout')}, {out_dir / (name + '.stderr')}"]
    lines += [f"JVM fatal-error report: {p}" for p in sorted(out_dir.glob("hs_err_pid*.log"))]
    cores, pattern = core_files(cwd, started)
    if job.returncode < 0 and not cores:
        lines.append(f"no core file (core_pattern {pattern!r}, core limit "
                     f"{resource.getrlimit(resource.RLIMIT_CORE)[1]})")
    for core in cores:
        kept = out_dir / core.name
        shutil.move(str(core), kept)
        lines.append(f"core file: {kept}")
        frames = native_frames(kept)
        lines.append(frames if frames is not None else "(gdb is not installed: "
                     f"gdb -batch -ex 'thread apply all bt' java {kept})")
    lines += ["--- stderr (tail) ---", job.stderr[-3000:], "--- stdout (tail) ---", job.stdout[-1500:]]
    return "\n".join(lines)


def launched_at() -> float:
    """A time to compare core files' mtimes with (a second's slack: mtimes are coarse)."""
    return time.time() - 1
