"""The failure message of a job launch that crashed (tests/crashreport.py):
what a developer reading a one-off CI failure has to go on."""

from __future__ import annotations

import resource
import shutil
import sys

import pytest
from crashreport import CORE_PATTERN, crash_report, launched_at, run_kept


def test_an_aborted_launch_is_reported_with_its_signal_its_files_and_its_frames(tmp_path):
    out = tmp_path / "out"
    since = launched_at()
    job = run_kept([sys.executable, "-c", "import os, sys; print('to stdout', flush=True); "
                    "sys.stderr.write('what it said last\\n'); sys.stderr.flush(); os.abort()"],
                   cwd=tmp_path, env={}, out_dir=out, name="job", timeout=60)
    report = crash_report(job, cwd=tmp_path, out_dir=out, name="job", started=since)
    assert report.startswith("job: killed by SIGABRT")
    assert (out / "job.stderr").read_text() == "what it said last\n"
    assert (out / "job.stdout").read_text() == "to stdout\n"
    assert "what it said last" in report and str(out / "job.stderr") in report
    pattern = CORE_PATTERN.read_text().strip() if CORE_PATTERN.exists() else "|"
    if pattern.startswith(("|", "/")) or resource.getrlimit(resource.RLIMIT_CORE)[1] == 0:
        assert "no core file" in report
        return
    # core_pattern `core` (a file in the working directory): moved out of it
    assert not list(tmp_path.glob("core*")), "the core was left where it was written"
    assert f"core file: {out}" in report
    if shutil.which("gdb") is None:
        pytest.skip("gdb is not installed: no frames to check")
    assert "abort" in report.split("core file:")[1].split("--- stderr")[0]
