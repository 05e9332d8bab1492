"""The optional compiled domain core (scripts/build-native, mypyc): built in
a copy of this tree, it is what the copy imports, it decides byte for byte as
the Python modules do, the domain tests pass on it, and an edit after a build
is never ignored (isr/__init__.py runs the .py files then). Needs gcc and
Python's headers (.ci/run installs them)."""

from __future__ import annotations

import os
import runpy
import shutil
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from isr.sim.cluster import Simulator
from isr.sim.scenario import load_scenario

ROOT = Path(__file__).resolve().parent.parent
# The compiled modules (scripts/build-native's list), as module names.
NATIVE = [path[:-3].replace("/", ".")
          for path in runpy.run_path(str(ROOT / "scripts" / "build-native"))["NATIVE"]]
# The domain core's own tests (the models, the session driver against the
# per-partition expansion, the alert shortcuts against their scans, the
# seeds from Kafka's PartitionTest, the golden outputs), and the engine
# process's (the throttle, the snapshots and the state rows, the bucket
# calls), run on the build.
DOMAIN_TESTS = ["test_model_fetch.py", "test_model_time.py", "test_model_stall.py",
                "test_model_leader_brokers.py", "test_model_seeds.py", "test_engine.py",
                "test_sessions.py", "test_alerts.py", "test_tie_order.py", "test_golden.py",
                "test_shared_state.py", "test_gc_tuning.py", "test_whatif.py",
                "test_stream_operator.py", "test_statelog.py", "test_state_save_memory.py"]
SKIP = shutil.ignore_patterns(".git", ".venv", "build", "tmp", "dist", "__pycache__", "*.so",
                              "native.json", ".hypothesis", ".mypy_cache", "*.egg-info",
                              "checkpoints", "results", "spark-warehouse")

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None and shutil.which("cc") is None,
                                reason="no C compiler (gcc) to build the compiled core")


def _copy(tmp_path_factory) -> Path:
    """This tree's files, without what a build made (this tree may be built)."""
    tree = tmp_path_factory.mktemp("native") / "tree"
    shutil.copytree(ROOT, tree, ignore=SKIP)
    return tree


@pytest.fixture(scope="module")
def pure(tmp_path_factory) -> Path:
    return _copy(tmp_path_factory)


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    tree = _copy(tmp_path_factory)
    run = subprocess.run([sys.executable, "scripts/build-native"], cwd=tree,
                         capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout + run.stderr
    # each module's extension and their shared library
    assert f"build-native: {len(NATIVE) + 1} extension modules" in run.stdout
    return tree


def _python(tree: Path, *args: str, **kw) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    return subprocess.run([sys.executable, *args], cwd=tree, env=env, capture_output=True,
                          text=True, timeout=900, **kw)


def _imported(tree: Path) -> list[str]:
    run = _python(tree, "-c", "import importlib, isr; print(isr.__file__); "
                  f"print(*[importlib.import_module(m).__file__ for m in {NATIVE!r}])")
    assert run.returncode == 0, run.stderr
    lines = run.stdout.split("\n")
    assert lines[0] == str(tree / "isr" / "__init__.py")  # the copy, not this tree
    return lines[1].split()


def test_the_build_is_imported_and_decides_byte_for_byte_as_the_python_modules(pure, built,
                                                                              tmp_path):
    assert all(path.endswith(".so") for path in _imported(built))
    assert all(path.endswith(".py") for path in _imported(pure))
    sc = load_scenario("slow-follower", duration_ms=60_000)
    events = tmp_path / "demo.jsonl"
    events.write_bytes(b"\n".join(orjson.dumps(ev) for ev in
                                  Simulator(sc, grain="session").events()) + b"\n")
    outputs = []
    for tree in (pure, built):
        out = tmp_path / f"out-{len(outputs)}.jsonl"
        run = _python(tree, "-m", "isr.cli", "replay", str(events), "--policy",
                      "kafka,kip16,legacy,kip501", "--set", "monitor.alerts.enabled=true",
                      "-q", "-o", str(out))
        assert run.returncode == 0, run.stderr
        outputs.append(out.read_bytes())
    assert outputs[0] == outputs[1]
    assert b'"isr_change"' in outputs[0] and b'"alert"' in outputs[0]


def test_the_domain_tests_pass_on_the_build(built):
    run = _python(built, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                  *[f"tests/{name}" for name in DOMAIN_TESTS])
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    summary = run.stdout.strip().splitlines()[-1]
    passed = int(summary.split(" passed")[0].split()[-1])
    assert passed >= 150, summary  # the files' tests ran: only pure_only ones are skipped


def test_an_edit_after_the_build_runs_the_python_modules_with_one_line(built):
    source = built / "isr" / "model" / "rules.py"
    before = source.read_bytes()
    source.write_bytes(before + b"\n# edited after the build\n")
    try:
        run = _python(built, "-c", "import isr.engine.local as m, isr.model.rules as r; "
                      "print(m.__file__, r.__file__)")
        assert run.returncode == 0, run.stderr
        assert run.stdout.split() == [str(built / "isr" / "engine" / "local.py"),
                                      str(source)]
        assert run.stderr.strip().splitlines() == [
            "isr: the compiled domain core is older than isr/model/rules.py: running its "
            "Python modules; rebuild with scripts/build-native (or remove it: --clean)"]
    finally:
        source.write_bytes(before)
    assert all(path.endswith(".so") for path in _imported(built))  # as built again
