"""Limits met before the costly step they guard: the size cap before reading, nesting and node
counts while composing, the issue count per file; and the store takes what validate accepts."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from pydantic import ValidationError

from mlbench_tui.plan import expand
from mlbench_tui.spec.limits import (
    MAX_ISSUES,
    MAX_SPEC_BYTES,
    MAX_TELEMETRY_INTERVAL_S,
    MAX_YAML_NODES,
    MIN_TELEMETRY_INTERVAL_S,
)
from mlbench_tui.spec.loader import collect_paths, collect_text
from mlbench_tui.store.api_models import EventIn, RunCreate

HEADER = "apiVersion: mlbench/v1\nkind: Benchmark\nmetadata:\n  name: big\nspec:\n  task: 0a\n"


def _padded(size: int) -> str:
    """A valid spec of exactly ``size`` bytes, filled with a comment line."""
    pad = size - len(HEADER) - 3
    return HEADER + "# " + "x" * pad + "\n"


def test_a_file_over_the_cap_is_refused_from_its_size_without_being_read(tmp_path: Path) -> None:
    huge = tmp_path / "huge.yaml"
    with huge.open("wb") as f:  # sparse: 64 GiB that reading would never get through
        f.truncate(64 * 2**30)
    loaded, issues = collect_paths([huge])
    assert loaded == []
    assert [(i.line, i.col) for i in issues] == [(1, 1)]
    assert f"larger than {MAX_SPEC_BYTES // 1024} KiB" in issues[0].message


def test_stdin_is_read_up_to_the_cap_only() -> None:
    endless = subprocess.Popen(["yes", "# comment"], stdout=subprocess.PIPE)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "mlbench_tui", "validate", "-"],
            stdin=endless.stdout,
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        endless.kill()
        endless.wait()
    assert done.returncode == 2
    assert "<stdin>:1:1: spec is larger than" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_spec_at_the_cap_validates_and_the_store_takes_its_text(tmp_path: Path) -> None:
    at_cap = tmp_path / "at-cap.yaml"
    at_cap.write_text(_padded(MAX_SPEC_BYTES), encoding="utf-8")
    assert at_cap.stat().st_size == MAX_SPEC_BYTES
    [loaded], issues = collect_paths([at_cap])
    assert issues == []
    RunCreate.from_plan(expand(loaded.spec)[0], loaded.text)

    over = tmp_path / "over.yaml"
    over.write_text(_padded(MAX_SPEC_BYTES + 1), encoding="utf-8")
    assert "larger than" in collect_paths([over])[1][0].message
    with pytest.raises(ValidationError):
        RunCreate(name="x", spec_text="x" * (MAX_SPEC_BYTES + 1))


def test_text_handed_over_directly_is_capped_too() -> None:
    _loaded, issues = collect_text(_padded(MAX_SPEC_BYTES + 1), "tui.yaml")
    assert [(i.file, i.line, i.col) for i in issues] == [("tui.yaml", 1, 1)]


def test_too_many_values_are_refused_at_the_first_one_over() -> None:
    items = ", ".join(["1"] * (MAX_YAML_NODES + 10))
    _loaded, [issue] = collect_text(HEADER + f"  workers: [{items}]\n", "many.yaml")
    assert issue.line == 7
    assert issue.message == f"more than {MAX_YAML_NODES} YAML values in one file"


def test_an_alias_bomb_stops_at_the_node_limit() -> None:
    bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
    for level in "bcdefgh":
        prev = chr(ord(level) - 1)
        bomb += f"{level}: &{level} [*{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}]\n"
    _loaded, [issue] = collect_text(bomb, "bomb.yaml")
    assert "too large or too deeply nested" in issue.message


def test_issues_past_the_cap_are_summed_up_in_one_line() -> None:
    unknown = "".join(f"  x{i}: 1\n" for i in range(MAX_ISSUES * 2))
    _loaded, issues = collect_text(HEADER + unknown, "keys.yaml")
    assert len(issues) == MAX_ISSUES
    assert issues[-1].message == f"... and {MAX_ISSUES + 1} more problem(s)"


@pytest.mark.parametrize(
    "build",
    [
        lambda: RunCreate(name="bench\n"),
        lambda: RunCreate(name="a\x07b"),
        lambda: EventIn(kind="started\n"),
    ],
    ids=["run-name-newline", "run-name-bell", "event-kind-newline"],
)
def test_the_api_models_match_whole_values(build: Callable[[], object]) -> None:
    with pytest.raises(ValidationError):
        build()


def test_the_worker_takes_every_telemetry_interval_the_spec_takes() -> None:
    from mlbench_worker import config as worker_config

    assert (worker_config.MIN_TELEMETRY_INTERVAL_S, worker_config.MAX_TELEMETRY_INTERVAL_S) == (
        MIN_TELEMETRY_INTERVAL_S,
        MAX_TELEMETRY_INTERVAL_S,
    )
