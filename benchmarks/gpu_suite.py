"""Every task on this machine's GPUs through ``mlbench apply``: one command that checks a GPU machine.

Each official task runs on synthetic data to its light goal, one rank per GPU (backend nccl),
once per precision the task allows, and once more with ``implementation: {cuda_graphs: true}``
where the task takes it (fp32 and bf16), in a throw-away ``MLBENCH_HOME``. Runs are applied one
at a time within a time budget (default 8 minutes; a run that would not fit is listed as not
run), and the table comes last: state, time to accuracy, median step time, the tracker's phase
sum over training wall time (how much of the step the phases account for), peak GPU memory and
CUDA-graph capture time. Exits 1 when a run failed; on a machine without an NVIDIA GPU it says so
and exits 0.

    python -m benchmarks gpu_suite [--budget 480] [--tasks 1a,3a] [--keep DIR]
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
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "workers")]

from benchmarks.gpu_step import no_gpu_message  # noqa: E402

MAX_RUN_S = 75  # max_time of one run: the light goals take seconds on a GPU
LAUNCH_S = 45  # what starting a run and reading its result may take beyond its max_time

# Synthetic data and hyperparameters that reach each light goal quickly (the tests' smoke specs).
SMOKE: dict[str, dict[str, Any]] = {
    "0a": {
        "hyperparameters": {"sizes_max_exp": 7, "num_sizes": 15, "repetitions": 20, "warmup": 3},
    },
    "1a": {
        "data": {"source": "synthetic", "options": {"train_samples": 4096, "val_samples": 512}},
        "hyperparameters": {"max_epochs": 20},
    },
    "2a": {
        "data": {"source": "synthetic", "options": {"train_samples": 8192, "val_samples": 1024}},
        "hyperparameters": {"max_epochs": 10},
    },
    "3a": {
        "data": {
            "source": "synthetic",
            "options": {"train_tokens": 20000, "val_tokens": 4000, "vocab_size": 200}
            | {"emb_size": 96, "hidden_size": 96, "num_layers": 3, "bptt": 15},
        },
        "hyperparameters": {"batch_size": 16, "max_epochs": 10},
    },
    "4a": {
        "data": {
            "source": "synthetic",
            "options": {"train_samples": 2400, "val_samples": 100, "vocab_words": 8, "min_len": 2}
            | {"max_len": 5, "hidden_size": 64, "num_layers": 2, "dropout": 0.0}
            | {"init_weight": 0.3, "embedding_init_std": 1.0},
        },
        "hyperparameters": {"global_batch_size": 64, "lr": 0.01, "warmup_steps": 10, "max_epochs": 6},
    },
    "4b": {
        "data": {
            "source": "synthetic",
            "options": {"train_samples": 2400, "val_samples": 100, "vocab_words": 8, "min_len": 2}
            | {"max_len": 5, "d_model": 64, "heads": 4, "ffn_dim": 128}
            | {"encoder_layers": 2, "decoder_layers": 2, "dropout": 0.0},
        },
        "hyperparameters": {"global_batch_tokens": 512, "lr": 0.005, "warmup_steps": 30, "max_epochs": 10},
    },
}
GRAPH_PRECISIONS = ("fp32", "bf16")


@dataclass
class Case:
    """One run of the suite and, once applied, what it measured."""

    task: str
    precision: str
    cuda_graphs: bool
    state: str = "not run"
    summary: dict[str, Any] = field(default_factory=dict)
    step_ms: float | None = None
    memory_gib: float | None = None

    @property
    def name(self) -> str:
        return f"gpu-{self.task}-{self.precision}" + ("-graphs" if self.cuda_graphs else "")


ORDER = ("fp32", "bf16", "fp16", "amp")


def cases(tasks: list[str]) -> list[Case]:
    """Every task x each precision it allows, plus CUDA graphs where the task takes them; fp32
    of every task first, then bf16 and so on, so a spent budget leaves out the least telling."""
    from mlbench_tui.spec.tasks import TASKS

    out: list[Case] = []
    for task_id in tasks:
        task = TASKS[task_id]
        out += [Case(task_id, precision, False) for precision in task.precisions]
        if task.no_cuda_graphs is None:
            out += [Case(task_id, p, True) for p in task.precisions if p in GRAPH_PRECISIONS]
    return sorted(out, key=lambda c: (ORDER.index(c.precision), c.cuda_graphs, tasks.index(c.task)))


def spec_text(case: Case, workers: int, max_time_s: int) -> str:
    from mlbench_tui.spec.tasks import TASKS

    body: dict[str, Any] = {
        "task": case.task,
        "workers": workers,
        "backend": "nccl",
        "max_time": f"{max_time_s}s",
        "hardware": {"gpu": 1, "precision": case.precision},
        "target": "local",
        **SMOKE[case.task],
    }
    if TASKS[case.task].goal is not None:
        body["goal"] = "light"
    if case.cuda_graphs:
        body["implementation"] = {"cuda_graphs": True}
    doc = {"apiVersion": "mlbench/v1", "kind": "Benchmark", "metadata": {"name": case.name}, "spec": body}
    return json.dumps(doc, indent=2)  # JSON is YAML


def _mlbench(home: Path, *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MLBENCH_HOME": str(home)}
    return subprocess.run(
        [sys.executable, "-m", "mlbench_tui", *args], capture_output=True, text=True, timeout=timeout, env=env
    )


def apply(case: Case, home: Path, workers: int, max_time_s: int) -> None:
    """Apply the case's spec and read back its summary and its metrics."""
    path = home / f"{case.name}.yaml"
    path.write_text(spec_text(case, workers, max_time_s))
    try:
        applied = _mlbench(home, "apply", str(path), timeout=max_time_s + LAUNCH_S)
    except subprocess.TimeoutExpired:
        case.state = "timed out"
        return
    if applied.returncode == 2:  # refused before anything ran
        case.state = "refused"
        print(applied.stderr.strip(), file=sys.stderr)
        return
    results = _mlbench(home, "results", str(path), "-o", "json", timeout=60)
    runs = json.loads(results.stdout or "{}").get("runs", [])
    if not runs:
        case.state = "no result"
        print(applied.stderr[-2000:], file=sys.stderr)
        return
    case.summary = dict(runs[0])
    case.state = str(case.summary.get("state") or "-")
    archive = home / f"{case.name}.zip"
    if _mlbench(home, "export", case.summary["name"], "-o", str(archive), timeout=60).returncode == 0:
        with zipfile.ZipFile(archive) as zf:
            metrics = json.loads(zf.read("metrics.json"))
        steps = [m["value"] for m in metrics if m["name"] == "step_time" and m["rank"] == 0]
        memory = [m["value"] for m in metrics if m["name"] == "gpu_memory_peak_gib"]
        case.step_ms = statistics.median(steps) * 1e3 if steps else None
        case.memory_gib = max(memory) if memory else None
    if case.state == "failed":
        print(_mlbench(home, "logs", case.summary["name"], timeout=60).stdout[-3000:], file=sys.stderr)


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def table(all_cases: list[Case], workers: int) -> str:
    import torch

    lines = [
        f"\nmlbench GPU suite on {workers} x {torch.cuda.get_device_name()}, one rank per GPU, nccl, "
        f"torch {torch.__version__}, synthetic data, light goals",
        f"  {'task':<5} {'precision':<9} {'graphs':<6} {'state':<10} {'TTA s':>7} {'step ms':>8} "
        f"{'phases/wall':>11} {'GPU GiB':>8} {'capture s':>9}",
    ]
    for case in all_cases:
        summary = case.summary
        split = summary.get("time_split") or {}
        phases = sum(split.get(k, 0.0) for k in ("compute", "communication", "preprocess", "metrics"))
        share = phases / split["train"] if split.get("train") else None
        lines.append(
            f"  {case.task:<5} {case.precision:<9} {'yes' if case.cuda_graphs else 'no':<6} {case.state:<10} "
            f"{_fmt(summary.get('time_to_accuracy_s'), '7.1f'):>7} {_fmt(case.step_ms, '8.2f'):>8} "
            f"{_fmt(share, '11.2f'):>11} {_fmt(case.memory_gib, '8.2f'):>8} "
            f"{_fmt(summary.get('graph_capture_s'), '9.1f'):>9}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--budget", type=float, default=480.0, help="seconds for all runs (default 8 min)")
    parser.add_argument("--tasks", default=",".join(SMOKE), help="comma-separated task ids")
    parser.add_argument("--keep", type=Path, help="keep the store, specs and exports in this directory")
    args = parser.parse_args(argv)
    reason = no_gpu_message()
    if reason is not None:
        print(f"gpu_suite: nothing to run: {reason}")
        return 0
    import torch

    workers = torch.cuda.device_count()
    todo = cases([t.strip() for t in args.tasks.split(",") if t.strip()])
    deadline = time.monotonic() + args.budget
    with tempfile.TemporaryDirectory(prefix="mlbench-gpu-suite-") as tmp:
        home = args.keep or Path(tmp)
        home.mkdir(parents=True, exist_ok=True)
        for case in todo:
            left = deadline - time.monotonic() - LAUNCH_S
            if left < 20:
                continue  # stays "not run": the budget is spent
            print(f"gpu_suite: {case.name} ...", file=sys.stderr, flush=True)
            apply(case, home, workers, int(min(MAX_RUN_S, left)))
    print(table(todo, workers))
    return 1 if any(case.state in ("failed", "timed out", "no result") for case in todo) else 0


if __name__ == "__main__":
    sys.exit(main())
