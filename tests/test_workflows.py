"""GitHub workflows: actionlint (with shellcheck for run: scripts) and the kind smoke run's shape."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from mlbench_tui.clusters.providers import context_name

ROOT = Path(__file__).resolve().parents[1]
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
SMOKE = ROOT / ".github" / "workflows" / "kind-smoke.yml"


def _tool(name: str) -> str:
    """A linter from the dev extra (installed next to this Python), else from PATH."""
    local = Path(sys.executable).parent / name
    found = str(local) if local.exists() else shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is missing: install the dev extra (pip install -c constraints.txt -e '.[dev]')")
    return found


def _actionlint(*paths: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    return subprocess.run(
        [_tool("actionlint"), "-no-color", *map(str, paths)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env=env,
        check=False,
    )


def test_every_workflow_passes_actionlint() -> None:
    assert WORKFLOWS, "no workflows found"
    _tool("shellcheck")  # actionlint checks run: scripts only when shellcheck is on PATH
    result = _actionlint(*WORKFLOWS)
    assert result.returncode == 0, result.stdout + result.stderr


def test_actionlint_really_checks_scripts_and_expressions(tmp_path: Path) -> None:
    bad = tmp_path / ".github" / "workflows" / "bad.yml"
    bad.parent.mkdir(parents=True)
    bad.write_text(
        "on: push\njobs:\n  x:\n    runs-on: ubuntu-24.04\n    steps:\n"
        "      - run: echo $UNQUOTED ${{ github.nope }}\n"
    )
    result = _actionlint(bad)
    assert result.returncode != 0
    assert "SC2086" in result.stdout  # shellcheck ran
    assert "nope" in result.stdout  # expression typing ran


def _smoke() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(SMOKE.read_text())
    return data


def _runs() -> list[str]:
    return [step.get("run", "") for step in _smoke()["jobs"]["smoke"]["steps"]]


def test_smoke_workflow_builds_loads_and_runs_the_kind_spec() -> None:
    runs = "\n".join(_runs())
    assert 'docker build -f workers/Dockerfile --build-arg VARIANT=cpu -t "${MLBENCH_WORKER_IMAGE}" .' in runs
    assert 'mlbench cluster create kind "${CLUSTER}"' in runs
    assert "mlbench cluster init" in runs
    assert "mlbench apply specs/smoke-kind.yaml" in runs
    steps = [s.get("run", "") for s in _smoke()["jobs"]["smoke"]["steps"]]
    order = [
        next(i for i, s in enumerate(steps) if key in s)
        for key in ("docker build", "cluster create", "apply")
    ]
    assert order == sorted(order)


def test_smoke_workflow_fails_with_the_run_and_always_cleans_up() -> None:
    steps = _smoke()["jobs"]["smoke"]["steps"]
    apply = next(s for s in steps if "mlbench apply" in s.get("run", ""))
    assert "continue-on-error" not in apply and "|| true" not in apply["run"]  # a failed run fails the job
    delete = next(s for s in steps if "cluster delete" in s.get("run", ""))
    assert delete.get("if") == "always()"
    assert any(s.get("if") == "failure()" and "kubectl" in s.get("run", "") for s in steps)


def test_smoke_workflow_image_context_and_kind_version_are_consistent() -> None:
    env = _smoke()["env"]
    spec = yaml.safe_load((ROOT / "specs" / "smoke-kind.yaml").read_text())
    assert env["MLBENCH_WORKER_IMAGE"] == spec["spec"]["target"]["image"]
    assert env["CONTEXT"] == context_name("kind", env["CLUSTER"])
    assert env["KIND_VERSION"].startswith("v") and env["KIND_VERSION"].count(".") == 2  # pinned
    assert _smoke()["permissions"] == {"contents": "read"}
