"""The shared training loop: epochs, tracker phases, reporting, validation, goals, stopping together.

A task supplies a ``Trainer`` (model, optimizer, data and one training step); ``run_training``
does the rest identically for every task, so time-to-accuracy means the same thing everywhere:
``time_train`` counts training only, validation is timed separately, and the goal is checked on
global metrics after each epoch's validation with one collective decision.
"""

from __future__ import annotations

import abc
import contextlib
import functools
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import torch
from torch import nn

from mlbench_worker.context import RunContext
from mlbench_worker.faults import maybe_inject_fault, slowdown_for, slowed
from mlbench_worker.goals import Stop, StopController
from mlbench_worker.optim import CentralizedOptimizer
from mlbench_worker.optim.amp import make_scaler
from mlbench_worker.optim.schedules import WarmupPlateau
from mlbench_worker.startup import CLOCK
from mlbench_worker.tasks.base import Outcome
from mlbench_worker.tracker import CATEGORIES, Record, Tracker

if TYPE_CHECKING:
    from mlbench_worker.graphs import GraphedStep


@dataclass
class StepResult:
    """One training step's outcome, as tensors so GPU steps need no synchronisation.

    ``loss`` is the batch's mean loss (detached), ``samples`` the batch size and ``correct`` the
    number of correct top-1 predictions when the task has accuracy (else None).
    """

    loss: torch.Tensor
    samples: int
    correct: torch.Tensor | None = None


class Step:
    """What flows between the phases of one training step.

    ``inputs`` are the tensors the step reads (its batch, and state carried over from the
    previous step such as a recurrent hidden state); phases keep what they compute as attributes
    (``output``, ``loss``, ``correct``). Under CUDA graphs ``inputs`` are static buffers the
    runner refills before each replay and the attributes are the graphs' static outputs;
    ``output`` is only valid between the phases (``end_step`` must not read it).
    """

    def __init__(self, inputs: tuple[torch.Tensor, ...], samples: int) -> None:
        self.inputs = inputs
        self.samples = samples
        self.output: Any = None
        self.loss: torch.Tensor | None = None
        self.correct: torch.Tensor | None = None

    def with_inputs(self, inputs: tuple[torch.Tensor, ...]) -> Step:
        """A step of the same kind reading ``inputs`` (the static buffers of a graph capture)."""
        return type(self)(inputs, self.samples)


COMPUTE_PHASES = frozenset(name for name, kind in CATEGORIES.items() if kind == "compute")

StepT = TypeVar("StepT", bound=Step)
Phase = tuple[str, Callable[[StepT], None]]


class Trainer(abc.ABC):
    """One task's training: data, one step, a global validation, and the shared update.

    ``grad_clip`` > 0 clips the averaged gradients' norm; ``scaler`` scales the loss for fp16
    (it exists, disabled, for other precisions so the step code is the same).
    """

    model: nn.Module
    optimizer: CentralizedOptimizer
    scaler: torch.amp.GradScaler
    grad_clip: float = 0.0

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
        """Forward, loss, backward, ``aggregate()``, ``update()`` and the batch metrics, calling
        ``record(phase)`` as each phase ends. ``record`` is None on batches the tracker does not
        stamp: guard each call, so such a batch costs a branch per phase, not a call."""

    @abc.abstractmethod
    def validate(self) -> dict[str, float]:
        """Global validation metrics (all-reduced, identical on every rank), e.g.
        ``{"val_global_loss": ..., "val_global_Prec@1": ...}``."""

    def aggregate(self) -> None:
        """``agg``: average the gradients over ranks."""
        self.optimizer.aggregate()

    def update(self) -> None:
        """``opt_step``: unscale and clip when asked, the fused optimizer step (which skips itself
        on an fp16 overflow without the host looking), the scale update, zeroed gradients."""
        optimizer = self.optimizer
        if self.grad_clip > 0:
            self.scaler.unscale_(optimizer.optimizer)
            optimizer.clip_grad_norm_(self.grad_clip)
        self.scaler.step(optimizer.optimizer)
        self.scaler.update()
        optimizer.zero_grad()

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


