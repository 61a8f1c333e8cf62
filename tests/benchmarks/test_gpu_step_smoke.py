"""``python -m benchmarks gpu_step --smoke``: every side's code on the CPU, graphs through the stand-in."""

from __future__ import annotations

import pytest

from benchmarks import gpu_step


def test_gpu_step_smoke_runs_every_side_in_both_precisions(capsys: pytest.CaptureFixture[str]) -> None:
    assert gpu_step.main(["--smoke"]) == 0
    out = capsys.readouterr().out
    for layout in ("fp32 NCHW", "bf16 channels_last"):
        for side in gpu_step.SIDES:
            assert f"{layout:<17} {side:<12}" in out
    assert "fp32: plain eager / ours eager" in out and "bf16: plain eager / ours eager" in out
