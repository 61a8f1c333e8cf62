"""Task 1b through ``mlbench apply``: two gloo ranks (torchrun) train ResNet-50 on tiny synthetic
images to the light goal, stop together, and the run's results and MLPerf log say what ran."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from mlbench_tui.cli import main

pytestmark = pytest.mark.slow

SPEC = """\
apiVersion: mlbench/v1
kind: Benchmark
metadata: {name: r50-light}
spec:
  task: 1b
  goal: light
  max_time: 5m
  workers: 2
  backend: gloo
  data:
    source: synthetic
    options: {train_samples: 64, val_samples: 32, image_size: 32, num_classes: 4}
  hyperparameters: {batch_size: 8, lr: 0.05, max_epochs: 6}
"""


def test_two_ranks_reach_the_light_goal_through_apply(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "r50.yaml"
    spec.write_text(SPEC)
    applied = subprocess.run(
        [sys.executable, "-m", "mlbench_tui", "apply", str(spec)],
        capture_output=True,
        text=True,
        timeout=240,
        env=os.environ,
    )
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert main(["results", "r50-light-gloo-2w", "-o", "json"]) == 0
    (summary,) = json.loads(capsys.readouterr().out)["runs"]
    assert summary["reached"] is True and summary["best_value"] >= 50.0
    assert summary["steps_to_goal"] % 4 == 0  # whole epochs of 64 / 2 ranks / batch 8 = 4 steps
    assert summary["time_split"]["compute"] > 0 and summary["time_split"]["communication"] > 0
    assert main(["logs", "r50-light-gloo-2w", "--grep", "ImageNet"]) == 0
    assert "synthetic, 4 classes, 32x32" in capsys.readouterr().out
    archive = tmp_path / "r50.zip"
    assert main(["export", "r50-light-gloo-2w", "--out", str(archive), "--check"]) == 0
    with zipfile.ZipFile(archive) as zf:
        official = json.loads(zf.read("official_result.json"))
        log = [
            json.loads(line.removeprefix(":::MLLOG ")) for line in zf.read("mllog.txt").decode().splitlines()
        ]
    values = {line["key"]: line["value"] for line in log}
    assert official["task"] == "1b" and official["reached"] is True
    assert values["submission_benchmark"] == "resnet50-imagenet" and values["submission_division"] == "open"
    # global batch 16: SGD; the synthetic sizes the ranks ran with, not ImageNet's
    assert values["opt_name"] == "sgd" and values["sgd_opt_base_learning_rate"] == 0.05
    assert (values["image_size"], values["num_classes"], values["global_batch_size"]) == (32, 4, 16)
    assert (values["train_samples"], values["eval_samples"]) == (64, 32)


def test_a_corrupt_jpeg_fails_the_run_with_its_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Real data through apply: local rank 0 indexes the directory, the loader process meets a file
    that is not a JPEG, and the run fails at once saying which file, never hanging."""
    from support.imagenet_files import write_layout

    root = tmp_path / "imagenet"
    write_layout(root, train=2, val=1)
    for image in (root / "train").rglob("*.JPEG"):
        image.write_bytes(b"\xff\xd8 truncated by a bad copy")
    spec = tmp_path / "r50-bad.yaml"
    spec.write_text(
        SPEC.replace("r50-light", "r50-bad")
        .replace("workers: 2", "workers: 1")
        .replace("source: synthetic", f"source: path\n    path: {root}")
        .replace(
            "{train_samples: 64, val_samples: 32, image_size: 32, num_classes: 4}", "{loader_workers: 1}"
        )
        .replace("batch_size: 8", "batch_size: 2")
    )
    applied = subprocess.run(
        [sys.executable, "-m", "mlbench_tui", "apply", str(spec)],
        capture_output=True,
        text=True,
        timeout=240,
        env=os.environ,
    )
    assert applied.returncode != 0
    assert main(["status", "r50-bad-gloo-1w"]) == 0
    status = capsys.readouterr().out
    assert "failed" in status and "DatasetError: train/n014" in status and "not a decodable image" in status
    assert (root / "mlbench-index" / "meta.json").is_file()  # indexed by the rank, before training
