"""Each bucket's engine in a process of its own, beside the Python workers
(`ISR_ENGINE_PROCESS`, on by default).

The engine cache (statelog.py) keeps a bucket's engine in the Python
process that ran its last batch. Spark hands a task to whichever idle
Python worker comes first (PythonWorkerFactory's idle workers are a FIFO
queue shared by every Python stage of the batch, the packing stage's tasks
too), so on `local[2]` the two buckets' tasks swapped workers every other
batch: about half of the bucket calls missed the cache and rebuilt their
engine from the state row, and each worker came to hold both buckets'
engines (2 engines × 2 workers; docs/benchmarks.md, "Memory of `isr run`").

Here the Python worker that runs a bucket's task only hands the batch over:
one engine process per bucket (per PySpark daemon, i.e. per executor; the
same bucket of every query of the application) holds the engine and runs
the call exactly as the worker did (operator._call_rows: statelog.load, the
processor, statelog.save), over a Unix socket. Whatever worker runs the
task, the engine it finds is the one that bucket's last batch saved, and
each bucket's engine is held once. Nothing about exactness changes: the
state row stays the truth, and the engine process uses its engine only when
the row's version is the one it saved (statelog.py), so a retried task, a
task cut off half-way or a restart rebuild from the row as before.

Lifetime: started by the first worker that needs it (a lock file keeps two
from starting the same one), it lives as long as the process that forked
the workers (PySpark's daemon; without the daemon, the executor's JVM) and
ends when that one is gone, on SIGHUP/SIGTERM (the daemon's shutdown sends
SIGHUP to its process group), or after ENGINE_IDLE_S without a call.
`ISR_ENGINE_PROCESS=0` runs the buckets inside the Python workers as before.
"""

from __future__ import annotations

import fcntl
import os
import pickle
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import traceback
from typing import Iterator, Optional

from isr.signals import pid_alive
from isr.stream import trim

ENV = "ISR_ENGINE_PROCESS"
IDLE_ENV = "ISR_ENGINE_IDLE_S"
ENGINE_IDLE_S = 900.0
START_TIMEOUT_S = 120.0
_LEN = struct.Struct("<Q")
# Output rows per frame of a call's reply: ~3 MB of pickle at 100 k
# partitions; the worker makes one pandas frame of each, and Spark one Arrow
# batch of every ~10,000 rows (spark.sql.execution.arrow.maxRecordsPerBatch).
REPLY_ROWS = 4096


def enabled() -> bool:
    return os.environ.get(ENV, "1") != "0"


def _socket_dir() -> str:
    path = os.path.join(tempfile.gettempdir(), f"isr-engine-{os.getuid()}")
    os.makedirs(path, mode=0o700, exist_ok=True)
    return path


def address(layout: tuple[int, int], owner: Optional[int] = None) -> str:
    """The socket of bucket `layout` (index, buckets) of the workers forked
    by `owner` (default: this worker's parent, PySpark's daemon)."""
    owner = os.getppid() if owner is None else owner
    return os.path.join(_socket_dir(), f"{owner}-{layout[0]}-{layout[1]}.sock")


# ------------------------------------------------------------------ framing
def _send(sock: socket.socket, obj) -> None:
    data = pickle.dumps(obj, protocol=5)
    sock.sendall(_LEN.pack(len(data)))
    sock.sendall(data)


def _recv_exact(sock: socket.socket, n: int) -> bytearray:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:], n - got)
        if not k:
            raise EOFError("the engine process closed the connection")
        got += k
    return buf


def _recv(sock: socket.socket):
    (n,) = _LEN.unpack(_recv_exact(sock, _LEN.size))
    return pickle.loads(_recv_exact(sock, n))


