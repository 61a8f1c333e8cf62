"""This machine's reference rows on CPU: the figures ``mlbench results`` judges runs against.

Applies one multi-document spec in a throw-away ``MLBENCH_HOME``, two gloo ranks each, every
configuration ``--repeats`` times (3 by default) with the pre-flight on: task 0a (a small sweep
from one element), task 1a at the quick start's settings (batch 64 per rank), task 1b on 32x32
synthetic images (batch 16 per rank: ResNet-50 at ImageNet's 224x224 takes seconds a step on a
CPU core) and task 2a (batch 128 per rank), on synthetic data to their light goals. Then prints
the rows of ``mlbench_tui/spec/reference.csv`` the succeeded runs give, ready to add: per figure (time to
accuracy, step time, 0a's smallest-size latency and peak bus bandwidth, the pre-flight's GEMM
rate and one-element all-reduce) the median of the repeats with their coefficient of variation
(``spread``, ``repeats``) and the widest within-run spread (``step_spread``), which is what the
verdicts' bands come from.

    python -m benchmarks cpu_suite [--repeats 3] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "workers")]

from mlbench_tui.results.model import RunResult  # noqa: E402
from mlbench_tui.results.reference import csv_text, machine_class, reference_rows  # noqa: E402

SPEC = """\
apiVersion: mlbench/v1
kind: Benchmark
metadata: {{name: cpu-0a}}
spec:
  task: 0a
  workers: 2
  backend: gloo
  data: synthetic
  hyperparameters: {{sizes_max_exp: 6, num_sizes: 7, repetitions: 50, warmup: 5, dtypes: [fp32]}}
  repeats: {repeats}
  preflight: on
---
apiVersion: mlbench/v1
kind: Benchmark
metadata: {{name: cpu-1a}}
spec:
  task: 1a
  goal: light
  max_time: 5m
  workers: 2
  backend: gloo
  hardware: {{cpu: "1"}}
  data: {{source: synthetic, options: {{train_samples: 2048, val_samples: 512}}}}
  hyperparameters: {{batch_size: 64}}
  repeats: {repeats}
  preflight: on
---
apiVersion: mlbench/v1
kind: Benchmark
metadata: {{name: cpu-1b}}
spec:
  task: 1b
  goal: light
  max_time: 10m
  workers: 2
  backend: gloo
  hardware: {{cpu: "1"}}
  data:
    source: synthetic
    options: {{train_samples: 256, val_samples: 64, image_size: 32, num_classes: 10}}
  hyperparameters: {{batch_size: 16, lr: 0.05}}
  repeats: {repeats}
  preflight: on
---
apiVersion: mlbench/v1
kind: Benchmark
metadata: {{name: cpu-2a}}
spec:
  task: 2a
  goal: light
  max_time: 5m
  workers: 2
  backend: gloo
  hardware: {{cpu: "1"}}
  data: {{source: synthetic, options: {{train_samples: 16384, val_samples: 1024}}}}
  repeats: {repeats}
  preflight: on
"""


def _mlbench(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MLBENCH_HOME": str(home)}
    return subprocess.run(
        [sys.executable, "-m", "mlbench_tui", *args], capture_output=True, text=True, env=env
    )


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks cpu_suite", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--keep", type=Path, help="keep the store in DIR instead of a temporary one")
    parser.add_argument("--repeats", type=int, default=3, help="runs per configuration (default 3)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="mlbench-cpu-suite-") as tmp:
        home = args.keep or Path(tmp)
        spec = home / "cpu-suite.yaml"
        home.mkdir(parents=True, exist_ok=True)
        spec.write_text(SPEC.format(repeats=max(1, args.repeats)))
        started = time.monotonic()
        applied = _mlbench(home, "apply", "-q", str(spec))
        print(applied.stdout, end="")
        listed = _mlbench(home, "results", str(spec), "-o", "json")
        if listed.returncode != 0:
            print(listed.stderr, file=sys.stderr)
            return 1
        results = [RunResult.model_validate(run) for run in json.loads(listed.stdout)["runs"]]
        print(f"\n{len(results)} runs in {time.monotonic() - started:.0f} s on {machine_class(results[0])}")
        today = datetime.now(UTC).date().isoformat()
        rows = reference_rows(results, source="cpu_suite", measured=today)
        print("\nreference rows (mlbench_tui/spec/reference.csv):\n" + csv_text(rows, header=False), end="")
        return 0 if applied.returncode == 0 and all(r.succeeded for r in results) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