class PhasedTrainer(Trainer, Generic[StepT]):
    """A trainer whose step is one pass through MLBench's phases, each a method on a ``Step``.

    ``train_step`` runs ``begin_step`` (host-side settings such as the learning rate, and the
    tensors the step reads), the phases ``fwd_pass`` .. ``comp_metrics`` and ``end_step``. The
    phases may neither read tensor values on the host nor depend on Python values that change
    between steps: a CUDA graph (``mlbench_worker.graphs``) replays what they did at capture.
    """

    @abc.abstractmethod
    def begin_step(self, batch: Any) -> StepT:
        """Per-step host work before the phases; returns the step with the tensors it reads."""

    @abc.abstractmethod
    def forward(self, step: StepT) -> None:
        """``fwd_pass``: run the model on ``step.inputs`` into ``step.output``."""

    @abc.abstractmethod
    def compute_loss(self, step: StepT) -> None:
        """``comp_loss``: the loss to minimise into ``step.loss``."""

    def backward(self, step: StepT) -> None:
        """``backprop``: gradients into the optimizer's (flat) gradient buffers."""
        assert step.loss is not None
        self.scaler.scale(step.loss).backward()

    def compute_metrics(self, step: StepT) -> None:
        """``comp_metrics``: batch metrics kept on the device (``step.correct``); none by default."""
        return None

    def end_step(self, step: StepT) -> StepResult:
        """Host work after the phases (carry state to the next step); the step's result."""
        assert step.loss is not None
        return StepResult(step.loss.detach(), step.samples, step.correct)

    def phases(self) -> list[Phase[StepT]]:
        """The step's phases in order, named as the tracker records them."""
        return [
            ("fwd_pass", self.forward),
            ("comp_loss", self.compute_loss),
            ("backprop", self.backward),
            ("agg", lambda _step: self.aggregate()),
            ("opt_step", lambda _step: self.update()),
            ("comp_metrics", self.compute_metrics),
        ]

    def idle_phases(self) -> set[str]:
        """Phases that launch no device work (nothing to capture): ``agg`` with nothing to reduce."""
        return set() if self.optimizer.aggregator.does_work else {"agg"}

    def train_step(self, batch: Any, record: Record | None) -> StepResult:
        step = self.begin_step(batch)
        for name, run in self._phase_list:
            run(step)
            if record:
                record(name)
        return self.end_step(step)

    compute_slowdown: float = 1.0
    """Above 1 on a rank slowed on purpose (``MLBENCH_INJECT_FAULT`` mode=slow): its compute
    phases take that many times as long (set before the first step)."""

    @functools.cached_property
    def _phase_list(self) -> list[Phase[StepT]]:
        if self.compute_slowdown <= 1.0:
            return self.phases()
        param = next(self.model.parameters(), None)
        sync = torch.cuda.synchronize if param is not None and param.is_cuda else None
        return slowed(self.phases(), self.compute_slowdown, COMPUTE_PHASES, sync)


def autocast_for(
    precision: str, device: torch.device, *, cache: bool = True
) -> Callable[[], contextlib.AbstractContextManager[Any]]:
    """A factory of autocast contexts for the run's precision (bf16 on CPU or GPU, fp16 on GPU).

    ``cache=False`` under CUDA graphs: casts cached inside a capture would be freed when the
    context exits while the graph still uses their memory (torch's capture rules)."""
    if precision == "bf16":
        return lambda: torch.autocast(device_type=device.type, dtype=torch.bfloat16, cache_enabled=cache)
    if precision in ("fp16", "amp"):
        if device.type != "cuda":
            raise ValueError(f"precision {precision!r} needs a GPU; use 'bf16' on CPU")
        return lambda: torch.autocast(device_type="cuda", dtype=torch.float16, cache_enabled=cache)
    return contextlib.nullcontext


def run_autocast(ctx: RunContext) -> Callable[[], contextlib.AbstractContextManager[Any]]:
    """``autocast_for`` the run's precision, without the cast cache when steps are graph-captured."""
    config = ctx.config
    return autocast_for(config.precision, ctx.device, cache=not config.implementation.cuda_graphs)


