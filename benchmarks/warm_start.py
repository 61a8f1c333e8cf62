"""A sweep of one-rank local runs started cold and warm, side by side.

The peer is the cold start every one-rank local run had before (a fresh interpreter that
imports torch and the task: ``MLBENCH_WARM_START=0``); ours forks each rank from one process
that imported them once (``mlbench_worker.warm``). Both apply the same spec (``--runs`` repeats
of a short task, one rank) in a throw-away ``MLBENCH_HOME`` each, alternately, and the medians of
``apply``'s wall time and of each run's startup (run created to its rank's first step, the
first run of each apply left out: it pays for the server's imports) are printed with ratios.
On a GPU machine, ``--gpu`` makes the runs nccl ranks on one GPU.

    python -m benchmarks warm_start [--runs 6] [--rounds 2] [--task 2a] [--gpu]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SPEC = """\
apiVersion: mlbench/v1
kind: Benchmark
metadata:
  name: warm-bench
spec:
  task: {task}
  workers: 1
  backend: {backend}
  target: local
  repeats: {runs}
{body}"""
BODIES = {
    "0a": "  hyperparameters: {sizes_max_exp: 3, num_sizes: 4, repetitions: 5, warmup: 1}\n",
    "2a": "  data: {source: synthetic, options: {train_samples: 2048, val_samples: 256}}\n"
    "  goal: light\n  hyperparameters: {max_epochs: 10}\n",
}


def apply_once(spec: Path, home: Path, warm: bool) -> tuple[float, list[float]]:
    """``mlbench apply`` of ``spec`` in ``home``: its wall time and each run's startup seconds."""
    env = {**os.environ, "MLBENCH_HOME": str(home), "MLBENCH_WARM_START": "1" if warm else "0"}
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "mlbench_tui", "apply", "--force", "--quiet", str(spec)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"apply failed ({'warm' if warm else 'cold'}):\n{done.stderr[-2000:]}")
    listed = subprocess.run(
        [sys.executable, "-m", "mlbench_tui", "results", str(spec), "-o", "json"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    startups = []
    for run in json.loads(listed.stdout)["runs"]:  # in the spec's order: repeat 1 first
        startup = run.get("startup") or {}
        if startup.get("phases"):
            startups.append(sum(startup["phases"].values()) + (startup.get("launcher_s") or 0.0))
    return wall, startups


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=6, help="runs per apply (default 6)")
    parser.add_argument("--rounds", type=int, default=2, help="applies per side (default 2)")
    parser.add_argument("--task", choices=sorted(BODIES), default="0a")
    parser.add_argument("--gpu", action="store_true", help="nccl ranks on one GPU")
    args = parser.parse_args(argv)
    if args.runs < 2:
        parser.error("--runs must be at least 2 (the first run of each apply is left out)")
    backend = "nccl" if args.gpu else "gloo"
    body = BODIES[args.task] + ("  hardware: {gpu: 1}\n" if args.gpu else "")
    walls: dict[bool, list[float]] = {False: [], True: []}
    starts: dict[bool, list[float]] = {False: [], True: []}
    with tempfile.TemporaryDirectory(prefix="mlbench-warm-bench-") as tmp:
        spec = Path(tmp) / "spec.yaml"
        spec.write_text(SPEC.format(task=args.task, backend=backend, runs=args.runs, body=body))
        for round_ in range(args.rounds):
            for warm in (False, True):  # a fresh store each time: the results are that apply's runs
                home = Path(tmp) / f"home-{round_}-{'warm' if warm else 'cold'}"
                wall, startups = apply_once(spec, home, warm)
                walls[warm].append(wall)
                starts[warm] += startups[1:]
    cold_wall, warm_wall = statistics.median(walls[False]), statistics.median(walls[True])
    cold_start, warm_start = statistics.median(starts[False]), statistics.median(starts[True])
    print(
        f"{args.runs} one-rank {args.task} runs per apply ({backend}), {args.rounds} applies per side, "
        f"medians; startup = run created to its rank's first step, first run of each apply left out"
    )
    print(f"  {'side':<28} {'apply wall s':>12} {'startup s':>10}")
    print(f"  {'cold (MLBENCH_WARM_START=0)':<28} {cold_wall:>12.2f} {cold_start:>10.3f}")
    print(f"  {'warm (forked)':<28} {warm_wall:>12.2f} {warm_start:>10.3f}")
    print(
        f"  cold / warm: apply wall {cold_wall / warm_wall:.2f}x, startup per run "
        f"{cold_start / warm_start:.1f}x ({cold_start - warm_start:.2f} s saved per run)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
