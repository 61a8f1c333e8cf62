"""The shared training loop: epochs, tracker phases, reporting, validation, goals, stopping together.

A task supplies a trainer (``mlbench_worker.tasks.steps`` for PyTorch: model, optimizer, data and
one training step; ``tasks.tf_resnet20`` for TensorFlow) and its rank's context; ``run_training``
does the rest identically for every task and framework, so time-to-accuracy means the same thing
everywhere: ``time_train`` counts training only, validation is timed separately, and the goal is
checked on global metrics after each epoch's validation with one collective decision.
``TrainingLoop.run`` reads as the loop it is (torchtitan's ``Trainer.train()`` is the model): start,
then per epoch train and validate, then finish. This module imports no framework: what differs
(device sums, synchronisation, memory, collectives) is the trainer's and the context's.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

from mlbench_worker import config as worker_config
from mlbench_worker import hyperparams as hps
from mlbench_worker import wire
from mlbench_worker.faults import maybe_inject_fault, slowdown_for
from mlbench_worker.goals import Collective, Stop, StopController
from mlbench_worker.tasks.base import Outcome
from mlbench_worker.timing.startup import CLOCK
from mlbench_worker.timing.tracker import Record, Tracker
from mlbench_worker.wire import EpochEnd, EpochStart, EvalStart, GoalReached, Progress, RunStart, emit

if TYPE_CHECKING:
    from mlbench_worker.context import ReporterLike
    from mlbench_worker.devices.graphs import GraphedStep

H = TypeVar("H", bound=hps.TaskHyperparameters)


class LoopContext(Protocol):
    """What the loop needs of a rank's context (``context.RunContext`` for PyTorch)."""

    config: worker_config.WorkerConfig
    reporter: ReporterLike
    started_at: float
    device: Any  # a torch.device; what a TensorFlow rank runs on ("cpu", "cuda")

    @property
    def comm(self) -> Collective: ...

    @property
    def rank(self) -> int: ...

    @property
    def world_size(self) -> int: ...

    @property
    def is_main(self) -> bool: ...

    def hyperparameters(self, kind: type[H]) -> H: ...

    def log(self, text: str, *, all_ranks: bool = False) -> None: ...

    def mark_run_start(self, facts: RunStart | None = None) -> None: ...


class WindowSums(Protocol):
    """A report window's training sums, kept where the steps compute them (a GPU's: no per-step
    read); ``means`` is the one place the host reads them."""

    def add(self, result: Any) -> None:
        """Fold in one step's result (its mean loss, samples and correct predictions)."""

    def means(self) -> tuple[float, float | None]:
        """The window's mean loss, and its top-1 accuracy in percent (None: the task has none)."""
        ...


class LoopTrainer(Protocol):
    """What the loop drives (``steps.Trainer`` for PyTorch; see its documentation)."""

    @property
    def train_samples(self) -> int | None: ...

    @property
    def eval_samples(self) -> int | None: ...

    @property
    def comm_precision(self) -> str: ...

    @property
    def lr(self) -> float: ...

    def train_batches(self, epoch: int) -> Iterable[Any]: ...

    def train_step(self, batch: Any, record: Record | None) -> Any: ...

    def validate(self) -> dict[str, float]: ...

    def before_step(self, step: int) -> None: ...

    def after_validation(self, epoch: int, metrics: dict[str, float], step: int) -> None: ...

    def train_mode(self) -> None:
        """The model in training mode (dropout, batch statistics) before an epoch's steps."""

    def window_sums(self) -> WindowSums:
        """Empty sums for a new report window."""
        ...

    def synchronize(self) -> None:
        """Wait for the device's queued work (the first step's end is the start's end)."""

    def memory_peak_gib(self) -> float | None:
        """The peak of the device memory the run's tensors took (None: not a GPU, or unknown)."""
        ...


