"""A Spark standalone cluster on loopback for the tests: one master and N
workers (1 core each) started with `spark-class` from the installed pyspark,
and a Python environment for the executors that has the project's
dependencies but not `isr` (so shipping the package is really tested).

Every process is started in its own process group and stopped with it: by
the fixture's teardown (also when a test failed), by atexit, and, on Linux,
by the kernel when the test process dies (PR_SET_PDEATHSIG), so no JVM is
left behind.

Ports (all explicit, 127.0.0.1 only): PORT_BASE + 0 master, + 1 master UI,
+ 10.. workers, + 20.. worker UIs, + 30 driver, + 31 driver block manager,
+ 40.. executors' block managers.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

from isr.stream.jvm import QUICK_START_JVM

PORT_BASE = int(os.environ.get("TEST_SPARK_PORT_BASE", "19400"))
HOST = "127.0.0.1"
EXECUTOR_MEMORY = "512m"  # Spark's least (reserved 300 MB × 1.5)


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when the test process dies."""
    os.setsid()
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def clean_env(**extra: str) -> dict[str, str]:
    """The environment without anything that would put `isr` on a path."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "SPARK_HOME",
                        "VIRTUAL_ENV")}
    env.update(SPARK_LOCAL_IP=HOST, SPARK_HOME=str(spark_home()), **extra)
    return env


def _wait_port(port: int, proc: subprocess.Popen, log: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"exited with {proc.returncode}: {log.read_text()[-2000:]}")
        try:
            with socket.create_connection((HOST, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"nothing listens on {port} after {timeout} s: {log.read_text()[-2000:]}")


class Worker:
    def __init__(self, index: int, proc: subprocess.Popen, log: Path, workdir: Path):
        self.index, self.proc, self.log, self.workdir = index, proc, log, workdir

    def kill(self) -> None:
        """SIGKILL the worker and its executors (the whole process group):
        a machine lost, as far as Spark can tell."""
        _stop(self.proc, signal.SIGKILL)


def _stop(proc: subprocess.Popen, sig: int = signal.SIGTERM) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=5)


class StandaloneCluster:
    """`with StandaloneCluster(dir, workers=2) as c:` then spark-submit to c.master_url."""

    def __init__(self, base: Path, workers: int = 2, port_base: int = PORT_BASE):
        self.base, self.n_workers, self.port_base = base, workers, port_base
        self.master_url = f"spark://{HOST}:{port_base}"
        self.master: Optional[subprocess.Popen] = None
        self.workers: list[Worker] = []

    def _spawn(self, cls: str, args: list[str], log: Path) -> subprocess.Popen:
        cmd = [str(spark_home() / "bin" / "spark-class"), cls, *args]
        env = clean_env(SPARK_DAEMON_MEMORY="256m", SPARK_DAEMON_JAVA_OPTS=QUICK_START_JVM,
                        SPARK_LOG_DIR=str(self.base / "logs"),
                        SPARK_WORKER_DIR=str(self.base / "work"))
        f = open(log, "wb")
        try:
            return subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env,
                                    cwd=self.base, preexec_fn=_die_with_parent)
        finally:
            f.close()

    def start(self) -> "StandaloneCluster":
        self.base.mkdir(parents=True, exist_ok=True)
        atexit.register(self.stop)
        p = self.port_base
        log = self.base / "master.log"
        self.master = self._spawn("org.apache.spark.deploy.master.Master",
                                  ["--host", HOST, "--port", str(p), "--webui-port", str(p + 1),
                                   "--properties-file", str(self._props("master"))], log)
        _wait_port(p, self.master, log)
        for i in range(self.n_workers):  # the JVMs start side by side
            self.add_worker(i, wait=False)
        for w in self.workers:
            _wait_port(self.port_base + 10 + w.index, w.proc, w.log)
        self.wait_workers(self.n_workers)
        return self

    def _props(self, name: str) -> Path:
        path = self.base / f"{name}.properties"
        path.write_text("spark.master.rest.enabled=false\nspark.ui.reverseProxy=false\n"
                        "spark.worker.cleanup.enabled=false\n")
        return path

    def add_worker(self, i: int, wait: bool = True) -> Worker:
        p = self.port_base
        log = self.base / f"worker{i}.log"
        workdir = self.base / f"work{i}"
        proc = self._spawn("org.apache.spark.deploy.worker.Worker",
                           ["--host", HOST, "--port", str(p + 10 + i),
                            "--webui-port", str(p + 20 + i), "--cores", "1",
                            "--memory", "640m", "--work-dir", str(workdir),
                            "--properties-file", str(self._props("worker")), self.master_url],
                           log)
        if wait:
            _wait_port(p + 10 + i, proc, log)
        worker = Worker(i, proc, log, workdir)
        self.workers.append(worker)
        return worker

    def restart_worker(self, i: int) -> None:
        """A new worker in place of worker i (after it was killed)."""
        self.workers = [w for w in self.workers if w.index != i]
        registered = self._registered()
        self.add_worker(i)
        self.wait_workers(registered + 1)

    def ensure_workers(self) -> None:
        """Every worker up again (a test before killed one): paid only by a
        test that follows the kill, not by the kill's own test."""
        for w in list(self.workers):
            if w.proc.poll() is not None:
                self.restart_worker(w.index)

    def _registered(self) -> int:
        return (self.base / "master.log").read_text(errors="replace").count("Registering worker")

    def wait_workers(self, n: int, timeout: float = 60) -> None:
        """Until the master's log says n workers registered."""
        log = self.base / "master.log"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._registered() >= n:
                return
            time.sleep(0.2)
        raise RuntimeError(f"{n} workers did not register: {log.read_text()[-2000:]}")

    def conf(self) -> list[str]:
        """spark-submit options that pin every port of the application."""
        p = self.port_base
        pairs = {"spark.driver.host": HOST, "spark.driver.bindAddress": HOST,
                 "spark.driver.port": p + 30, "spark.driver.blockManager.port": p + 31,
                 "spark.blockManager.port": p + 40, "spark.port.maxRetries": 8,
                 "spark.ui.enabled": "false", "spark.executor.memory": EXECUTOR_MEMORY,
                 "spark.executor.extraJavaOptions": QUICK_START_JVM,
                 "spark.executor.cores": 1, "spark.cores.max": self.n_workers}
        return [arg for k, v in pairs.items() for arg in ("--conf", f"{k}={v}")]

    def stop(self) -> None:
        for w in self.workers:
            _stop(w.proc)
        if self.master is not None:
            _stop(self.master)

    def __enter__(self) -> "StandaloneCluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def executor_logs(self) -> str:
        return "\n".join(p.read_text(errors="replace")
                         for p in sorted(self.base.glob("work*/*/*/stderr")))


