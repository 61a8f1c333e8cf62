"""The GPU benchmarks: registered, polite on a machine without a GPU, and their specs valid."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import BENCHMARKS, gpu_suite
from mlbench_tui.plan import expand, worker_config
from mlbench_tui.spec.loader import load_paths
from mlbench_tui.spec.tasks import TASKS

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", ["gpu_step", "gpu_suite"])
def test_without_a_gpu_they_say_so_and_exit_0(name: str) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the benchmark would run")
    assert name in BENCHMARKS
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", name], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"{name}: nothing to {'measure' if name == 'gpu_step' else 'run'}: " + (
        f"no NVIDIA GPU is visible to torch {torch.__version__} (torch.cuda.is_available() is False)"
    )


def test_the_suite_covers_every_task_and_precision_with_specs_that_validate(tmp_path: Path) -> None:
    cases = gpu_suite.cases(list(gpu_suite.SMOKE))
    assert {c.task for c in cases} == set(TASKS)
    for task in TASKS.values():
        assert {c.precision for c in cases if c.task == task.id and not c.cuda_graphs} == set(task.precisions)
    graphed = {(c.task, c.precision) for c in cases if c.cuda_graphs}
    assert graphed == {
        ("1a", "fp32"),
        ("1a", "bf16"),
        ("2a", "fp32"),
        ("2a", "bf16"),
        ("3a", "fp32"),
        ("3a", "bf16"),
    }
    assert [c.precision for c in cases[: len(TASKS)]] == ["fp32"] * len(TASKS)  # fp32 of every task first
    for case in cases:
        path = tmp_path / f"{case.name}.yaml"
        path.write_text(gpu_suite.spec_text(case, workers=2, max_time_s=60))
        (loaded,) = load_paths([path])
        (plan,) = expand(loaded.spec)
        config = worker_config(plan, "r")
        assert (config["backend"], config["device"], config["world_size"]) == ("nccl", "cuda", 2)
        assert config["implementation"] == {"cuda_graphs": case.cuda_graphs, "host_allocator": "tuned"}
        assert config["precision"] == case.precision
