"""Smoke runs through the real CLI: ``mlbench apply`` a spec in a subprocess, then read its result."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any


def mlbench(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    """Run ``python -m mlbench_tui ARGS`` with this test's environment (its MLBENCH_HOME)."""
    return subprocess.run(
        [sys.executable, "-m", "mlbench_tui", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=os.environ,
    )


def apply_one(tmp_path: Path, spec: str, *, timeout: float = 240) -> dict[str, Any]:
    """Apply a one-run spec; assert it exited 0 (showing stderr and the run's logs if not) and
    return that run's entry of ``mlbench results -o json``."""
    path = tmp_path / "spec.yaml"
    path.write_text(spec)
    result = mlbench("apply", str(path), timeout=timeout)
    if result.returncode != 0:
        logs = _logs_of_spec(path)
        raise AssertionError(f"mlbench apply failed ({result.returncode}):\n{result.stderr}\n{logs}")
    (run,) = json.loads(mlbench("results", str(path), "-o", "json").stdout)["runs"]
    return dict(run)


def _logs_of_spec(path: Path) -> str:
    runs = json.loads(mlbench("results", str(path), "-o", "json").stdout or '{"runs": []}').get("runs", [])
    return "\n".join(mlbench("logs", str(run["name"])).stdout[-3000:] for run in runs)