@dataclass(frozen=True)
class HostStep:
    """A training step's outcome already on the host (TensorFlow's steps read theirs back)."""

    loss: float
    samples: int
    correct: float | None = None


class HostSums:
    """``WindowSums`` of ``HostStep`` results: plain floats."""

    def __init__(self) -> None:
        self.loss_sum = 0.0
        self.correct: float | None = None
        self.samples = 0

    def add(self, result: HostStep) -> None:
        self.loss_sum += result.loss * result.samples
        if result.correct is not None:
            self.correct = (self.correct or 0.0) + result.correct
        self.samples += result.samples

    def means(self) -> tuple[float, float | None]:
        samples = max(1, self.samples)
        return self.loss_sum / samples, None if self.correct is None else 100.0 * self.correct / samples


@runtime_checkable
class Slowable(Protocol):
    """A trainer whose compute phases a fault injection can slow (a ``steps.PhasedTrainer``)."""

    compute_slowdown: float


class MetricWindow:
    """Training statistics accumulated between two reports (the trainer's ``WindowSums``: no
    per-step sync), reported as per-rank ``train_loss``, ``train_Prec@1``, ``lr`` and ``step_time``."""

    def __init__(self, ctx: LoopContext, trainer: LoopTrainer, tracker: Tracker) -> None:
        self.ctx = ctx
        self.trainer = trainer
        self.tracker = tracker
        self.reset(time.perf_counter())

    def reset(self, now: float) -> None:
        self.sums = self.trainer.window_sums()
        self.steps = 0
        self.since = now
        self.aside_s = self.tracker.aside_s  # the tracker's set-aside seconds at the reset

    def add(self, result: Any) -> None:
        self.sums.add(result)
        self.steps += 1

    def report(self, step: int, epoch: int) -> None:
        """The averages since the last report (the one place the step path reads device values,
        so the host waits for the device once per report), then start a new window."""
        now = time.perf_counter()
        reporter = self.ctx.reporter
        loss, top1 = self.sums.means()
        reporter.metric(wire.TRAIN_LOSS, loss, step=step, epoch=epoch)
        if top1 is not None:
            reporter.metric(wire.TRAIN_PREC1, top1, step=step, epoch=epoch)
        reporter.metric(wire.LR, self.trainer.lr, step=step, epoch=epoch)
        spent = now - self.since - (self.tracker.aside_s - self.aside_s)  # graph capture is not a step
        reporter.metric(wire.STEP_TIME, spent / max(1, self.steps), step=step, epoch=epoch)
        report_timed_steps(self.ctx, self.tracker, epoch)
        self.reset(now)


def report_timed_steps(ctx: LoopContext, tracker: Tracker, epoch: int) -> None:
    """Each timed step resolved since the last report: its seconds and its all-reduce seconds
    (``timed_step_s``, ``timed_step_comm_s``), at its own step number."""
    reporter = ctx.reporter
    for timed in tracker.take_steps():
        reporter.metric(wire.TIMED_STEP, timed.seconds, step=timed.step, epoch=epoch)
        reporter.metric(wire.TIMED_STEP_COMM, timed.comm_s, step=timed.step, epoch=epoch)


