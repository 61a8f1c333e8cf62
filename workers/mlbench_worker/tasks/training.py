"""The shared training loop: epochs, tracker phases, reporting, validation, goals, stopping together.

A task supplies a ``Trainer`` (``mlbench_worker.tasks.steps``: model, optimizer, data and one
training step); ``run_training`` does the rest identically for every task, so time-to-accuracy
means the same thing everywhere: ``time_train`` counts training only, validation is timed
separately, and the goal is checked on global metrics after each epoch's validation with one
collective decision. ``TrainingLoop.run`` reads as the loop it is (torchtitan's
``Trainer.train()`` is the model): start, then per epoch train and validate, then finish.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from mlbench_worker import hyperparams as hps
from mlbench_worker.context import RunContext
from mlbench_worker.faults import maybe_inject_fault, slowdown_for
from mlbench_worker.goals import Stop, StopController
from mlbench_worker.graphs import CudaCapture, GraphedStep
from mlbench_worker.startup import CLOCK
from mlbench_worker.tasks.base import Outcome
from mlbench_worker.tasks.steps import PhasedTrainer, StepResult, Trainer
from mlbench_worker.tracker import Record, Tracker
from mlbench_worker.wire import EpochEnd, EpochStart, EvalStart, GoalReached, Progress, RunStart, emit


class MetricWindow:
    """Training statistics accumulated between two reports (kept as tensors: no per-step sync),
    reported as per-rank ``train_loss``, ``train_Prec@1``, ``lr`` and ``step_time``."""

    def __init__(self, ctx: RunContext, trainer: Trainer, tracker: Tracker) -> None:
        self.ctx = ctx
        self.trainer = trainer
        self.tracker = tracker
        self.device = ctx.device
        self.reset(time.perf_counter())

    def reset(self, now: float) -> None:
        self.loss_sum = torch.zeros((), dtype=torch.float64, device=self.device)
        self.correct: torch.Tensor | None = None
        self.samples = 0
        self.steps = 0
        self.since = now
        self.aside_s = self.tracker.aside_s  # the tracker's set-aside seconds at the reset

    def add(self, result: StepResult) -> None:
        self.loss_sum.add_(result.loss, alpha=result.samples)
        if result.correct is not None:
            if self.correct is None:
                self.correct = torch.zeros((), dtype=torch.float64, device=self.device)
            self.correct.add_(result.correct)
        self.samples += result.samples
        self.steps += 1

    def report(self, step: int, epoch: int) -> None:
        """The averages since the last report (the one place the step path reads device values,
        so the host waits for the device once per report), then start a new window."""
        now = time.perf_counter()
        reporter = self.ctx.reporter
        samples = max(1, self.samples)
        reporter.metric("train_loss", float(self.loss_sum) / samples, step=step, epoch=epoch)
        if self.correct is not None:
            reporter.metric("train_Prec@1", 100.0 * float(self.correct) / samples, step=step, epoch=epoch)
        reporter.metric("lr", self.trainer.lr, step=step, epoch=epoch)
        spent = now - self.since - (self.tracker.aside_s - self.aside_s)  # graph capture is not a step
        reporter.metric("step_time", spent / max(1, self.steps), step=step, epoch=epoch)
        self.reset(now)


class TrainingLoop:
    """One rank's training run: epochs of steps, validation, goal and time checks, reports."""

    def __init__(self, ctx: RunContext, trainer: Trainer, tracker: Tracker) -> None:
        config = ctx.config
        self.ctx = ctx
        self.trainer = trainer
        self.tracker = tracker
        loop = ctx.hyperparameters(hps.TrainingHyperparameters)
        self.report_every = loop.report_every_steps
        self.check_every = loop.stop_check_every_steps
        slow_compute(ctx, trainer)
        self.graphs = graphed_step(ctx, trainer, tracker) if config.implementation.cuda_graphs else None
        self.train_step = self.graphs.train_step if self.graphs is not None else trainer.train_step
        self.stop = StopController(ctx.comm, config.goal, config.max_time_s, start=ctx.started_at)
        self.window = MetricWindow(ctx, trainer, tracker)
        self.step = 0

    def run(self, max_epochs: int) -> Outcome:
        """Train until the goal, ``max_time`` or ``max_epochs``; every rank returns the same outcome."""
        self.start(max_epochs)
        for epoch in range(1, max_epochs + 1):
            if self.train_epoch(epoch) == Stop.MAX_TIME:
                return self.finish(self.max_time_outcome(epoch))
            outcome = self.validate(epoch)
            if outcome is not None:
                return self.finish(outcome)
        if self.ctx.config.goal is None:
            return self.finish(Outcome("success", f"completed {max_epochs} epochs", self.details(max_epochs)))
        reason = f"max_epochs ({max_epochs}) reached before the goal"
        return self.finish(Outcome("aborted", reason, self.details(max_epochs)))

    def start(self, max_epochs: int) -> None:
        ctx, config, trainer = self.ctx, self.ctx.config, self.trainer
        ctx.mark_run_start(
            RunStart(
                train_samples=trainer.train_samples,
                eval_samples=trainer.eval_samples,
                comm_precision=trainer.comm_precision,
            )
        )
        goal = config.goal
        ctx.log(
            f"training {config.task} on {ctx.world_size} rank(s), backend {config.backend}, "
            f"device {ctx.device}, max {max_epochs} epochs"
            + (
                f", goal {goal.metric} {'>=' if goal.direction == 'max' else '<='} {goal.target}"
                if goal
                else ""
            )
        )

    def train_epoch(self, epoch: int) -> Stop:
        """One epoch of training steps; Stop.MAX_TIME when the ranks agreed to stop in it."""
        ctx, trainer, tracker, window = self.ctx, self.trainer, self.tracker, self.window
        if ctx.is_main:
            emit(ctx.reporter, EpochStart(epoch=epoch))
        trainer.model.train()
        tracker.train()
        window.reset(time.perf_counter())
        stopped = Stop.CONTINUE
        for batch, record in tracker.each_batch(trainer.train_batches(epoch)):
            stopped = self.one_step(batch, record, epoch)
            if stopped != Stop.CONTINUE:
                break
        if window.steps:
            window.report(self.step, epoch)
        if stopped == Stop.MAX_TIME:
            tracker.pause()
            self.report_totals(epoch)
        return stopped

    def one_step(self, batch: Any, record: Record | None, epoch: int) -> Stop:
        """A training step with its hooks, its report when one is due and the time check."""
        step = self.step
        maybe_inject_fault(self.ctx.rank, step)
        self.trainer.before_step(step)
        self.window.add(self.train_step(batch, record))
        self.step = step = step + 1
        if not CLOCK.reported:
            self.first_step_done()
        if step % self.report_every == 0:
            self.window.report(step, epoch)
        if self.stop.has_time_limit and step % self.check_every == 0:
            return self.stop.decide()
        return Stop.CONTINUE

    def first_step_done(self) -> None:
        """The rank's start ends with its first step (the device's work included): capture, when
        CUDA graphs were captured in it, is a phase of its own."""
        ctx = self.ctx
        if ctx.device.type == "cuda":
            torch.cuda.synchronize(ctx.device)
        if self.graphs is not None:
            CLOCK.add("graph_capture", self.graphs.capture_s)
        CLOCK.mark("first_step")
        CLOCK.report(ctx.reporter, ctx.rank)

    def validate(self, epoch: int) -> Outcome | None:
        """Global validation, its reports, the schedule hook and the collective decision: the
        outcome when the run stops here, else None."""
        ctx, tracker, reporter = self.ctx, self.tracker, self.ctx.reporter
        if ctx.is_main:  # the epoch_end event below marks the end of this validation
            emit(reporter, EvalStart(epoch=epoch))
        tracker.validation()
        metrics = self.trainer.validate()
        tracker.pause()
        if ctx.is_main:
            for name, value in metrics.items():
                reporter.metric(name, value, step=self.step, epoch=epoch)
            emit(reporter, EpochEnd(**vars(self.details(epoch))))
        self.report_totals(epoch)
        ctx.log(
            f"epoch {epoch}: "
            + ", ".join(f"{k}={v:.4g}" for k, v in metrics.items())
            + f", lr={self.trainer.lr:.4g}, train {tracker.train_time:.1f}s, "
            f"validation {tracker.validation_time:.1f}s"
        )
        decision = self.stop.decide(metrics)
        self.trainer.after_validation(epoch, metrics, self.step)
        if decision == Stop.GOAL:
            return self.goal_outcome(epoch, metrics)
        if decision == Stop.MAX_TIME:
            return self.max_time_outcome(epoch)
        return None

    def goal_outcome(self, epoch: int, metrics: dict[str, float]) -> Outcome:
        status = self.stop.goal_status(metrics)
        assert status is not None
        if self.ctx.is_main:
            figures = vars(self.details(epoch))
            goal = GoalReached(metric=status.metric, value=status.value, target=status.target, **figures)
            emit(self.ctx.reporter, goal)
        reached = f"{status.metric}={status.value:.4g} (target {status.target})"
        self.ctx.log(f"goal reached at epoch {epoch}: {reached}")
        return Outcome("success", f"goal reached: {reached}", self.details(epoch))

    def max_time_outcome(self, epoch: int) -> Outcome:
        max_time_s = self.ctx.config.max_time_s
        self.ctx.log(
            f"max_time_s ({max_time_s}) passed at epoch {epoch}, step {self.step}: stopping all ranks"
        )
        return Outcome("aborted", f"max_time_s ({max_time_s:g}) passed before the goal", self.details(epoch))

    def details(self, epoch: int) -> Progress:
        """The figures every outcome carries (``run_stop``); graph capture is initialisation."""
        return Progress(
            epoch=epoch,
            step=self.step,
            train_time_s=self.tracker.train_time,
            val_time_s=self.tracker.validation_time,
            graph_capture_s=self.graphs.capture_s if self.graphs is not None else None,
        )

    def report_totals(self, epoch: int) -> None:
        """This rank's cumulative ``time_*`` and ``phase_*`` seconds, and on a GPU the peak of the
        memory its tensors (CUDA graphs' pools included) have taken."""
        reporter, step = self.ctx.reporter, self.step
        for name, value in self.tracker.totals().items():
            reporter.metric(name, value, step=step, epoch=epoch)
        if self.ctx.device.type == "cuda":
            peak = torch.cuda.max_memory_allocated(self.ctx.device) / 2**30
            reporter.metric("gpu_memory_peak_gib", peak, step=step, epoch=epoch)

    def finish(self, outcome: Outcome) -> Outcome:
        """Summarise what ran from CUDA graphs (once per run) and return ``outcome``."""
        if self.graphs is not None:
            self.ctx.log(self.graphs.summary())
        return outcome


