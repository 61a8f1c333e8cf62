"""What one training step is: the trainer interfaces the shared loop drives, and the step classes.

``Trainer`` is a task's training (data, one step, a global validation, schedule hooks);
``PhasedTrainer`` splits its step into MLBench's phases, each a method on a ``Step`` (what flows
between the phases), so the tracker can stamp each phase and ``mlbench_worker.devices.graphs`` can
capture each in a CUDA graph; ``ClassificationTrainer`` is the phased step of the image and
linear tasks. The loop itself is ``mlbench_worker.tasks.training``.
"""

from __future__ import annotations

import abc
import contextlib
import functools
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import torch
from torch import nn

from mlbench_worker import wire
from mlbench_worker.context import RunContext
from mlbench_worker.faults import slowed
from mlbench_worker.optim.amp import make_scaler
from mlbench_worker.optim.centralized import CentralizedOptimizer
from mlbench_worker.optim.schedules import WarmupPlateau
from mlbench_worker.timing.tracker import CATEGORIES, Record


@dataclass
class StepResult:
    """One training step's outcome, as tensors so GPU steps need no synchronisation.

    ``loss`` is the batch's mean loss (detached), ``samples`` the batch size and ``correct`` the
    number of correct top-1 predictions when the task has accuracy (else None).
    """

    loss: torch.Tensor
    samples: int
    correct: torch.Tensor | None = None


class TensorSums:
    """A report window's loss and correct-prediction sums, kept on the device: adding a step's
    result reads nothing on the host (``training.WindowSums``)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.loss_sum = torch.zeros((), dtype=torch.float64, device=device)
        self.correct: torch.Tensor | None = None
        self.samples = 0

    def add(self, result: StepResult) -> None:
        self.loss_sum.add_(result.loss, alpha=result.samples)
        if result.correct is not None:
            if self.correct is None:
                self.correct = torch.zeros((), dtype=torch.float64, device=self.device)
            self.correct.add_(result.correct)
        self.samples += result.samples

    def means(self) -> tuple[float, float | None]:
        samples = max(1, self.samples)
        top1 = 100.0 * float(self.correct) / samples if self.correct is not None else None
        return float(self.loss_sum) / samples, top1


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

    ctx: RunContext
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

    def train_mode(self) -> None:
        """The model in training mode before an epoch's steps (validation leaves it in eval)."""
        self.model.train()

    def window_sums(self) -> TensorSums:
        return TensorSums(self.ctx.device)

    def synchronize(self) -> None:
        if self.ctx.device.type == "cuda":
            torch.cuda.synchronize(self.ctx.device)

    def memory_peak_gib(self) -> float | None:
        """The peak of the GPU memory the rank's tensors (CUDA graphs' pools included) took."""
        if self.ctx.device.type != "cuda":
            return None
        return torch.cuda.max_memory_allocated(self.ctx.device) / 2**30


class PhasedTrainer(Trainer, Generic[StepT]):
    """A trainer whose step is one pass through MLBench's phases, each a method on a ``Step``.

    ``train_step`` runs ``begin_step`` (host-side settings such as the learning rate, and the
    tensors the step reads), the phases ``fwd_pass`` .. ``comp_metrics`` and ``end_step``. The
    phases may neither read tensor values on the host nor depend on Python values that change
    between steps: a CUDA graph (``mlbench_worker.devices.graphs``) replays what they did at capture.
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

    def graph_key(self, step: StepT) -> Hashable | None:
        """What a set of CUDA graphs is captured for (the shapes and dtypes of the step's inputs),
        or None to run this step eagerly: a task whose shapes vary bounds the graphs it keeps."""
        return tuple((tuple(t.shape), t.dtype) for t in step.inputs)

    def run_phases(self, step: StepT, record: Record | None) -> None:
        """The phases in order on ``step``, each stamped as it ends (eagerly)."""
        for name, run in self._phase_list:
            run(step)
            if record:
                record(name)

    def train_step(self, batch: Any, record: Record | None) -> StepResult:
        step = self.begin_step(batch)
        self.run_phases(step, record)
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
        lr = self.schedule.on_validation(metrics[wire.VAL_GLOBAL_LOSS], step)
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
    return {wire.VAL_GLOBAL_LOSS: loss_sum / count, wire.VAL_GLOBAL_PREC1: 100.0 * correct / count}
