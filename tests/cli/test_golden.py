"""What the CLI prints, pinned as golden files over copies of recorded stores (a real H200 store
and the TUI's fixture store), through the real CLI: ``status -o json``, ``logs --rank`` (a rank the
run did not have, one that wrote nothing) and ``results`` in an 80-column terminal. Rerun with
``MLBENCH_UPDATE_GOLDEN=1`` after an intended change and review the diff."""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mlbench_tui.cli import build_parser

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
GOLDEN = FIXTURES / "cli"
SUITE = FIXTURES / "stores" / "h200-2026-11-27" / "suite"
TUI_STORE = FIXTURES / "tui" / "store.sqlite3"


def _mlbench(home: Path, *args: str, columns: int | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MLBENCH_HOME": str(home)}
    for variable in ("MLBENCH_SERVER_URL", "MLBENCH_DB", "COLUMNS"):
        env.pop(variable, None)
    if columns is not None:
        env["COLUMNS"] = str(columns)
    return subprocess.run(
        [sys.executable, "-m", "mlbench_tui", *args], env=env, capture_output=True, text=True, timeout=120
    )


def _golden(name: str, text: str) -> None:
    text = re.sub(
        r'"rules": "[0-9a-f]{12}"', '"rules": "<today\'s rules>"', text
    )  # any edit of results/ moves it
    path = GOLDEN / name
    if os.environ.get("MLBENCH_UPDATE_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text(), f"{name} drifted; rerun with MLBENCH_UPDATE_GOLDEN=1 and review"


@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("golden") / "suite"
    shutil.copytree(SUITE, home)
    for path in home.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    return home


def test_status_as_json(suite: Path) -> None:
    listed = _mlbench(suite, "status", "-o", "json", "-n", "3")
    assert listed.returncode == 0 and listed.stderr == "", listed.stderr
    _golden("status-n3.json", listed.stdout)
    one = _mlbench(suite, "status", "gpu-2a-fp32-nccl-1w", "-o", "json")
    assert one.returncode == 0 and '"ranks": [' in one.stdout and '"plan": {' in one.stdout


def test_logs_of_one_rank(suite: Path, tmp_path: Path) -> None:
    rank = _mlbench(suite, "logs", "gpu-2a-fp32-nccl-1w", "--rank", "0")
    assert rank.returncode == 0 and rank.stderr == ""
    _golden("logs-rank0.txt", rank.stdout)
    missing = _mlbench(suite, "logs", "gpu-2a-fp32-nccl-1w", "--rank", "3")  # a one-rank run's rank 3
    assert (missing.returncode, missing.stdout) == (2, "")
    _golden("logs-rank3.stderr", missing.stderr)
    home = tmp_path / "tui"
    home.mkdir()
    shutil.copyfile(TUI_STORE, home / "mlbench.db")
    silent = _mlbench(home, "logs", "tui-fixture-gloo-2w", "--rank", "1")  # only rank 0 logged
    assert (silent.returncode, silent.stdout) == (0, "")
    _golden("logs-silent-rank.stderr", silent.stderr)


def test_results_fit_a_narrow_terminal(suite: Path) -> None:
    narrow = _mlbench(suite, "results", columns=80)
    assert narrow.returncode == 0, narrow.stderr
    table = narrow.stdout.split("\n\n")[0]
    assert max(len(line) for line in table.splitlines() if not line.startswith(("(", "!"))) <= 80
    _golden("results-80.txt", narrow.stdout)
    wide = _mlbench(suite, "results", "--wide", columns=80)
    assert max(len(line) for line in wide.stdout.splitlines()) > 200  # every column
    piped = _mlbench(suite, "results")  # not a terminal, no COLUMNS: every column
    assert piped.stdout == wide.stdout


def test_every_command_shows_examples_and_exit_statuses() -> None:
    def commands(parser: argparse.ArgumentParser, prefix: str = "") -> dict[str, argparse.ArgumentParser]:
        found = {}
        for action in parser._actions:
            choices = action.choices if isinstance(action.choices, dict) else {}
            for name, sub in choices.items():
                found[prefix + name] = sub
                found.update(commands(sub, f"{prefix}{name} "))
        return found

    every = commands(build_parser())
    assert {"status", "results", "report", "explain", "docs", "cluster create"} <= set(every)
    for path, parser in every.items():
        text = parser.format_help()
        assert "\nexamples:\n  mlbench " in text, path
        assert "\nexit status:\n  0  " in text, path
    # -o is a format wherever it appears; a path to write is --out
    for path, parser in every.items():
        for action in parser._actions:
            if "-o" in action.option_strings:
                assert action.choices, f"mlbench {path}: -o must be a format"
