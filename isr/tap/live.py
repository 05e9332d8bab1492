"""The taps beside a running cluster, one configuration for the tests, the
demo and the compose stack (`isr tap cluster`, conf/compose/tap.sh):

- per broker `isr tap request-log -F` on its kafka-request.log, topic ids
  asked from the cluster (the followers' fetches: what the monitor decides on);
- per broker `isr tap state-change -F` on its state-change.log: the ISR
  commits, also the ones a KRaft leader's server.log misses (docs/tap.md);
  without `--replicas`, so its leader lines are isr events and the poller
  stays the one source of `leader` events (docs/tap.md);
- per broker `isr tap server-log -F` on its server.log (the leaders' own
  ISR lines, with their proposal numbers for `isr verify`);
- one `isr tap metadata --poll` (leaders, ISRs, brokers).

Each is its own `isr tap` process, as an operator would run it, so a slow
one does not hold up the others.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

# The file each per-broker tap reads, in the broker's log directory.
BROKER_TAPS = (("request-log", "kafka-request.log"),
               ("state-change", "state-change.log"),
               ("server-log", "server.log"))


@dataclass
class ClusterTaps:
    """What to tap: `log_path` names a broker's log file, with `{broker}`
    and `{file}` filled in (e.g. `/logs/broker-{broker}/{file}`)."""
    log_path: str
    brokers: Sequence[int]
    bootstrap: str
    to: str                         # kafka://TOPIC, a file, or - ({broker}/{tap} filled in)
    cluster: str = "default"
    poll_interval_s: float = 1.0
    sources: Sequence[str] = ("request-log", "state-change", "server-log", "metadata")
    extra: list[str] = field(default_factory=list)  # e.g. --set kafka.bootstrap_servers=...
    # the request-log taps' grain: "session" (fetch_session, their default) or
    # "partition" (per-partition fetch, for a monitor that does not read fetch_session)
    grain: str = "session"

    def commands(self) -> list[tuple[str, list[str]]]:
        """(name, the `isr` arguments) of every tap, in a fixed order."""
        out = []
        for broker in self.brokers:
            for tap, file in BROKER_TAPS:
                if tap not in self.sources:
                    continue
                args = ["tap", tap, self.log_path.format(broker=broker, file=file), "-F"]
                if tap == "request-log":
                    args += ["--broker", str(broker), "--topic-ids", self.bootstrap]
                    if self.grain != "session":
                        args += ["--grain", self.grain]
                out.append((f"{tap}-{broker}", args + self._sink(f"{tap}-{broker}")))
        if "metadata" in self.sources:
            out.append(("metadata", ["tap", "metadata", "--poll", self.bootstrap,
                                     "--interval-s", f"{self.poll_interval_s:g}"]
                        + self._sink("metadata")))
        return out

    def _sink(self, name: str) -> list[str]:
        return ["--cluster", self.cluster, "--to", self.to.format(tap=name), "-q", *self.extra]


def _die_with_parent() -> None:
    """A tap dies with the process that started it, however that dies."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class RunningTaps:
    """The taps as child processes (their own session: a Ctrl-C in the
    terminal is the starter's to handle); `stop()` SIGTERMs them all and
    waits, so nothing is left behind."""

    def __init__(self, taps: ClusterTaps, cwd: Optional[Path] = None,
                 stdout=None, stderr=None, env: Optional[dict] = None) -> None:
        self.taps, self.cwd, self.env = taps, cwd, env
        self.stdout, self.stderr = stdout, stderr
        self.procs: dict[str, subprocess.Popen] = {}

    def start(self) -> "RunningTaps":
        try:
            for name, args in self.taps.commands():
                self.procs[name] = subprocess.Popen(
                    [sys.executable, "-m", "isr.cli", *args], cwd=self.cwd, env=self.env,
                    stdin=subprocess.DEVNULL, stdout=self.stdout, stderr=self.stderr,
                    start_new_session=True, preexec_fn=_die_with_parent, text=True)
        except BaseException:
            self.stop()
            raise
        return self

    def failed(self) -> dict[str, int]:
        """Taps that ended on their own (they follow files: they should not)."""
        return {n: p.returncode for n, p in self.procs.items() if p.poll() is not None}

    def stop(self, timeout_s: float = 15.0) -> dict[str, int]:
        """SIGTERM to each, then wait; SIGKILL what is still there. Exit codes by name."""
        for proc in self.procs.values():
            if proc.poll() is None:
                try:
                    os.kill(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        codes = {}
        for name, proc in self.procs.items():
            try:
                codes[name] = proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                codes[name] = proc.wait()
        return codes

    def __enter__(self) -> "RunningTaps":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def kafka_cluster_taps(kafka, to: str, **kw) -> ClusterTaps:
    """The taps of a KafkaCluster (isr/kafka/cluster.py): its brokers' log files."""
    from isr.kafka.cluster import BROKER_IDS

    return ClusterTaps(log_path=str(kafka.conf.dir / "broker-{broker}" / "logs" / "{file}"),
                       brokers=BROKER_IDS, bootstrap=kafka.bootstrap, to=to, **kw)
