"""The shared training loop: epochs, tracker phases, reporting, validation, goals, stopping together.

A task supplies a ``Trainer`` (model, optimizer, data and one training step); ``run_training``
does the rest identically for every task, so time-to-accuracy means the same thing everywhere:
``time_train`` counts training only, validation is timed separately, and the goal is checked on
global metrics after each epoch's validation with one collective decision.
"""

from __future__ import annotations

import abc
import contextlib
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from mlbench_worker.context import RunContext
from mlbench_worker.faults import maybe_inject_fault
from mlbench_worker.goals import Stop, StopController
from mlbench_worker.optim import CentralizedOptimizer
from mlbench_worker.optim.schedules import WarmupPlateau
from mlbench_worker.tasks.base import Outcome
from mlbench_worker.tracker import Record, Tracker


@dataclass
class StepResult:
    """One training step's outcome, as tensors so GPU steps need no synchronisation.

    ``loss`` is the batch's mean loss (detached), ``samples`` the batch size and ``correct`` the
    number of correct top-1 predictions when the task has accuracy (else None).
    """

    loss: torch.Tensor
    samples: int
    correct: torch.Tensor | None = None


class Trainer(abc.ABC):
    """One task's training: subclasses provide data, one step and a global validation."""

    model: nn.Module
    optimizer: CentralizedOptimizer

    train_samples: int | None = None
    """Samples in the whole training set (all ranks' shards), for MLPerf's ``train_samples``."""
    eval_samples: int | None = None
    """Samples in the whole validation set, for MLPerf's ``eval_samples``."""
    comm_precision: str = "fp32"
    """The dtype gradients are all-reduced in (``fp32``, ``fp16`` or ``bf16``)."""

    @abc.abstractmethod
    def train_batches(self, epoch: int) -> Iterable[Any]:
        """This rank's training batches for ``epoch`` (1-based); the same count on every rank."""

    @abc.abstractmethod
    def train_step(self, batch: Any, record: Record | None) -> StepResult:
        """Forward, loss, backward, ``optimizer.aggregate()``, ``optimizer.step()`` and the batch
        metrics, calling ``record(phase)`` as each phase ends. ``record`` is None on batches the
        tracker does not stamp: guard each call (``if record: record("fwd_pass")``), so such a
        batch costs a branch per phase, not a call."""

    @abc.abstractmethod
    def validate(self) -> dict[str, float]:
        """Global validation metrics (all-reduced, identical on every rank), e.g.
        ``{"val_global_loss": ..., "val_global_Prec@1": ...}``."""

    def before_step(self, step: int) -> None:
        """Called before optimizer step ``step`` (0-based): per-step LR schedules go here."""
        return None

    def after_validation(self, epoch: int, metrics: dict[str, float], step: int) -> None:
        """Called after each validation: per-epoch schedules (reduce on plateau) go here."""
        return None

    @property
    def lr(self) -> float:
        """The current learning rate, reported as ``lr``."""
        return self.optimizer.lr


def autocast_for(
    precision: str, device: torch.device
) -> Callable[[], contextlib.AbstractContextManager[Any]]:
    """A factory of autocast contexts for the run's precision (bf16 on CPU or GPU, fp16 on GPU)."""
    if precision == "bf16":
        return lambda: torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    if precision in ("fp16", "amp"):
        if device.type != "cuda":
            raise ValueError(f"precision {precision!r} needs a GPU; use 'bf16' on CPU")
        return lambda: torch.autocast(device_type="cuda", dtype=torch.float16)
    return contextlib.nullcontext