def slow_compute(ctx: RunContext, trainer: Trainer) -> None:
    """Slow this rank's compute phases when ``MLBENCH_INJECT_FAULT`` mode=slow names it."""
    slowdown = slowdown_for(ctx.rank)
    if slowdown <= 1.0:
        return
    if not isinstance(trainer, PhasedTrainer) or ctx.config.implementation.cuda_graphs:
        raise ValueError(
            f"MLBENCH_INJECT_FAULT mode=slow needs an eager step that runs MLBench's phases "
            f"(tasks 1a, 1b, 2a, 3a without cuda_graphs), not task {ctx.config.task}'s"
        )
    trainer.compute_slowdown = slowdown
    ctx.log(f"compute slowed {slowdown:g}x on purpose (MLBENCH_INJECT_FAULT)")


def graphed_step(ctx: RunContext, trainer: Trainer, tracker: Tracker) -> GraphedStep:
    """The trainer's step replayed from CUDA graphs (``implementation: {cuda_graphs: true}``)."""
    if not isinstance(trainer, PhasedTrainer):
        raise ValueError(f"task {ctx.config.task}'s step cannot be captured in CUDA graphs")
    return GraphedStep(trainer, CudaCapture(ctx.device), aside=tracker.aside)


def run_training(
    ctx: RunContext, trainer: Trainer, *, max_epochs: int, tracker: Tracker | None = None
) -> Outcome:
    """Train until the goal, ``max_time`` or ``max_epochs``; every rank returns the same outcome."""
    tracker = tracker or Tracker(ctx.device, seed=ctx.config.seed * 1009 + ctx.rank)
    return TrainingLoop(ctx, trainer, tracker).run(max_epochs)
