"""Local runs of 1, 2 and 4 ranks started cold and warm, side by side.

The peer is the cold start every local run had before (fresh interpreters that import torch and
the task, through torchrun beyond one rank: ``MLBENCH_WARM_START=0``); ours forks every rank
from one process that imported them once (``mlbench_worker.launch.warm``), under a launcher forked there
too that plays torchrun's agent. For each world size both sides apply the same spec (``--runs``
repeats of a short task) in a throw-away ``MLBENCH_HOME`` each, alternately, and the medians of
``apply``'s wall time and of each run's startup (run created to its slowest rank's first step:
the launcher's part plus that rank's phases) are printed with the ratios. The first run of each
apply is shown apart: it pays for the server's imports, as a one-run ``apply`` (the quick start)
does. On a GPU machine, ``--gpu`` makes the runs nccl ranks, one GPU each.

    python -m benchmarks warm_start [--workers 1 2 4] [--runs 4] [--rounds 2] [--task 2a] [--gpu]
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
from dataclasses import dataclass, field
from pathlib import Path

SPEC = """\
apiVersion: mlbench/v1
kind: Benchmark
metadata:
  name: warm-bench
spec:
  task: {task}
  workers: {workers}
  backend: {backend}
  target: local
  repeats: {runs}
{body}"""
BODIES = {
    "0a": "  hyperparameters: {sizes_max_exp: 3, num_sizes: 4, repetitions: 5, warmup: 1}\n",
    "2a": "  data: {source: synthetic, options: {train_samples: 2048, val_samples: 256}}\n"
    "  goal: light\n  hyperparameters: {max_epochs: 10}\n",
}
SIDES = {False: "cold (MLBENCH_WARM_START=0)", True: "warm (forked)"}


@dataclass
class Side:
    """What one side measured at one world size."""

    walls: list[float] = field(default_factory=list)
    firsts: list[float] = field(default_factory=list)  # the first run of each apply
    rest: list[float] = field(default_factory=list)  # the runs after it
    phases: list[dict[str, float]] = field(default_factory=list)  # of the runs after the first


def apply_once(spec: Path, home: Path, warm: bool) -> tuple[float, list[float], list[dict[str, float]]]:
    """``mlbench apply`` of ``spec`` in ``home``: its wall time, each run's startup seconds and
    its slowest rank's phases, in the spec's order."""
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
        raise SystemExit(f"apply failed ({SIDES[warm]}):\n{done.stderr[-2000:]}")
    listed = subprocess.run(
        [sys.executable, "-m", "mlbench_tui", "results", str(spec), "-o", "json"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    startups, phases = [], []
    for run in json.loads(listed.stdout)["runs"]:  # in the spec's order: repeat 1 first
        startup = run.get("startup") or {}
        if startup.get("phases"):
            startups.append(sum(startup["phases"].values()) + (startup.get("launcher_s") or 0.0))
            phases.append({"launcher": startup.get("launcher_s") or 0.0, **startup["phases"]})
    return wall, startups, phases


def measure(args: argparse.Namespace, workers: int, tmp: Path) -> dict[bool, Side]:
    backend = "nccl" if args.gpu else "gloo"
    body = BODIES[args.task] + ("  hardware: {gpu: 1}\n" if args.gpu else "")
    spec = tmp / f"spec-{workers}.yaml"
    spec.write_text(SPEC.format(task=args.task, workers=workers, backend=backend, runs=args.runs, body=body))
    sides = {False: Side(), True: Side()}
    for round_ in range(args.rounds):
        for warm in (False, True):  # a fresh store each time: the results are that apply's runs
            home = tmp / f"home-{workers}-{round_}-{'warm' if warm else 'cold'}"
            wall, startups, phases = apply_once(spec, home, warm)
            side = sides[warm]
            side.walls.append(wall)
            side.firsts += startups[:1]
            side.rest += startups[1:]
            side.phases += phases[1:]
    return sides


def median_phases(phases: list[dict[str, float]]) -> str:
    names = sorted(
        {name for item in phases for name in item},
        key=lambda n: -statistics.median([item.get(n, 0.0) for item in phases]),
    )
    parts = [(name, statistics.median([item.get(name, 0.0) for item in phases])) for name in names]
    return ", ".join(f"{name} {seconds:.3f}" for name, seconds in parts if seconds >= 0.0005)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--workers", type=int, nargs="+", default=[1, 2, 4], help="world sizes (default 1 2 4)"
    )
    parser.add_argument("--runs", type=int, default=4, help="runs per apply (default 4)")
    parser.add_argument("--rounds", type=int, default=2, help="applies per side and world size (default 2)")
    parser.add_argument("--task", choices=sorted(BODIES), default="0a")
    parser.add_argument("--gpu", action="store_true", help="nccl ranks, one GPU each")
    args = parser.parse_args(argv)
    if args.runs < 2:
        parser.error("--runs must be at least 2 (the first run of each apply is shown apart)")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"{args.runs} {args.task} runs per apply ({'nccl' if args.gpu else 'gloo'}), {args.rounds} applies "
        f"per side, medians; startup = run created to its slowest rank's first step; "
        f"{os.cpu_count()} cores, load average {load:.1f} at the start"
    )
    header = f"  {'ranks':>5} {'side':<28} {'apply wall s':>12} {'first run s':>11} {'startup s':>10}"
    summary = []
    with tempfile.TemporaryDirectory(prefix="mlbench-warm-bench-") as tmp:
        for workers in args.workers:
            sides = measure(args, workers, Path(tmp))
            print(header)
            for warm, side in sides.items():
                print(
                    f"  {workers:>5} {SIDES[warm]:<28} {statistics.median(side.walls):>12.2f} "
                    f"{statistics.median(side.firsts):>11.3f} {statistics.median(side.rest):>10.3f}"
                )
            cold, warm_side = sides[False], sides[True]
            wall_ratio = statistics.median(cold.walls) / statistics.median(warm_side.walls)
            start_cold, start_warm = statistics.median(cold.rest), statistics.median(warm_side.rest)
            print(
                f"  {workers:>5} cold / warm: apply wall {wall_ratio:.2f}x, startup per run "
                f"{start_cold / start_warm:.1f}x ({start_cold - start_warm:.2f} s saved per run)"
            )
            for warm, side in sides.items():
                print(f"        {SIDES[warm]} phases (median s): {median_phases(side.phases)}")
            summary.append((workers, start_cold, start_warm))
    print(
        "  startup per run, cold -> warm: "
        + "; ".join(f"{w} rank(s) {c:.2f} -> {h:.2f} s" for w, c, h in summary)
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
