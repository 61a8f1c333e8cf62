"""``python -m benchmarks gpu_check``: polite without a GPU, every part's code on CPU with
``--smoke``, an overrunning part stopped and named, one summary on stdout and in a file."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import BENCHMARKS, gpu_check

ROOT = Path(__file__).resolve().parents[2]


def _no_cuda() -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: gpu_check would run for real")


def test_without_a_gpu_it_says_so_and_exits_0(tmp_path: Path) -> None:
    _no_cuda()
    assert "gpu_check" in BENCHMARKS
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", "gpu_check", "--out", str(tmp_path / "s.txt")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("gpu_check: nothing to check: no NVIDIA GPU is visible to torch")
    assert not (tmp_path / "s.txt").exists()


def test_a_part_that_overruns_its_share_is_stopped_and_named() -> None:
    part = gpu_check.Part("gpu_step", ["-c", "import time; time.sleep(600)"])  # never ends by itself
    gpu_check.run_part(part, timeout_s=2)
    assert part.status == "STOPPED: overran its 2 s" and not part.ok
    failing = gpu_check.Part("gpu_suite", ["-c", "print('last words'); raise SystemExit(3)"])
    gpu_check.run_part(failing, timeout_s=600)
    assert failing.status == "FAILED (exit 3)" and failing.tail == ("last words",)
    text = gpu_check.summary([part, failing], None, budget=100, took=5)
    assert "GPU check: FAILED: gpu_step, gpu_suite (5 s of a 100 s budget)" in text
    assert "(gpu_suite wrote no figures)" in text


@pytest.mark.timeout(1500)  # every part in a subprocess (its own limit: 1200 s)
def test_smoke_runs_every_part_on_cpu_and_writes_one_summary(tmp_path: Path) -> None:
    _no_cuda()
    out = tmp_path / "summary.txt"
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", "gpu_check", "--smoke", "--budget", "900", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=1200,
        cwd=ROOT,
    )
    summary = out.read_text()
    assert proc.stdout.rstrip().endswith(f"gpu_check: summary written to {out.resolve()}")
    assert summary.strip() in proc.stdout
    rows = {line.split()[0]: line for line in summary.splitlines() if line.startswith("  gpu")}
    assert set(rows) == {"gpu_step", "gpu", "gpu_suite"}  # "gpu tests"
    assert all(" passed " in row for row in rows.values()), summary
    assert proc.returncode == 0, summary
    assert summary.startswith("GPU check: passed")
    # the reference row: gpu_suite's CPU twin measured 2a's step and 0a's latencies
    rows = [line.strip() for line in summary.splitlines() if line.startswith("    cpu: ")]
    assert any(",2a,fp32,eager,1,128,step_time_ms," in row and ",gpu_suite," in row for row in rows), summary
    assert any(",0a,fp32,eager,1,,allreduce_latency_min_size_us," in row for row in rows), summary
    assert any(line.split()[:2] == ["fp32", "1"] for line in summary.splitlines()[-12:])
    assert "graph mode vs eager losses (max relative difference): 1b fp32 ok (0.0e+00), 2a fp32 ok" in summary
    assert "last lines of gpu_step 1b:" in summary and "ResNet-50 v1.5 (task 1b) training step" in summary


def test_when_forked_ranks_fail_on_the_gpu_the_suite_starts_its_ranks_cold() -> None:
    """A failure of the gpu test of warm starts sends gpu_suite cold (the rest of the check still
    measures the machine) and the summary says so; any other failure leaves the suite warm."""
    warm_tests = (ROOT / "tests" / "executors" / "local" / "test_warm_start.py").read_text()
    assert f"@pytest.mark.gpu\ndef {gpu_check.WARM_GPU_TEST}(" in warm_tests  # the name it looks for
    tests = gpu_check.Part("gpu tests", ["-c", "pass"])
    tests.output = (
        "FAILED tests/executors/local/test_warm_start.py::test_forked_ranks_use_cuda_and_nccl - x",
    )
    assert gpu_check.forked_ranks_failed(tests)
    other = gpu_check.Part("gpu tests", ["-c", "pass"])
    other.output = ("FAILED tests/workers/test_sampler.py::test_gpu_series_from_nvml_and_torch - x",)
    assert not gpu_check.forked_ranks_failed(other)
    suite = gpu_check.Part("gpu_suite", ["-c", "import os; print(os.environ['MLBENCH_WARM_START'])"])
    suite.env = {"MLBENCH_WARM_START": "0"}
    gpu_check.run_part(suite, timeout_s=600)
    assert suite.ok and suite.tail == ("0",)
    step = gpu_check.Part("gpu_step", ["-c", "pass"])
    text = gpu_check.summary([step, tests, suite], None, budget=100, took=5)
    assert "gpu_suite started its ranks cold: forked ranks failed in the gpu tests" in text
