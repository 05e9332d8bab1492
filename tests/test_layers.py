"""Data flows one way (docs/architecture.md): no module of isr imports from a
floor above its own. The floors are the import-linter contract in
pyproject.toml; this runs it with the suite (and so in CI)."""

from __future__ import annotations

from pathlib import Path

from importlinter.cli import lint_imports

ROOT = Path(__file__).resolve().parents[1]


def test_no_import_from_a_lower_floor_to_a_higher_one(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    code = lint_imports(str(ROOT / "pyproject.toml"), no_cache=True, no_logo=True)
    report = capsys.readouterr().out
    assert code == 0, report
    assert "1 kept, 0 broken" in report
