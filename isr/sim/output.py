"""Where simulated events go, and at what pace.

Three paces: as fast as possible (files), real time (event ts = wall clock,
for a live demo), and a fixed rate (the load generator: it holds the
requested events/s and reports the rate it really held).
"""

from __future__ import annotations

import sys
import time
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, Optional

import orjson

from isr.contract.events import routing_key
from isr.kafka.client import send

CHECK_EVERY = 256  # events between clock readings in the paced loops


@dataclass
class Sent:
    events: int
    seconds: float
    target_rate: Optional[float] = None
    monitor_overrides: tuple[str, ...] = ()  # the scenario's `--set` hints

    @property
    def rate(self) -> float:
        return self.events / self.seconds if self.seconds > 0 else 0.0


def at_rate(events: Iterable[dict], rate: float, seconds: float,
            clock: Callable[[], float] = time.monotonic,
            sleep: Callable[[float], None] = time.sleep) -> Iterator[dict]:
    """Pass events on at `rate` per second for `seconds` of wall time: at
    most rate * seconds events, fewer if the producer cannot keep up."""
    start = clock()
    budget = int(rate * seconds)
    for sent, ev in enumerate(events):
        if sent >= budget:
            return
        if sent % CHECK_EVERY == 0:
            elapsed = clock() - start
            if elapsed >= seconds:
                return
            ahead = sent / rate - elapsed
            if ahead > 0:
                sleep(ahead)
        yield ev


def in_real_time(events: Iterable[dict], clock: Callable[[], float] = time.time,
                 sleep: Callable[[float], None] = time.sleep) -> Iterator[dict]:
    """Pass each event on when the wall clock reaches its ts."""
    for ev in events:
        delay = ev["ts"] / 1000 - clock()
        if delay > 0.001:
            sleep(delay)
        yield ev


def write_file(events: Iterable[dict], path: str,
               on_progress: Optional[Callable[[int, int], None]] = None) -> Sent:
    """JSON lines to `path` (`-`: stdout)."""
    start = time.monotonic()
    count = 0
    target = nullcontext(sys.stdout.buffer) if path == "-" else open(path, "wb")
    with target as out:
        out_write = out.write
        for count, ev in enumerate(events, 1):
            out_write(orjson.dumps(ev) + b"\n")
            if on_progress is not None and count % 4096 == 0:
                on_progress(count, ev["ts"])
        out.flush()
    return Sent(count, time.monotonic() - start)


def produce(events: Iterable[dict], producer, topic: str,
            on_progress: Optional[Callable[[int, int], None]] = None,
            target_rate: Optional[float] = None) -> Sent:
    """Produce every event to `topic`; waits until all are acknowledged."""
    start = time.monotonic()
    count = 0
    try:
        for count, ev in enumerate(events, 1):
            send(producer, topic, orjson.dumps(ev), routing_key(ev))
            if count % 1024 == 0:
                producer.poll(0)
                if on_progress is not None:
                    on_progress(count, ev["ts"])
    finally:
        elapsed = time.monotonic() - start  # the paced part, before the final flush
        remaining = producer.flush(30)
    if remaining:
        raise RuntimeError(f"{remaining} events were not acknowledged by the broker in 30 s")
    return Sent(count, elapsed, target_rate)