class TrainingLoop:
    """One rank's training run: epochs of steps, validation, goal and time checks, reports."""

    def __init__(self, ctx: LoopContext, trainer: LoopTrainer, tracker: Tracker) -> None:
        config = ctx.config
        self.ctx = ctx
        self.trainer = trainer
        self.tracker = tracker
        loop = ctx.hyperparameters(hps.TrainingHyperparameters)
        self.report_every = loop.report_every_steps
        self.check_every = loop.stop_check_every_steps
        slow_compute(ctx, trainer)
        self.graphs: GraphedStep | None = None
        if config.implementation.cuda_graphs:
            self.graphs = graphed_step(ctx, trainer, tracker)
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
        trainer.train_mode()
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
        first = step == 0 and self.graphs is None
        self.window.add(self.counted_step(batch) if first else self.train_step(batch, record))
        self.step = step = step + 1
        if not CLOCK.reported:
            self.first_step_done()
        if step % self.report_every == 0:
            self.window.report(step, epoch)
        if self.stop.has_time_limit and step % self.check_every == 0:
            return self.stop.decide()
        return Stop.CONTINUE

    def counted_step(self, batch: Any) -> Any:
        """The first step, its model FLOPs counted by torch's FLOP counter (``model_flops_per_step``,
        one rank's step: the ops it has formulas for, matrix products and convolutions). Counting
        costs a few steps' time, so the step is set aside like a graph capture: neither a timed
        step nor training time (it is in the warm-up either way). Other frameworks: no count."""
        if self.ctx.config.framework != "pytorch":
            return self.train_step(batch, None)
        try:
            from torch.utils.flop_counter import FlopCounterMode
        except ImportError:  # an older torch: no count
            return self.train_step(batch, None)
        with self.tracker.aside(), FlopCounterMode(display=False) as counter:
            result = self.trainer.train_step(batch, None)
        self.ctx.reporter.metric(wire.MODEL_FLOPS, float(counter.get_total_flops()), step=1)
        return result

    def first_step_done(self) -> None:
        """The rank's start ends with its first step (the device's work included): capture, when
        CUDA graphs were captured in it, is a phase of its own."""
        ctx = self.ctx
        self.trainer.synchronize()
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
        report_timed_steps(self.ctx, self.tracker, epoch)  # the totals resolved the last ones
        peak = self.trainer.memory_peak_gib()
        if peak is not None:
            reporter.metric(wire.GPU_MEMORY_PEAK_GIB, peak, step=step, epoch=epoch)

    def finish(self, outcome: Outcome) -> Outcome:
        """Summarise what ran from CUDA graphs (once per run) and return ``outcome``."""
        if self.graphs is not None:
            self.ctx.log(self.graphs.summary())
        return outcome


def slow_compute(ctx: LoopContext, trainer: LoopTrainer) -> None:
    """Slow this rank's compute phases when ``MLBENCH_INJECT_FAULT`` mode=slow names it."""
    slowdown = slowdown_for(ctx.rank)
    if slowdown <= 1.0:
        return
    if not isinstance(trainer, Slowable) or ctx.config.implementation.cuda_graphs:
        raise ValueError(
            f"MLBENCH_INJECT_FAULT mode=slow needs an eager step that runs MLBench's phases "
            f"(tasks 1a, 1b, 2a, 3a without cuda_graphs), not task {ctx.config.task}'s"
        )
    trainer.compute_slowdown = slowdown
    ctx.log(f"compute slowed {slowdown:g}x on purpose (MLBENCH_INJECT_FAULT)")


def graphed_step(ctx: LoopContext, trainer: LoopTrainer, tracker: Tracker) -> GraphedStep:
    """The trainer's step replayed from CUDA graphs (``implementation: {cuda_graphs: true}``)."""
    from mlbench_worker.devices.graphs import CudaCapture, GraphedStep
    from mlbench_worker.tasks.steps import PhasedTrainer

    if not isinstance(trainer, PhasedTrainer):
        raise ValueError(f"task {ctx.config.task}'s step cannot be captured in CUDA graphs")
    return GraphedStep(trainer, CudaCapture(ctx.device), aside=tracker.aside)


def run_training(
    ctx: LoopContext, trainer: LoopTrainer, *, max_epochs: int, tracker: Tracker | None = None
) -> Outcome:
    """Train until the goal, ``max_time`` or ``max_epochs``; every rank returns the same outcome."""
    warmup = ctx.hyperparameters(hps.TrainingHyperparameters).timing_warmup_steps
    tracker = tracker or Tracker(ctx.device, seed=ctx.config.seed * 1009 + ctx.rank, warmup_steps=warmup)
    return TrainingLoop(ctx, trainer, tracker).run(max_epochs)
