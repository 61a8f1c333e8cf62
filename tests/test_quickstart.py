"""The README's quick start: ``mlbench apply specs/quickstart.yaml`` reaches its goal and prints
the results table, and ``status``/``logs``/``results``/``export`` work on the run.

The spec is the committed one with a smaller synthetic dataset (same task, goal, workers, backend
and hyperparameters) so the test stays well under a minute on 2 shared cores.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from mlbench_tui.cli import main

pytestmark = pytest.mark.slow

QUICKSTART = Path(__file__).resolve().parents[1] / "specs" / "quickstart.yaml"


def test_quickstart_reaches_its_goal_through_the_cli(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = QUICKSTART.read_text()
    assert "train_samples: 2048" in text and "val_samples: 512" in text
    spec = tmp_path / "quickstart.yaml"
    spec.write_text(
        text.replace("train_samples: 2048", "train_samples: 1024").replace(
            "val_samples: 512", "val_samples: 256"
        )
    )

    result = subprocess.run(
        [sys.executable, "-m", "mlbench_tui", "apply", str(spec)],
        capture_output=True,
        text=True,
        timeout=240,
        env=os.environ,
    )
    assert result.returncode == 0, result.stderr
    took = r"(?:[\d.]+ s|\d+ m \d\d s)"  # the time to accuracy, however long a busy machine takes
    assert re.search(
        rf"quickstart-gloo-2w\s+succeeded\s+fp32\s+Prec@1 [\d.]+ \(goal >= 70.0\)\s+yes\s+{took}",
        result.stdout,
    ), result.stdout + result.stderr
    assert "epoch 1/" in result.stderr  # live progress

    assert main(["results", "quickstart-gloo-2w", "-o", "json"]) == 0
    (summary,) = json.loads(capsys.readouterr().out)["runs"]
    assert summary["reached"] is True and summary["best_value"] >= 70.0
    assert 0 < summary["time_to_accuracy_s"] < summary["wall_time_s"]
    assert (
        summary["validation_time_s"] > 0 and summary["epochs_to_goal"] >= 1 and summary["steps_to_goal"] >= 1
    )
    assert summary["time_split"]["compute"] > 0 and summary["time_split"]["communication"] > 0
    assert summary["fingerprint"]["torch"] and summary["fingerprint"]["threads_per_rank"] == 1

    assert main(["status", "quickstart-gloo-2w"]) == 0
    assert "state:    succeeded" in capsys.readouterr().out
    assert main(["logs", "quickstart-gloo-2w", "--grep", "goal reached"]) == 0
    assert "goal reached" in capsys.readouterr().out
    assert main(["export", "quickstart-gloo-2w", "--out", str(tmp_path / "qs.zip")]) == 0
    with zipfile.ZipFile(tmp_path / "qs.zip") as archive:
        official = json.loads(archive.read("official_result.json"))
        assert official["reached"] is True and official["task"] == "1a"
        assert "quickstart" in archive.read("spec.yaml").decode()
        assert any(
            '"key": "eval_accuracy"' in line for line in archive.read("mllog.txt").decode().splitlines()
        )