# ------------------------------------------------------------------ the worker's side
class Reply:
    """A bucket call's reply as the engine process writes it: the output
    rows a piece at a time (`pieces`), written as soon as the batch's
    records are applied, while the engine process saves the bucket; then
    the new state row (`row`, once `pieces` is done). Neither side holds
    all of a call's outputs at once as Python objects, a pickle and a
    frame (docs/benchmarks.md, issue 23, branch `engreply`)."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self.row: Optional[bytes] = None

    def pieces(self) -> Iterator[list]:
        """Each piece of output rows (tuples of OutputRecord's fields);
        raises what the call raised there, possibly after some pieces (the
        task then fails, and its outputs with it)."""
        try:
            while True:
                status, *result = _recv(self._sock)
                if status == "rows":
                    yield result[0]
                elif status == "ok":
                    self.row = result[0]
                    return
                else:
                    raise _failure(*result)
        finally:
            self._sock.close()


def call(settings_json: str, layout: tuple[int, int], blob: Optional[bytes],
         packs: list, summaries: list, query: tuple) -> Reply:
    """One bucket call in the bucket's engine process: its reply, to read
    (the request is written when this returns)."""
    sock = _connect(layout)
    try:
        _send(sock, (settings_json, layout, query, blob, packs, summaries))
    except BaseException:
        sock.close()
        raise
    return Reply(sock)


def _failure(exc: Optional[BaseException], text: str) -> BaseException:
    if exc is None:
        return RuntimeError(f"the bucket's engine process failed:\n{text}")
    return exc


def stop(layout: tuple[int, int], owner: Optional[int] = None) -> bool:
    """End bucket `layout`'s engine process, if one runs (tests)."""
    s = _try_connect(address(layout, owner))
    if s is None:
        return False
    with s:
        _send(s, "stop")
    return True


def _try_connect(path: str) -> Optional[socket.socket]:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(path)
        return s
    except OSError:
        s.close()
        return None


def _connect(layout: tuple[int, int]) -> socket.socket:
    path = address(layout)
    s = _try_connect(path)
    if s is not None:
        return s
    with open(path + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one worker starts it
        s = _try_connect(path)
        if s is not None:
            return s
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        env.setdefault("MALLOC_MMAP_THRESHOLD_", "1048576")  # job.MEMORY_DEFAULTS
        proc = subprocess.Popen([sys.executable, "-m", "isr.stream.engineproc", path,
                                 str(os.getppid())],
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, env=env,
                                close_fds=True)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            s = _try_connect(path)
            if s is not None:
                return s
            if proc.poll() is not None:
                raise RuntimeError(f"the bucket's engine process ended at its start "
                                   f"(exit {proc.returncode}); set {ENV}=0 to run the "
                                   "buckets in the Python workers")
            time.sleep(0.05)
        proc.kill()
        raise RuntimeError(f"the bucket's engine process did not start in {START_TIMEOUT_S:.0f} s")


# ------------------------------------------------------------------ the engine process
class _WorkerGone(Exception):
    """The worker went away while its reply was written (its task killed)."""


def _handle(conn: socket.socket, request: list) -> tuple:
    """The call of `request` (emptied: the caller keeps none of it), its
    output rows written to `conn` before the bucket is saved (_send_rows);
    the reply's last frame: ("ok", the new state row) or ("err", ...)."""
    from isr.stream import operator

    settings_json, layout, query, blob, packs, summaries = request
    request.clear()
    processor = operator._processor(settings_json)
    try:
        row = operator._call_rows(processor, tuple(layout), blob, _handed_over(packs),
                                  summaries, tuple(query),
                                  hand_over=lambda rows: _send_rows(conn, rows))[1]
        return ("ok", row)
    except _WorkerGone:
        raise
    except Exception as exc:  # noqa: BLE001 - handed to the worker, raised there
        text = traceback.format_exc()
        try:
            pickle.dumps(exc)
            return ("err", exc, text)
        except Exception:  # noqa: BLE001 - an exception that does not pickle
            return ("err", None, text)


def _send_rows(sock: socket.socket, rows: list) -> None:
    """The call's output rows written to the worker REPLY_ROWS at a time,
    each let go of once pickled (emptying `rows`): the outputs are then gone
    before the bucket is saved, and no pickle of them all is ever made
    (~38 + ~50 MB at 100 k partitions when every partition's state goes
    out; docs/benchmarks.md, issue 23, branch `engreply`). The bucket is
    not saved if the worker is gone: the call is dropped, and its engine
    left out of the cache (statelog.load took it out), as if it had failed."""
    rows.reverse()
    try:
        while rows:
            piece = [tuple(rows.pop()) for _ in range(min(REPLY_ROWS, len(rows)))]
            _send(sock, ("rows", piece))
            del piece
    except OSError as exc:
        raise _WorkerGone() from exc


def _handed_over(packs: list):
    """The batch's packs, each let go of as the call reads it: the table the
    call makes of them (operator._call_rows, packing.unpack) is all that
    holds them then, and it is gone once the records are applied, before
    the bucket is saved and the reply made, a call's fullest moments (a
    bucket's packs at 100 k partitions: 30-40 MB; docs/benchmarks.md,
    issue 23, branch `enginerss`)."""
    packs.reverse()
    while packs:
        yield packs.pop()


def _sweep(directory: str) -> None:
    """Remove the sockets and lock files of owners that are gone. An engine
    process that ended while its owner lived (idle, stopped) leaves its lock
    file for the owner's next worker, and a SIGKILL leaves its socket: once
    the owner is gone nobody will use them."""
    for name in os.listdir(directory):
        owner = name.split("-", 1)[0]
        if owner.isdigit() and name.endswith((".sock", ".lock")) and not pid_alive(int(owner)):
            try:
                os.unlink(os.path.join(directory, name))
            except OSError:
                pass  # another engine process swept it first


def serve(path: str, owner: int) -> None:
    # Import what a call needs before accepting one: a worker's first
    # connect then finds it ready.
    from isr.stream import operator, statelog  # noqa: F401

    statelog.CACHE_ENTRIES = 1  # this process holds one bucket
    idle_s = float(os.environ.get(IDLE_ENV, ENGINE_IDLE_S))
    _sweep(os.path.dirname(path))
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        os.unlink(path)  # a dead one's (the lock file keeps a live one's)
    except FileNotFoundError:
        pass
    server.bind(path)
    server.listen(8)
    server.settimeout(1.0)

    def leave(signum=None, _frame=None) -> None:
        # the socket; the lock file too once no worker of the owner can come
        # (the owner is gone, or its shutdown sent SIGHUP)
        going = signum == signal.SIGHUP or not pid_alive(owner)
        for name in (path, *((path + ".lock",) if going else ())):
            try:
                os.unlink(name)
            except OSError:
                pass
        os._exit(0)

    for sig in (signal.SIGHUP, signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, leave)
    last = time.monotonic()
    while True:
        try:
            conn, _ = server.accept()
        except socket.timeout:
            if not pid_alive(owner) or time.monotonic() - last > idle_s:
                leave()
            continue
        conn.settimeout(None)
        try:
            with conn:
                request = _recv(conn)
                if request == "stop":
                    leave()
                # The batch (its packs, the old row) is not kept while the
                # call runs (_handle empties it), nor until the next call's
                # arrives; the outputs go out before the save (_send_rows).
                request = list(request)  # the received tuple let go of
                reply = _handle(conn, request)
                del request
                _send(conn, reply)
                del reply
                trim.give_back()  # what the call freed (trim.py)
        except (OSError, EOFError, _WorkerGone):
            pass  # the worker went away (its task killed): its call is dropped
        last = time.monotonic()
        if not pid_alive(owner):
            leave()


if __name__ == "__main__":
    serve(sys.argv[1], int(sys.argv[2]))