class ClassificationTrainer(Trainer):
    """A trainer for ``(inputs, labels)`` batches with a cross-entropy style loss and top-1 accuracy.

    Subclasses set ``model``, ``optimizer``, ``loss_fn`` and implement ``train_batches`` and
    ``val_batches``. fp16 on GPU uses a ``GradScaler``; the scaler's unscale happens after the
    aggregation so every rank sees the same inf/nan check.
    """

    loss_fn: nn.Module

    def __init__(self, ctx: RunContext) -> None:
        self.ctx = ctx
        self.device = ctx.device
        self.autocast = autocast_for(ctx.config.precision, ctx.device)
        self.scaler = torch.amp.GradScaler("cuda") if ctx.config.precision in ("fp16", "amp") else None

    @abc.abstractmethod
    def val_batches(self) -> Iterable[tuple[torch.Tensor, torch.Tensor]]:
        """This rank's (disjoint) share of the validation set."""

    def predictions_correct(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """Number of correct top-1 predictions (binary tasks override this)."""
        return (output.argmax(dim=1) == target).sum()

    def train_step(self, batch: Any, record: Record | None) -> StepResult:
        inputs, target = batch
        with self.autocast():
            output = self.model(inputs)
        if record:
            record("fwd_pass")
        with self.autocast():
            loss = self.loss_fn(output, target)
        if record:
            record("comp_loss")
        if self.scaler is not None:
            self.scaler.scale(loss).backward()
        else:
            loss.backward()
        if record:
            record("backprop")
        self.optimizer.aggregate()
        if record:
            record("agg")
        if self.scaler is not None:
            self.scaler.step(self.optimizer.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        self.optimizer.zero_grad()
        if record:
            record("opt_step")
        with torch.no_grad():
            correct = self.predictions_correct(output.detach(), target)
        if record:
            record("comp_metrics")
        return StepResult(loss.detach(), int(target.shape[0]), correct)

    def validate(self) -> dict[str, float]:
        self.model.eval()
        sums = torch.zeros(3, dtype=torch.float64, device=self.device)  # loss*n, correct, n
        with torch.no_grad():
            for inputs, target in self.val_batches():
                with self.autocast():
                    output = self.model(inputs)
                    loss = self.loss_fn(output, target)
                n = target.shape[0]
                sums[0] += loss.double() * n
                sums[1] += self.predictions_correct(output, target).double()
                sums[2] += n
        return global_classification_metrics(self.ctx, sums)


class WarmupPlateauHooks:
    """Trainer hooks for a ``WarmupPlateau`` schedule (tasks 1a, 2a): warm-up per step, and
    reduce-on-plateau of the global validation loss after each validation."""

    ctx: RunContext
    optimizer: CentralizedOptimizer
    schedule: WarmupPlateau

    def before_step(self, step: int) -> None:
        lr = self.schedule.on_step(step)
        if lr != self.optimizer.lr:
            self.optimizer.set_lr(lr)

    def after_validation(self, epoch: int, metrics: dict[str, float], step: int) -> None:
        lr = self.schedule.on_validation(metrics["val_global_loss"], step)
        if lr != self.optimizer.lr:
            self.ctx.log(f"learning rate -> {lr:g} (validation loss plateau)")
            self.optimizer.set_lr(lr)


def global_classification_metrics(ctx: RunContext, sums: torch.Tensor) -> dict[str, float]:
    """All-reduce ``[loss_sum, correct, count]`` and return global mean loss and top-1 (percent)."""
    reduced = sums.to(ctx.comm.control_device)
    ctx.comm.all_reduce(reduced, "sum")
    loss_sum, correct, count = (float(v) for v in reduced.cpu())
    if count == 0:
        raise ValueError("the validation set is empty on every rank")
    return {"val_global_loss": loss_sum / count, "val_global_Prec@1": 100.0 * correct / count}


class _Window:
    """Training statistics accumulated between two reports (kept as tensors: no per-step sync)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.reset(time.perf_counter())

    def reset(self, now: float) -> None:
        self.loss_sum = torch.zeros((), dtype=torch.float64, device=self.device)
        self.correct: torch.Tensor | None = None
        self.samples = 0
        self.steps = 0
        self.since = now

    def add(self, result: StepResult) -> None:
        self.loss_sum += result.loss.double() * result.samples
        if result.correct is not None:
            c = result.correct.double()
            self.correct = c if self.correct is None else self.correct + c
        self.samples += result.samples
        self.steps += 1


_END = object()


def _iterate(batches: Iterable[Any], tracker: Tracker) -> Iterator[tuple[Any, Record | None]]:
    """The training loop's batch start as a generator (benchmarks drive trainers with it): yields
    ``(batch, record)`` with the batch started on the tracker before the loader does its work;
    ``record`` is the tracker's on stamped batches and None on the others. ``run_training`` writes
    the same statements inline (a generator's resume per step weighs on micro-steps)."""
    iterator = iter(batches)
    while True:
        start = next(tracker.schedule)
        record = start() if start else None
        batch = next(iterator, _END)
        if batch is _END:
            if record:
                tracker.unstamp()
            return
        if record:
            record("batch_load")
        tracker.batches += 1
        yield batch, record


def run_training(
    ctx: RunContext, trainer: Trainer, *, max_epochs: int, tracker: Tracker | None = None
) -> Outcome:
    """Train until the goal, ``max_time`` or ``max_epochs``; every rank returns the same outcome."""
    config = ctx.config
    reporter = ctx.reporter
    tracker = tracker or Tracker(ctx.device, seed=config.seed * 1009 + ctx.rank)
    report_every = max(1, int(ctx.hp("report_every_steps", 10)))
    check_every = max(1, int(ctx.hp("stop_check_every_steps", 20)))
    ctx.mark_run_start(
        {
            "train_samples": trainer.train_samples,
            "eval_samples": trainer.eval_samples,
            "comm_precision": trainer.comm_precision,
        }
    )
    stop = StopController(ctx.comm, config.goal, config.max_time_s, start=ctx.started_at)
    goal = config.goal
    step = 0
    window = _Window(ctx.device)
    ctx.log(
        f"training {config.task} on {ctx.world_size} rank(s), backend {config.backend}, "
        f"device {ctx.device}, max {max_epochs} epochs"
        + (f", goal {goal.metric} {'>=' if goal.direction == 'max' else '<='} {goal.target}" if goal else "")
    )
    for epoch in range(1, max_epochs + 1):
        if ctx.is_main:
            reporter.event("epoch_start", {"epoch": epoch})
        trainer.model.train()
        tracker.train()
        stopped = Stop.CONTINUE
        window.reset(time.perf_counter())
        batches = iter(trainer.train_batches(epoch))
        while True:  # _iterate's statements, inline
            start = next(tracker.schedule)  # the tracker's starter on batches it stamps, else None
            record = start() if start else None
            batch = next(batches, _END)
            if batch is _END:
                if record:
                    tracker.unstamp()
                break
            if record:
                record("batch_load")
            maybe_inject_fault(ctx.rank, step)
            trainer.before_step(step)
            result = trainer.train_step(batch, record)
            step += 1
            window.add(result)
            if step % report_every == 0:
                _report_window(ctx, trainer, window, step, epoch)
            if stop.has_time_limit and step % check_every == 0:
                stopped = stop.decide()
                if stopped != Stop.CONTINUE:
                    break
        tracker.batches = step  # the loop counts the batches; the tracker scales its sample by them
        if window.steps:
            _report_window(ctx, trainer, window, step, epoch)
        if stopped == Stop.MAX_TIME:
            tracker.pause()
            _report_totals(ctx, tracker, step, epoch)
            return _max_time_outcome(ctx, tracker, epoch, step)
        if ctx.is_main:  # the epoch_end event below marks the end of this validation
            reporter.event("eval_start", {"epoch": epoch})
        tracker.validation()
        metrics = trainer.validate()
        tracker.pause()
        train_s, val_s = tracker.train_time, tracker.validation_time
        if ctx.is_main:
            for name, value in metrics.items():
                reporter.metric(name, value, step=step, epoch=epoch)
            reporter.event("epoch_end", {"epoch": epoch, "train_time_s": train_s, "val_time_s": val_s})
        _report_totals(ctx, tracker, step, epoch)
        ctx.log(
            f"epoch {epoch}: "
            + ", ".join(f"{k}={v:.4g}" for k, v in metrics.items())
            + f", lr={trainer.lr:.4g}, train {train_s:.1f}s, validation {val_s:.1f}s"
        )
        decision = stop.decide(metrics)
        trainer.after_validation(epoch, metrics, step)
        if decision == Stop.GOAL:
            status = stop.goal_status(metrics)
            assert status is not None
            if ctx.is_main:
                reporter.event(
                    "goal_reached",
                    {
                        "metric": status.metric,
                        "value": status.value,
                        "target": status.target,
                        "epoch": epoch,
                        "step": step,
                        "train_time_s": train_s,
                        "val_time_s": val_s,
                    },
                )
            ctx.log(
                f"goal reached at epoch {epoch}: {status.metric}={status.value:.4g} (target {status.target})"
            )
            return Outcome(
                "success",
                f"goal reached: {status.metric}={status.value:.4g} (target {status.target})",
                {"epoch": epoch, "step": step, "train_time_s": train_s, "val_time_s": val_s},
            )
        if decision == Stop.MAX_TIME:
            return _max_time_outcome(ctx, tracker, epoch, step)
    details = {
        "epoch": max_epochs,
        "step": step,
        "train_time_s": tracker.train_time,
        "val_time_s": tracker.validation_time,
    }
    if goal is None:
        return Outcome("success", f"completed {max_epochs} epochs", details)
    return Outcome("aborted", f"max_epochs ({max_epochs}) reached before the goal", details)


def _max_time_outcome(ctx: RunContext, tracker: Tracker, epoch: int, step: int) -> Outcome:
    ctx.log(f"max_time_s ({ctx.config.max_time_s}) passed at epoch {epoch}, step {step}: stopping all ranks")
    return Outcome(
        "aborted",
        f"max_time_s ({ctx.config.max_time_s:g}) passed before the goal",
        {
            "epoch": epoch,
            "step": step,
            "train_time_s": tracker.train_time,
            "val_time_s": tracker.validation_time,
        },
    )


def _report_window(ctx: RunContext, trainer: Trainer, window: _Window, step: int, epoch: int) -> None:
    """Per-rank training metrics averaged over the steps since the last report."""
    now = time.perf_counter()
    reporter = ctx.reporter
    samples = max(1, window.samples)
    reporter.metric("train_loss", float(window.loss_sum) / samples, step=step, epoch=epoch)
    if window.correct is not None:
        reporter.metric("train_Prec@1", 100.0 * float(window.correct) / samples, step=step, epoch=epoch)
    reporter.metric("lr", trainer.lr, step=step, epoch=epoch)
    reporter.metric("step_time", (now - window.since) / max(1, window.steps), step=step, epoch=epoch)
    window.reset(now)


def _report_totals(ctx: RunContext, tracker: Tracker, step: int, epoch: int) -> None:
    """This rank's cumulative ``time_*`` and ``phase_*`` seconds."""
    for name, value in tracker.totals().items():
        ctx.reporter.metric(name, value, step=step, epoch=epoch)
