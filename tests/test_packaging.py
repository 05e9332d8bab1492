"""What the wheel carries for spark-submit and operators (issue 24, items 8,
9, 11): the job script and the ops files out of an installed wheel, one name
for the config flag, a build without setuptools' license warning."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

from isr.ops import OPS_FILES

ROOT = Path(__file__).resolve().parents[1]


def test_the_wheel_has_an_spdx_license_and_builds_without_warnings(wheel):
    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        text = z.read(meta).decode()
    assert "License-Expression: Apache-2.0" in text
    log = wheel.with_suffix(".log").read_text()
    assert "Running setup.py" in log or "setuptools" in log  # the backend's output is there
    assert "SetuptoolsDeprecationWarning" not in log, log[-3000:]


def test_isr_files_writes_the_job_script_and_ops_files_from_the_wheel_alone(wheel, tmp_path):
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target",
                    str(site), str(wheel)], check=True, capture_output=True)
    env = {**os.environ, "PYTHONPATH": str(site)}
    out = subprocess.run([sys.executable, "-m", "isr.cli", "files", "--out", "ops"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    printed = out.stdout.split()
    assert printed == [str(Path("ops") / target) for _, target in OPS_FILES]
    for source, target in OPS_FILES:
        assert (tmp_path / "ops" / target).read_bytes() == (ROOT / source).read_bytes(), target
    assert "spark-submit --py-files isr_monitor-0.1.0-py3-none-any.whl" in out.stderr
    # The package data came from the wheel, not this checkout.
    where = subprocess.run([sys.executable, "-c", "import isr.ops as o; print(o.source_of('isr.toml'))"],
                           cwd=tmp_path, env=env, capture_output=True, text=True)
    assert where.stdout.startswith(str(site))


def test_isr_files_into_a_file_is_a_one_line_error(tmp_path):
    (tmp_path / "taken").write_text("x")
    out = subprocess.run([sys.executable, "-m", "isr.cli", "files", "--out", "taken"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == ["isr files: --out taken: not a directory"]


def test_the_job_takes_config_and_warns_on_its_old_conf_flag(tmp_path):
    def job(*args):
        return subprocess.run([sys.executable, str(ROOT / "jobs/isr_monitor.py"), *args],
                              cwd=tmp_path, capture_output=True, text=True, timeout=60)

    new = job("--config", "missing.toml")
    old = job("--conf", "missing.toml")
    assert new.returncode == old.returncode == 2
    assert "missing.toml" in new.stderr and "--conf" not in new.stderr
    lines = old.stderr.strip().splitlines()
    assert lines[0] == "isr_monitor: --conf is the old name of --config; use --config"
    assert lines[1:] == new.stderr.strip().splitlines()
