"""The straggler rule on real gloo ranks: ``MLBENCH_INJECT_FAULT="rank=R,mode=slow,factor=F"``
slows one rank's compute, and ``mlbench status`` names that rank as the one the others waited
for, at two ranks (where a median-based rule named nobody) and at eight."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from support.smoke import apply_one, mlbench

pytestmark = pytest.mark.slow

SPEC = """\
apiVersion: mlbench/v1
kind: Benchmark
metadata: {{name: {name}}}
spec:
  task: 1a
  goal: light
  workers: {workers}
  backend: gloo
  data:
    source: synthetic
    options: {{train_samples: {samples}, val_samples: 64}}
  hyperparameters: {{batch_size: 16, max_epochs: 1, timing_warmup_steps: 1}}
  env: {{MLBENCH_INJECT_FAULT: "rank={slow},mode=slow,factor=4"}}
"""
"""ResNet-20 on small batches for one epoch: a step is mostly compute, so a rank whose compute
takes four times as long stands out however unevenly a busy machine shares its cores (logistic
regression's compute is a fraction of its step, and the sharing decided which rank was busiest)."""


def _rank_lines(run: str) -> dict[int, str]:
    status = mlbench("status", run)
    assert status.returncode == 0, status.stderr
    return {int(m[1]): m[0] for m in re.finditer(r"(?m)^ +(\d+)  succeeded .*$", status.stdout)}


def test_two_ranks_name_the_slowed_one(tmp_path: Path) -> None:
    run = apply_one(tmp_path, SPEC.format(name="slow2", workers=2, samples=2 * 16 * 8, slow=1))
    assert run["state"] == "succeeded"
    lines = _rank_lines("slow2-gloo-2w")
    assert sorted(lines) == [0, 1]
    assert "straggler" in lines[1] and "straggler" not in lines[0], lines


def test_eight_ranks_name_the_slowed_one_first(tmp_path: Path) -> None:
    """Eight ranks share this machine's cores unevenly, so another rank may pass the line too on
    a busy machine; the slowed one is always named, and its busy time is the largest."""
    run = apply_one(tmp_path, SPEC.format(name="slow8", workers=8, samples=8 * 16 * 6, slow=5), timeout=400)
    assert run["state"] == "succeeded"
    lines = _rank_lines("slow8-gloo-8w")
    assert sorted(lines) == list(range(8))
    assert "straggler" in lines[5], lines
    busy = {rank: float(re.findall(r"busy ([\d.]+) ms", line)[0]) for rank, line in lines.items()}
    assert max(busy, key=busy.__getitem__) == 5, busy