class ClassificationTrainer(PhasedTrainer[Step]):
    """A trainer for ``(inputs, labels)`` batches with a cross-entropy style loss and top-1 accuracy.

    Subclasses set ``model``, ``optimizer``, ``loss_fn`` and implement ``train_batches`` and
    ``val_batches``. fp16 on GPU scales the loss; the scaler's inf check happens after the
    aggregation, so every rank skips or takes the same step.
    """

    loss_fn: nn.Module

    def __init__(self, ctx: RunContext) -> None:
        self.ctx = ctx
        self.device = ctx.device
        config = ctx.config
        self.autocast = run_autocast(ctx)
        self.scaler = make_scaler(config.hyperparameters, config.precision, ctx.device)

    @abc.abstractmethod
    def val_batches(self) -> Iterable[tuple[torch.Tensor, torch.Tensor]]:
        """This rank's (disjoint) share of the validation set."""

    def predictions_correct(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """Number of correct top-1 predictions (binary tasks override this)."""
        return (output.argmax(dim=1) == target).sum()

    def begin_step(self, batch: tuple[torch.Tensor, torch.Tensor]) -> Step:
        inputs, target = batch
        return Step((inputs, target), int(target.shape[0]))

    def forward(self, step: Step) -> None:
        with self.autocast():
            step.output = self.model(step.inputs[0])

    def compute_loss(self, step: Step) -> None:
        with self.autocast():
            step.loss = self.loss_fn(step.output, step.inputs[1])

    def compute_metrics(self, step: Step) -> None:
        with torch.no_grad():
            step.correct = self.predictions_correct(step.output.detach(), step.inputs[1])

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
        self.reset(time.perf_counter(), 0.0)

    def reset(self, now: float, aside_s: float) -> None:
        self.loss_sum = torch.zeros((), dtype=torch.float64, device=self.device)
        self.correct: torch.Tensor | None = None
        self.samples = 0
        self.steps = 0
        self.since = now
        self.aside_s = aside_s  # the tracker's set-aside seconds at the reset

    def add(self, result: StepResult) -> None:
        self.loss_sum.add_(result.loss, alpha=result.samples)
        if result.correct is not None:
            if self.correct is None:
                self.correct = torch.zeros((), dtype=torch.float64, device=self.device)
            self.correct.add_(result.correct)
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
    slowdown = slowdown_for(ctx.rank)
    if slowdown > 1.0:
        if not isinstance(trainer, PhasedTrainer) or config.implementation.cuda_graphs:
            raise ValueError(
                f"MLBENCH_INJECT_FAULT mode=slow needs an eager step that runs MLBench's phases "
                f"(tasks 1a, 2a, 3a without cuda_graphs), not task {config.task}'s"
            )
        trainer.compute_slowdown = slowdown
        ctx.log(f"compute slowed {slowdown:g}x on purpose (MLBENCH_INJECT_FAULT)")
    train_step = trainer.train_step
    graphs = None
    if config.implementation.cuda_graphs:
        from mlbench_worker.graphs import CudaCapture, GraphedStep

        if not isinstance(trainer, PhasedTrainer):
            raise ValueError(f"task {config.task}'s step cannot be captured in CUDA graphs")
        graphs = GraphedStep(trainer, CudaCapture(ctx.device), aside=tracker.aside, log=ctx.log)
        train_step = graphs.train_step
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

    def details(epoch: int) -> dict[str, Any]:
        """The figures every outcome carries (``run_stop``); graph capture is initialisation."""
        out: dict[str, Any] = {
            "epoch": epoch,
            "step": step,
            "train_time_s": tracker.train_time,
            "val_time_s": tracker.validation_time,
        }
        if graphs is not None:
            out["graph_capture_s"] = graphs.capture_s
        return out

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
        window.reset(time.perf_counter(), tracker.aside_s)
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
            result = train_step(batch, record)
            step += 1
            if not CLOCK.reported:
                _first_step_done(ctx, graphs)
            window.add(result)
            if step % report_every == 0:
                _report_window(ctx, trainer, window, step, epoch, tracker)
            if stop.has_time_limit and step % check_every == 0:
                stopped = stop.decide()
                if stopped != Stop.CONTINUE:
                    break
        tracker.batches = step  # the loop counts the batches; the tracker scales its sample by them
        if window.steps:
            _report_window(ctx, trainer, window, step, epoch, tracker)
        if stopped == Stop.MAX_TIME:
            tracker.pause()
            _report_totals(ctx, tracker, step, epoch)
            return _max_time_outcome(ctx, details(epoch))
        if ctx.is_main:  # the epoch_end event below marks the end of this validation
            reporter.event("eval_start", {"epoch": epoch})
        tracker.validation()
        metrics = trainer.validate()
        tracker.pause()
        train_s, val_s = tracker.train_time, tracker.validation_time
        if ctx.is_main:
            for name, value in metrics.items():
                reporter.metric(name, value, step=step, epoch=epoch)
            reporter.event("epoch_end", details(epoch))
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
                goal_payload = {"metric": status.metric, "value": status.value, "target": status.target}
                reporter.event("goal_reached", {**goal_payload, **details(epoch)})
            ctx.log(
                f"goal reached at epoch {epoch}: {status.metric}={status.value:.4g} (target {status.target})"
            )
            return Outcome(
                "success",
                f"goal reached: {status.metric}={status.value:.4g} (target {status.target})",
                details(epoch),
            )
        if decision == Stop.MAX_TIME:
            return _max_time_outcome(ctx, details(epoch))
    if goal is None:
        return Outcome("success", f"completed {max_epochs} epochs", details(max_epochs))
    return Outcome("aborted", f"max_epochs ({max_epochs}) reached before the goal", details(max_epochs))


def _max_time_outcome(ctx: RunContext, details: dict[str, Any]) -> Outcome:
    ctx.log(
        f"max_time_s ({ctx.config.max_time_s}) passed at epoch {details['epoch']}, step {details['step']}: "
        "stopping all ranks"
    )
    return Outcome("aborted", f"max_time_s ({ctx.config.max_time_s:g}) passed before the goal", details)


def _report_window(
    ctx: RunContext, trainer: Trainer, window: _Window, step: int, epoch: int, tracker: Tracker
) -> None:
    """Per-rank training metrics averaged over the steps since the last report (the one place
    the step path reads device values, so the host waits for the device once per report)."""
    now = time.perf_counter()
    reporter = ctx.reporter
    samples = max(1, window.samples)
    reporter.metric("train_loss", float(window.loss_sum) / samples, step=step, epoch=epoch)
    if window.correct is not None:
        reporter.metric("train_Prec@1", 100.0 * float(window.correct) / samples, step=step, epoch=epoch)
    reporter.metric("lr", trainer.lr, step=step, epoch=epoch)
    spent = now - window.since - (tracker.aside_s - window.aside_s)  # graph capture is not a step
    reporter.metric("step_time", spent / max(1, window.steps), step=step, epoch=epoch)
    window.reset(now, tracker.aside_s)


def _first_step_done(ctx: RunContext, graphs: GraphedStep | None) -> None:
    """The rank's start ends with its first step (the device's work included): capture, when
    CUDA graphs were captured in it, is a phase of its own."""
    if ctx.device.type == "cuda":
        torch.cuda.synchronize(ctx.device)
    if graphs is not None:
        CLOCK.add("graph_capture", graphs.capture_s)
    CLOCK.mark("first_step")
    CLOCK.report(ctx.reporter, ctx.rank)


def _report_totals(ctx: RunContext, tracker: Tracker, step: int, epoch: int) -> None:
    """This rank's cumulative ``time_*`` and ``phase_*`` seconds, and on a GPU the peak of the
    memory its tensors (CUDA graphs' pools included) have taken."""
    for name, value in tracker.totals().items():
        ctx.reporter.metric(name, value, step=step, epoch=epoch)
    if ctx.device.type == "cuda":
        peak = torch.cuda.max_memory_allocated(ctx.device) / 2**30
        ctx.reporter.metric("gpu_memory_peak_gib", peak, step=step, epoch=epoch)
