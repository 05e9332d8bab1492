"""The package ships py.typed, so users' type checkers read its annotations:
a wrong one misleads them. This runs mypy on isr with the suite (and so in
CI), with the settings in pyproject.toml ([tool.mypy]); docs/architecture.md
("Tests follow the packages") says how to run it alone."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from mypy import api

ROOT = Path(__file__).resolve().parents[1]
# Outside the repository, kept between runs (a warm run takes a second or two).
CACHE = Path(tempfile.gettempdir()) / f"isr-mypy-cache-{os.getuid() if hasattr(os, 'getuid') else 0}"


def test_the_package_type_checks_clean(monkeypatch):
    monkeypatch.chdir(ROOT)
    report, errors, status = api.run(["--config-file", str(ROOT / "pyproject.toml"),
                                      "--cache-dir", str(CACHE)])
    assert status == 0, report + errors
    assert report.startswith("Success: no issues found"), report
