"""Ctrl-C and SIGTERM as a flag a loop checks (`isr run`, `isr tap`): the
handler only sets it, since a signal handler must not take locks; the
handlers before are put back on exit."""

from __future__ import annotations

import signal


class StopOnSignal:
    def __init__(self) -> None:
        self.stopped = False

    def __enter__(self) -> "StopOnSignal":
        self._previous = {s: signal.signal(s, self._stop) for s in (signal.SIGINT, signal.SIGTERM)}
        return self

    def _stop(self, *_) -> None:
        self.stopped = True

    def __exit__(self, *exc) -> None:
        for s, handler in self._previous.items():
            signal.signal(s, handler)

    def __call__(self) -> bool:
        return self.stopped
