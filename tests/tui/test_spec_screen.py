"""The spec screen validates with line numbers, expands the plan, and asks before launching."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import DataTable

from mlbench_tui.server.serve import EmbeddedServer
from mlbench_tui.tui.app import MlbenchApp
from mlbench_tui.tui.screens.launch import LaunchScreen
from mlbench_tui.tui.screens.spec import SpecScreen

pytestmark = pytest.mark.anyio

FIXTURES = Path(__file__).parent.parent / "fixtures" / "tui"

BAD = """\
apiVersion: mlbench/v1
kind: Benchmark
metadata:
  name: broken
spec:
  task: resnet20-cifar10
  wokers: 2
  backend: gloo
  target: local
"""


async def _until(pilot: Any, predicate: Callable[[], Any], timeout: float = 120.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        if time.monotonic() > deadline:
            raise AssertionError("timed out")
        await pilot.pause(0.05)
        await asyncio.sleep(0.02)
    return value


async def test_spec_screen_issues_plan_and_launch_confirmation(
    empty_server: EmbeddedServer, tmp_path: Path
) -> None:
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "broken.yaml").write_text(BAD)
    shutil.copyfile(FIXTURES / "fixture-sweep.yaml", specs / "sweep.yaml")
    app = MlbenchApp(empty_server.url, token=empty_server.info.read_token, spec_path=specs / "broken.yaml")
    async with app.run_test(size=(150, 40)) as pilot:
        await pilot.press("S")
        screen = await _until(pilot, lambda: isinstance(app.screen, SpecScreen) and app.screen)
        report = await _until(pilot, lambda: screen.report)
        issues = screen.query_one("#issue-table", DataTable)
        assert issues.row_count == len(report.issues) >= 1
        line, col, message, hint = (str(c) for c in issues.get_row_at(0)[1:])
        assert (line, col) == ("7", "3")  # where 'wokers' is
        assert "wokers" in message and "workers" in hint
        await pilot.press("a")  # invalid: no launch, the issues tab stays
        assert isinstance(app.screen, SpecScreen)

        screen._load(specs / "sweep.yaml")
        report = await _until(
            pilot, lambda: screen.report and screen.report.path.name == "sweep.yaml" and screen.report
        )
        assert not report.issues
        plans = screen.query_one("#plan-table", DataTable)
        assert [str(plans.get_row_at(i)[0]) for i in range(plans.row_count)] == [
            "tui-fixture-gloo-1w",
            "tui-fixture-gloo-2w",
        ]
        found = await _until(pilot, lambda: screen.preview)  # what apply would do, from the store
        assert found.outcome == "start" and found.starts == ("tui-fixture-gloo-1w", "tui-fixture-gloo-2w")
        assert [str(plans.get_row_at(i)[1]) for i in range(plans.row_count)] == ["start", "start"]
        await pilot.press("a")
        assert isinstance(app.screen, LaunchScreen)
        await pilot.press("n")
        assert isinstance(app.screen, SpecScreen)


def test_cli_rejects_bad_arguments_without_traceback(tmp_path: Path) -> None:
    for args, expected in (
        (["--server", "localhost:8765"], "--server must be an http(s) URL"),
        (["--server", "http://127.0.0.1:1", "--db", str(tmp_path / "x.db")], "exclude each other"),
        (["--specs", str(tmp_path / "missing")], "does not exist"),
    ):
        out = subprocess.run(
            [sys.executable, "-m", "mlbench_tui", "tui", *args], capture_output=True, text=True, timeout=60
        )
        assert out.returncode == 2, out
        assert expected in out.stderr and "Traceback" not in out.stderr
