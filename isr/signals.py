"""Ctrl-C and SIGTERM stop every command within seconds, with exit code 130
(README, "Exit codes"); a service manager's stop never has to become a kill.

`handled()` (around every command, isr/cli.py) makes SIGTERM do what Ctrl-C
does by default: raise KeyboardInterrupt wherever the command waits (a file,
stdin, a Kafka client's Python loop), which main() turns into 130.

A loop that stops at a clean point by itself (`isr run`, the taps, polling)
enters `StopOnSignal`: the first signal only sets its flag (the handler must
not do more: it runs between two bytecodes of whatever the loop was doing).
If the loop has not stopped `grace_s` later (blocked in a call that does
not look at the flag), the watchdog raises the signal again, which then
interrupts like Ctrl-C; and if the process is still there `HARD_S` after
that (a C call that does not return), it exits with one line. The handlers
before are put back on exit.

A signal can land anywhere, and at start-up it lands inside library code
that builds classes. Three things found by a CI flake (exit -2 with stderr
empty, or 1 with a traceback, ~1 run in 30 of a SIGTERM during start-up):
- CPython remembers a plain KeyboardInterrupt that leaves any `exec`/`eval`
  of a string (dataclasses, namedtuple and pydantic build classes so, at
  import) even when it is caught later, and `python -m` then ends by its
  own SIGINT instead of the exit code (Python/pythonrun.c,
  run_eval_code_obj, compares the type exactly: a subclass does not count).
  So the handler raises `SignalInterrupt`, a KeyboardInterrupt of its own.
- A library may wrap the interrupt it was cut by (pydantic-core's
  SchemaError, `__set_name__`'s RuntimeError in 3.11); `handled()` turns
  such an error, once a signal came, back into the stop it was.
- A callback that cannot raise (a weakref callback of the import system's
  module locks) swallows it with an "Exception ignored" traceback:
  `_on_unraisable` has the watchdog send the signal again instead.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from contextlib import contextmanager
from typing import Iterator, Optional

SIGNALS = (signal.SIGINT, signal.SIGTERM)
GRACE_S = 2.0   # a flagged loop's time to reach its clean stop
HARD_S = 3.0    # after the interrupt, the time before the process exits regardless


class _State:
    def __init__(self) -> None:
        self.label = "isr"
        self.first: Optional[tuple[int, float]] = None   # (signal, monotonic time)
        self.sections: list["StopOnSignal"] = []
        self.interrupted_at: Optional[float] = None
        self.commands = 0   # handled() blocks open
        self.watchdog: Optional[threading.Thread] = None
        self.unraisablehook = sys.unraisablehook   # the one before handled()
        self.resend = False   # an interrupt was swallowed (_on_unraisable)
        self.ever = False     # a stop signal came, at any time (not reset: stop_requested)


_state = _State()


class SignalInterrupt(KeyboardInterrupt):
    """The stop a signal asked for (module docstring: why not a plain
    KeyboardInterrupt); `except KeyboardInterrupt` catches it as before."""


_INTERRUPT_NAMES = ("KeyboardInterrupt", "SignalInterrupt")  # pydantic-core writes the class name


def _caused_by_interrupt(exc: Optional[BaseException]) -> bool:
    """An error raised because the interrupt cut a library short: the
    interrupt is in its chain, or in its text (a wrapper that kept only that)."""
    for _ in range(20):  # a chain can loop
        if exc is None:
            return False
        try:
            text = str(exc)
        except Exception:  # noqa: BLE001 - a broken __str__ says nothing
            text = ""
        if isinstance(exc, KeyboardInterrupt) or any(n in text for n in _INTERRUPT_NAMES):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def _reset() -> None:
    _state.first = _state.interrupted_at = None
    _state.resend = False


def _start_watchdog() -> None:
    if _state.watchdog is None:
        _state.watchdog = threading.Thread(target=_watchdog, name="isr-stop-watchdog",
                                           daemon=True)
        _state.watchdog.start()


def stop_requested() -> bool:
    """Whether Ctrl-C or SIGTERM came while this process ran a command: an
    exit then does no more than it must (isr/stream/jvm.py's class archive)."""
    return _state.ever


def _on_signal(signum, _frame) -> None:
    now = time.monotonic()
    _state.ever = True
    if _state.first is None:
        _state.first = (signum, now)
    section = _state.sections[-1] if _state.sections else None
    if section is not None and not section.stopped:
        section.stopped = True
        section.at = now
        return
    if _state.interrupted_at is None:
        _state.interrupted_at = now
    raise SignalInterrupt


def _on_unraisable(unraisable) -> None:
    """A callback Python cannot raise from (a weakref callback such as the
    import system's module locks, a __del__) swallowed the interrupt, and
    would print it as "Exception ignored": the watchdog sends the signal
    again instead (not from here: it would land in this hook), to land in
    code that can raise."""
    if isinstance(unraisable.exc_value, KeyboardInterrupt) and _state.first is not None:
        _state.resend = True
    else:
        _state.unraisablehook(unraisable)


def _watchdog() -> None:
    """Polls (no locks shared with the handler): escalates a flag that was not
    acted on, and ends a process an interrupt did not end. It reads a
    snapshot of the state, which the main thread may change meanwhile."""
    while True:
        time.sleep(0.1)
        first, sections, interrupted_at = _state.first, _state.sections[:], _state.interrupted_at
        if first is None:
            continue
        if _state.resend:
            _state.resend = False
            os.kill(os.getpid(), first[0])
        now = time.monotonic()
        section = sections[-1] if sections else None
        if (interrupted_at is None and section is not None and section.stopped
                and now - section.at >= section.grace_s):
            _state.interrupted_at = now
            os.kill(os.getpid(), first[0])  # now it interrupts (the flag is set)
        elif interrupted_at is not None and now - interrupted_at >= HARD_S:
            os.write(2, f"{_state.label}: still busy {now - first[1]:.0f} s after "
                        f"{signal.Signals(first[0]).name}; exiting now\n".encode())
            os._exit(130)


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextmanager
def handled(label: str = "isr") -> Iterator[None]:
    """SIGINT and SIGTERM interrupt the command (KeyboardInterrupt) for as long
    as the block runs; `label` names the command in the last-resort line."""
    if not _in_main_thread():
        yield  # signals are the main thread's: a command run in a thread keeps its caller's
        return
    if _state.commands and _state.first is not None:
        # The stop came during the outer block (cli.main's imports) and a
        # library swallowed it (`except BaseException`): stop now.
        raise SignalInterrupt
    _state.label = label
    if not _state.commands:
        _reset()
    previous = {s: signal.signal(s, _on_signal) for s in SIGNALS}
    if not _state.commands:
        _state.unraisablehook, sys.unraisablehook = sys.unraisablehook, _on_unraisable
    _state.commands += 1
    _start_watchdog()
    try:
        yield
    except Exception as exc:
        if _state.first is not None and _caused_by_interrupt(exc):
            raise SignalInterrupt from exc
        raise
    finally:
        _state.commands -= 1
        for s, handler in previous.items():
            signal.signal(s, handler)
        if not _state.commands:
            sys.unraisablehook = _state.unraisablehook
        _reset()


class StopOnSignal:
    """`with StopOnSignal() as stop: while not stop(): ...`: the first signal
    sets the flag; `grace_s` later it interrupts the loop like Ctrl-C."""

    def __init__(self, grace_s: float = GRACE_S) -> None:
        self.stopped = False
        self.at = 0.0
        self.grace_s = grace_s

    def __enter__(self) -> "StopOnSignal":
        self._previous = ({s: signal.signal(s, _on_signal) for s in SIGNALS}
                          if _in_main_thread() else {})
        _state.sections.append(self)
        _start_watchdog()
        return self

    def __exit__(self, *exc) -> None:
        _state.sections.remove(self)
        for s, handler in self._previous.items():
            signal.signal(s, handler)
        if not _state.commands and not _state.sections:
            _reset()  # used on its own (spark-submit's job): the next one starts afresh

    def __call__(self) -> bool:
        return self.stopped


def run_interruptibly(call, timeout_s: float):
    """`call()` in a helper thread, waited for in small steps: a C call that
    does not look at signals (librdkafka's metadata request) no longer holds
    a Ctrl-C or SIGTERM back for its whole timeout. The thread is a daemon:
    an interrupted call finishes (within its own timeout) on its own."""
    box: dict = {}

    def target() -> None:
        try:
            box["value"] = call()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            box["error"] = exc

    worker = threading.Thread(target=target, name="isr-blocking-call", daemon=True)
    worker.start()
    deadline = time.monotonic() + timeout_s + 5.0  # the call's own timeout comes first
    while worker.is_alive() and time.monotonic() < deadline:
        worker.join(0.1)
    if "error" in box:
        raise box["error"]
    if "value" not in box:
        raise TimeoutError(f"no answer within {timeout_s:g} s")
    return box["value"]


class Stopped(Exception):
    """A wait given up because a stop was asked for (`call_until`)."""


def call_until(call, stop, what: str = "isr-call"):
    """`call()` in a helper thread, waited for until it returns (its value, or
    what it raised) or `stop()` is true (then Stopped): for a call no signal
    can cut short, such as Spark planning a query's source through Py4J
    (a Python data source's schema is asked of a worker process), which may
    take a minute on a busy machine. The call runs on in its daemon thread,
    its outcome dropped; it must not print (what it raises is kept, never
    shown), and the process's exit ends it: pyspark kills its JVM at exit."""
    box: dict = {}

    def target() -> None:
        try:
            box["value"] = call()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller, or dropped
            box["error"] = exc

    worker = threading.Thread(target=target, name=what, daemon=True)
    worker.start()
    while worker.is_alive():
        if stop():
            raise Stopped(what)
        worker.join(0.1)
    if "error" in box:
        raise box["error"]
    return box["value"]


def pid_alive(pid: int) -> bool:
    """Whether process `pid` still runs; a zombie (exited, not yet reaped
    by its parent) does not. For watching an owner or a started node."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # there, someone else's
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True
