"""Golden tests: every bad spec under tests/fixtures/bad_specs gives exactly the expected messages.

Each ``NAME.yaml`` has a ``NAME.expected`` holding the rendered issues (``file:line:col: message
(hint: ...)``, file as its base name). Regenerate after an intended wording change with
``MLBENCH_UPDATE_GOLDEN=1 pytest tests/spec/test_bad_specs.py`` and review the diff.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mlbench_tui.errors import SpecError
from mlbench_tui.spec.loader import collect_paths, load_paths

BAD = Path(__file__).resolve().parents[1] / "fixtures" / "bad_specs"
CASES = sorted(BAD.glob("*.yaml"))


def _render(path: Path) -> str:
    _loaded, issues = collect_paths([path], environ={})
    return "".join(issue.render().replace(str(path), path.name) + "\n" for issue in issues)


def test_at_least_25_cases() -> None:
    assert len(CASES) >= 25


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_bad_spec_messages(path: Path) -> None:
    got = _render(path)
    expected_file = path.with_suffix(".expected")
    if os.environ.get("MLBENCH_UPDATE_GOLDEN"):
        expected_file.write_text(got, encoding="utf-8")
    assert got, f"{path.name} unexpectedly validated"
    assert got == expected_file.read_text(encoding="utf-8")


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_bad_spec_raises_spec_error_with_locations(path: Path) -> None:
    with pytest.raises(SpecError) as info:
        load_paths([path], environ={})
    assert info.value.exit_code == 2
    for issue in info.value.issues:
        assert issue.file == str(path)
        assert issue.line >= 1 and issue.col >= 1
        assert "Traceback" not in issue.message


def test_directory_reports_every_bad_file_at_once() -> None:
    _loaded, issues = collect_paths([BAD], environ={})
    files_with_issues = {Path(i.file).name for i in issues}
    assert files_with_issues == {p.name for p in CASES}
