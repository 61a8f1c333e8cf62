"""Efficiency where it means something: model FLOPs over the step time against the measured GEMM
peak (the run's own pre-flight probe first, else its machine's reference row), flagged as no
headline for a small model, and the step against the machine's one-graph floor."""

from __future__ import annotations

import pytest

from mlbench_tui.lifecycle import RunState
from mlbench_tui.results.flops import flop_figures, flops_text
from mlbench_tui.results.model import PreflightFigures, RunResult
from mlbench_tui.spec.reference_table import ReferenceRow, table

H200 = {"gpu_model": "NVIDIA H200", "cpu_model": "Intel(R) Xeon(R) Processor", "cpu_count": 16}


def resnet_run(step_ms: float, **fields: object) -> RunResult:
    base: dict[str, object] = {
        "name": "gpu-1a", "task": "1a", "backend": "nccl", "workers": 1, "state": RunState.SUCCEEDED,
        "precision": "fp32", "batch_size": 128, "fingerprint": H200, "step_time_s": step_ms / 1000,
    }  # fmt: skip
    return RunResult.model_validate(base | fields)


RESNET20_FLOPS = (
    0.244e9 * 128
)  # torch's counter over one b128 training step (tests/workers: 0.244 GFLOP/image)


def test_resnet20_on_an_h200_is_a_small_model_and_its_floor_says_more() -> None:
    probe = PreflightFigures(status="passed", gemm_tflops=52.0)  # an fp32 GEMM probe's rate
    run = resnet_run(9.74, preflight=probe)
    figures = flop_figures(run, RESNET20_FLOPS, "H200", table())
    assert figures is not None
    assert figures.achieved_tflops == pytest.approx(RESNET20_FLOPS / 9.74e-3 / 1e12)
    assert figures.peak_source == "this run's pre-flight GEMM probe" and figures.of_peak == pytest.approx(
        3.21 / 52.0, rel=1e-2
    )
    assert not figures.small_model  # 6% of an fp32 peak
    assert figures.floor_ms == 3.95 and figures.of_floor == pytest.approx(3.95 / 9.74)
    text = flops_text(figures)
    assert text.startswith(
        "31.2 GFLOP/step per rank, 3.21 TFLOP/s achieved, 6.2% of the 52.0 TFLOP/s GEMM peak"
    )
    assert text.endswith("one-graph floor 3.95 ms: this step runs at 0.41x its speed")


def test_against_a_reference_peak_and_flagged_below_two_percent() -> None:
    bf16_peak = ReferenceRow(
        "H200", "-", "bf16", "eager", 1, None, "gemm_tflops", 795.0, "published", "2026-11-27"
    )
    run = resnet_run(2.16, precision="bf16")
    figures = flop_figures(run, RESNET20_FLOPS, "H200", [*table(), bf16_peak])
    assert figures is not None and figures.small_model and figures.of_peak == pytest.approx(0.0182, rel=1e-2)
    assert figures.peak_source == "H200 reference (published)"
    assert "a small model: launches bound its step, not the GEMM rate" in flops_text(figures)
    assert figures.of_floor == pytest.approx(1.0)  # at the one-graph floor


def test_nothing_to_say_without_a_step_time_or_anything_to_set_it_against() -> None:
    assert flop_figures(resnet_run(9.74, step_time_s=None), RESNET20_FLOPS, "H200", table()) is None
    assert flop_figures(resnet_run(9.74, batch_size=64), None, "H200", table()) is None  # no floor for b64
    cpu = flop_figures(resnet_run(200.0), 1e9, "cpu: AMD EPYC x2", ())
    assert (
        cpu is not None
        and cpu.of_peak is None
        and flops_text(cpu) == "1.00 GFLOP/step per rank, 0.00500 TFLOP/s achieved"
    )