def python_without_isr(base: Path) -> Path:
    """A venv whose packages are this interpreter's, except `isr`: the
    executors' Python of a cluster where only the dependencies are
    installed. Built in a second: a .pth names a directory of links to every
    installed package but the project (the editable install's finder is a
    .pth of its own, which Python does not run from such a directory)."""
    env = base / "deps-env"
    python = env / "bin" / "python"
    if python.exists():
        return python
    import sysconfig

    subprocess.run([sys._base_executable, "-m", "venv", "--without-pip", str(env)], check=True)
    links = base / "deps-site"
    links.mkdir(parents=True, exist_ok=True)
    site = Path(sysconfig.get_paths()["purelib"])
    for entry in site.iterdir():
        name = entry.name.lower()
        if name == "isr" or name.startswith(("isr_monitor", "__editable__")):
            continue
        if not (links / entry.name).exists():
            (links / entry.name).symlink_to(entry)
    (site_of(python) / "deps.pth").write_text(str(links) + "\n")
    check = subprocess.run([str(python), "-c", "import pydantic, pandas, pyarrow, confluent_kafka\n"
                            "try:\n import isr\nexcept ImportError: pass\n"
                            "else: raise SystemExit('isr importable')"],
                           env=clean_env(), cwd=base, capture_output=True, text=True)
    assert check.returncode == 0, check.stderr
    return python


def site_of(python: Path) -> Path:
    out = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                         capture_output=True, text=True, check=True, env=clean_env())
    path = Path(out.stdout.strip())
    path.mkdir(parents=True, exist_ok=True)
    return path
