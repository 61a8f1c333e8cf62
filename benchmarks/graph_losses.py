"""Graph mode against eager: the same trainer from the same seed, step for step, in one process.

For each task that accepts ``cuda_graphs`` (1a, 1b, 2a, 3a) and each precision graphs are run in,
two trainers are built from the same seed and config (dropout off: graphs draw random numbers
from other offsets than eager), one stepped eagerly and one through ``GraphedStep``, on the same
batches; their per-step losses must agree within a relative tolerance: 1e-5 in fp32, 2e-2 in
bf16 and fp16 (reduced precision rounds each op; two orders of kernels may round differently).
On a GPU the graphs are CUDA graphs, and both sides run cuDNN's deterministic algorithms (its
default fp32 convolution backward may accumulate with atomics: the check would measure that, not
the graphs). On CPU ``mlbench_worker.devices.replay_capture.ReplayCapture`` replays the ops each phase
recorded on the captured tensors, so a stale input or a state not carried fails there too.

    python -m benchmarks graph_losses [--device cpu] [--steps 50] [--tasks 1a,1b,2a,3a]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "workers")]

TOLERANCE = {"fp32": 1e-5, "bf16": 2e-2, "fp16": 2e-2}
NO_DROPOUT = {"dropout": 0.0, "dropouth": 0.0, "dropouti": 0.0, "dropoute": 0.0, "wdrop": 0.0}

# Small synthetic data per task, large enough for 50 steps (and a short last batch on 1a and 3a).
SETTINGS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {  # task -> (data, hyperparameters)
    "1a": (
        {"source": "synthetic", "options": {"train_samples": 1000, "val_samples": 16}},
        {"batch_size": 32},
    ),
    "1b": (  # LARS, whose learning rate warms up every step, on small images
        {"source": "synthetic"}
        | {"options": {"train_samples": 64, "val_samples": 8, "image_size": 32, "num_classes": 10}},
        {"batch_size": 8, "opt_name": "lars", "lr": 1.0, "warmup_epochs": 2.0},
    ),
    "2a": (
        {"source": "synthetic", "options": {"train_samples": 2000, "val_samples": 16}},
        {"batch_size": 64},
    ),
    "3a": (
        {
            "source": "synthetic",
            "options": {"train_tokens": 6000, "val_tokens": 200, "vocab_size": 60, "emb_size": 16}
            | {"hidden_size": 24, "num_layers": 2, "bptt": 10},
        },
        {"batch_size": 8, **NO_DROPOUT},
    ),
}
SMOKE_STEPS = 6


@dataclass
class LossCheck:
    """One task and precision: the two loss sequences and how far apart they are."""

    task: str
    precision: str
    eager: list[float]
    graphs: list[float]
    error: str | None = None

    @property
    def tolerance(self) -> float:
        return TOLERANCE[self.precision]

    @property
    def max_rel_diff(self) -> float | None:
        if not self.eager or len(self.eager) != len(self.graphs):
            return None
        return max(abs(g - e) / max(abs(e), 1e-12) for e, g in zip(self.eager, self.graphs, strict=True))

    @property
    def first_over(self) -> int | None:
        """The first step (1-based) whose losses differ by more than the tolerance."""
        for i, (e, g) in enumerate(zip(self.eager, self.graphs, strict=False), start=1):
            if abs(g - e) / max(abs(e), 1e-12) > self.tolerance:
                return i
        return None

    @property
    def ok(self) -> bool:
        diff = self.max_rel_diff
        return self.error is None and diff is not None and diff <= self.tolerance


def _trainer(task: str, precision: str, device: Any, seed: int) -> Any:
    import torch
    from mlbench_worker.comm import SingleComm
    from mlbench_worker.config import parse_config
    from mlbench_worker.context import RunContext
    from mlbench_worker.launch.rendezvous import Rendezvous
    from mlbench_worker.reporting.reporter import Reporter
    from mlbench_worker.tasks.awd_lstm import AWDLSTMTrainer
    from mlbench_worker.tasks.logreg import LogRegTrainer
    from mlbench_worker.tasks.resnet20 import ResNet20Trainer
    from mlbench_worker.tasks.resnet50 import ResNet50Trainer

    backend = "nccl" if device.type == "cuda" else "gloo"
    data, hp = SETTINGS[task]
    config = parse_config(
        {
            "run_id": "graph-losses",
            "task": task,
            "backend": backend,
            "world_size": 1,
            "seed": seed,
            "device": device.type,
            "precision": precision,
            "data": data,
            "hyperparameters": hp,
        }
    )
    reporter = Reporter(None, "graph-losses", "", 0)  # no server: nothing the steps report is kept
    ctx = RunContext(config, Rendezvous(0, 1, 0, None, None, "single"), SingleComm(backend), device, reporter)
    torch.manual_seed(seed)
    trainer_class = {
        "1a": ResNet20Trainer,
        "1b": ResNet50Trainer,
        "2a": LogRegTrainer,
        "3a": AWDLSTMTrainer,
    }[task]
    trainer = trainer_class(ctx)
    trainer.model.train()
    return trainer


def _losses(trainer: Any, steps: int, step_fn: Callable[[Any, Any], Any]) -> list[float]:
    losses: list[float] = []
    epoch = 0
    while len(losses) < steps:
        epoch += 1
        for batch in trainer.train_batches(epoch):
            trainer.before_step(len(losses))
            losses.append(float(step_fn(batch, None).loss))
            if len(losses) == steps:
                break
    return losses


def check(task: str, precision: str, device: Any, steps: int, seed: int = 7) -> LossCheck:
    """Eager and graphed losses of ``task`` in ``precision`` over its first ``steps`` steps."""
    import torch
    from mlbench_worker.devices.graphs import CudaCapture, GraphedStep
    from mlbench_worker.devices.replay_capture import ReplayCapture

    deterministic = torch.backends.cudnn.deterministic
    torch.backends.cudnn.deterministic = True  # the same kernels, the same sums, on both sides
    try:
        eager = _trainer(task, precision, device, seed)
        eager_losses = _losses(eager, steps, eager.train_step)
        del eager
        graphed = _trainer(task, precision, device, seed)
        capture = CudaCapture(device) if device.type == "cuda" else ReplayCapture()
        runner = GraphedStep(graphed, capture)
        return LossCheck(task, precision, eager_losses, _losses(graphed, steps, runner.train_step))
    except Exception as exc:  # a crash is this check's verdict, not the caller's traceback
        return LossCheck(task, precision, [], [], error=f"{type(exc).__name__}: {exc}")
    finally:
        torch.backends.cudnn.deterministic = deterministic


def graphed_cases(tasks: Sequence[str], precisions: Sequence[str]) -> list[tuple[str, str]]:
    """(task, precision) for every task among ``tasks`` that accepts graphs, in each precision
    among ``precisions`` that the task allows."""
    from mlbench_tui.spec.tasks import TASKS

    return [
        (task, precision)
        for precision in precisions
        for task in tasks
        if task in SETTINGS and TASKS[task].no_cuda_graphs is None and precision in TASKS[task].precisions
    ]


def table(checks: Sequence[LossCheck], steps: int) -> str:
    lines = [
        f"\ngraph mode vs eager, same seed, first {steps} steps' losses",
        f"  {'task':<5} {'precision':<9} {'steps':>5} {'max rel diff':>12} {'tolerance':>9}  verdict",
    ]
    for c in checks:
        diff = c.max_rel_diff
        first = c.first_over
        verdict = "ok" if c.ok else (c.error or (f"MISMATCH from step {first}" if first else "MISMATCH"))
        lines.append(
            f"  {c.task:<5} {c.precision:<9} {len(c.graphs):>5} "
            f"{'-' if diff is None else format(diff, '.2e'):>12} {c.tolerance:>9.0e}  {verdict}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--tasks", default=",".join(SETTINGS))
    args = parser.parse_args(argv)
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print("graph_losses: nothing to check: no NVIDIA GPU is visible (use --device cpu)")
        return 0
    device = torch.device(args.device)
    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    precisions = ("fp32", "bf16") if device.type == "cuda" else ("fp32",)
    checks = [check(task, p, device, args.steps) for task, p in graphed_cases(tasks, precisions)]
    print(table(checks, args.steps))
    return 0 if all(c.ok for c in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
