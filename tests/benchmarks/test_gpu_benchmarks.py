"""The GPU benchmarks: registered, polite on a machine without a GPU, and their specs valid."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import BENCHMARKS, gpu_suite, graph_losses
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
        precisions = set(gpu_suite.SUITE_PRECISIONS.get(task.id, task.precisions))
        assert {c.precision for c in cases if c.task == task.id and not c.cuda_graphs} == precisions
    assert gpu_suite.SUITE_PRECISIONS == {"1b": ("fp32", "bf16")}  # ResNet-50's long steps: two of four
    graphed = {(c.task, c.precision) for c in cases if c.cuda_graphs}
    assert graphed == {
        ("1a", "fp32"),
        ("1a", "bf16"),
        ("1b", "fp32"),
        ("1b", "bf16"),
        ("2a", "fp32"),
        ("2a", "bf16"),
        ("3a", "fp32"),
        ("3a", "bf16"),
    }
    assert [c.precision for c in cases[: len(TASKS)]] == ["fp32"] * len(TASKS)  # fp32 of every task first
    for case in cases:
        path = tmp_path / f"{case.name}.yaml"
        path.write_text(gpu_suite.spec_document(case, workers=2, max_time_s=60))
        (loaded,) = load_paths([path])
        (plan,) = expand(loaded.spec)
        config = worker_config(plan, "r")
        assert (config["backend"], config["device"], config["world_size"]) == ("nccl", "cuda", 2)
        assert config["implementation"] == {"cuda_graphs": case.cuda_graphs, "host_allocator": "tuned"}
        assert config["precision"] == case.precision


def test_one_spec_file_holds_every_case_as_its_own_document(tmp_path: Path) -> None:
    cases = gpu_suite.cases(list(gpu_suite.SMOKE))
    path = tmp_path / "suite.yaml"
    path.write_text(gpu_suite.spec_file(cases, workers=1, max_time_s=60))
    loaded = load_paths([path])
    assert [spec.spec.metadata.name for spec in loaded] == [c.name for c in cases]


@pytest.mark.timeout(900)  # three tasks applied and graph-checked in a subprocess (its own limit: 600 s)
def test_the_cpu_twin_applies_once_fills_every_column_and_checks_graph_losses(tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks",
            "gpu_suite",
            "--device",
            "cpu",
            "--smoke",
            "--keep",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    rows = {line.split()[0]: line.split() for line in proc.stdout.splitlines() if line.startswith("  0a ")}
    rows |= {
        line.split()[0]: line.split()
        for line in proc.stdout.splitlines()
        if line.startswith("  2a    fp32      no")
    }
    # task precision graphs state TTA step phases/wall mem capture startup
    assert rows["0a"][3:] == ["succeeded", "n/a", "n/a", "n/a", rows["0a"][7], "n/a", rows["0a"][9]]
    assert float(rows["0a"][7]) > 0  # peak memory of the rank
    state, tta, step_ms, share, memory, capture, startup = rows["2a"][3:]
    assert state == "succeeded" and capture == "n/a"
    assert float(startup) > 0 and float(rows["0a"][9]) > 0  # run created to the first step's end
    assert "startup per case (median of 3)" in proc.stdout  # and where those seconds went
    assert float(tta) >= 0 and float(step_ms) > 0 and float(memory) > 0  # TTA: 0.1 s here, 0.0 on a fast one
    assert 0.3 < float(share) <= 1.05  # the phases account for most of the training time
    check = next(line for line in proc.stdout.splitlines() if line.startswith("  2a    fp32          "))
    assert check.split()[-1] == "ok"
    # task 1b's CPU twin: tiny ResNet-50 images to the light goal, and LARS replayed like eager
    assert (
        next(line for line in proc.stdout.splitlines() if line.startswith("  1b ")).split()[3] == "succeeded"
    )
    check = next(line for line in proc.stdout.splitlines() if line.startswith("  1b    fp32          "))
    assert check.split()[-1] == "ok"
    # one spec file, one store: every case is a document of it
    assert (tmp_path / "gpu-suite.yaml").read_text().count("apiVersion") == 3


def test_a_graph_loss_outside_the_tolerance_is_a_mismatch() -> None:
    close = graph_losses.LossCheck("1a", "fp32", [2.0, 1.5], [2.0, 1.5 * (1 + 5e-6)])
    assert close.ok and close.max_rel_diff == pytest.approx(5e-6)
    apart = graph_losses.LossCheck("1a", "fp32", [2.0, 1.5], [2.0, 1.5 * (1 + 2e-5)])
    assert not apart.ok
    assert graph_losses.LossCheck("1a", "bf16", [2.0], [2.0 * (1 + 1e-2)]).ok  # the bf16 tolerance
    assert not graph_losses.LossCheck("3a", "fp32", [], [], error="RuntimeError: boom").ok
    short = graph_losses.LossCheck("3a", "fp32", [1.0, 1.0], [1.0])  # graph mode stopped early
    assert not short.ok


def test_graph_mode_and_eager_give_the_same_losses_on_cpu() -> None:
    import torch

    for task in ("2a", "3a"):
        check = graph_losses.check(task, "fp32", torch.device("cpu"), steps=12)
        assert check.error is None and len(check.graphs) == 12
        assert check.ok, (check.eager, check.graphs)


@pytest.mark.gpu
def test_cuda_graphs_give_eager_losses_on_the_gpu() -> None:
    import torch

    for task in ("1a", "1b", "2a", "3a"):
        check = graph_losses.check(task, "fp32", torch.device("cuda"), steps=50)
        assert check.ok, (task, check.error, check.max_rel_diff)
