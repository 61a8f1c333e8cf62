"""Each official task's hyperparameters, declared once: type, official default, bounds and policy.

Stdlib only. The worker parses its config into these frozen dataclasses (``parse_hyperparameters``)
and reads attributes; the engine derives the task catalog's defaults, the spec's checks and the
JSON Schema from the same declarations (``mlbench_tui.spec.hyperparameters``). A field's
``metadata["knob"]`` is its ``Knob`` (``mlbench_worker.knobs``): description, policy and bounds.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, ClassVar, Literal, Self

from mlbench_worker.hyperparams_base import (
    MAX_BATCH,
    MAX_EPOCHS,
    MAX_LR,
    MAX_STEPS,
    MAX_TIMING_WARMUP_STEPS,
    MAX_WARMUP_EPOCHS,
    Aggregation,
    AllReduceDtype,
    LossScaling,
    Optimizer,
    OptimizerSettings,
    TaskHyperparameters,
    TrainingHyperparameters,
    optimizer_graph_problems,
)
from mlbench_worker.knobs import (
    ALL_POLICIES,
    HyperparameterError,
    HyperparameterProblem,
    Policy,
    check_values,
    knob,
    knobs,
)


@dataclass(frozen=True)
class AllReduce(TaskHyperparameters):
    """Task 0a: all-reduce latency and bandwidth over a sweep of message sizes."""

    TASK: ClassVar[str] = "0a"

    sizes_min_exp: int = knob(
        0, "Smallest message: 10^sizes_min_exp elements.", "override", ge=0, le=9, closed=True
    )
    sizes_max_exp: int = knob(
        8, "Largest message: 10^sizes_max_exp elements.", "override", ge=0, le=9, closed=True
    )
    num_sizes: int = knob(
        80, "Sizes in np.logspace(sizes_min_exp, sizes_max_exp).", "override", ge=1, le=1000, closed=True
    )
    repetitions: int = knob(100, "Timed all-reduces per size.", "override", ge=1, le=1_000_000, closed=True)
    warmup: int = knob(10, "Untimed all-reduces per size before the timed ones.", "override", ge=0, le=10_000)
    dtypes: tuple[AllReduceDtype, ...] = knob(
        ("fp32", "fp16"), "Element types swept; fp16 is dropped on mpi (no fp16 reduction).", "override"
    )

    def problems(self) -> Iterator[HyperparameterProblem]:
        if self.sizes_min_exp > self.sizes_max_exp:
            yield HyperparameterProblem(
                "sizes_min_exp",
                f"sizes_min_exp ({self.sizes_min_exp}) must not exceed sizes_max_exp ({self.sizes_max_exp})",
            )
        if not self.dtypes:
            yield HyperparameterProblem("dtypes", "hyperparameter 'dtypes' must not be empty")
        repeated = sorted({d for d in self.dtypes if self.dtypes.count(d) > 1})
        if repeated:
            yield HyperparameterProblem(
                "dtypes",
                f"hyperparameter 'dtypes' lists {', '.join(repeated)} more than once: each is swept once",
            )

    def backend_problems(self, backend: str, given: frozenset[str]) -> Iterator[HyperparameterProblem]:
        if backend == "mpi" and "dtypes" in given and "fp16" in self.dtypes:
            yield HyperparameterProblem(
                "dtypes",
                "fp16 all-reduce is not supported on mpi: remove fp16 from hyperparameters.dtypes "
                "or use backend gloo or nccl",
            )

    def sweep_points(self) -> int | None:
        """One point per size and dtype."""
        return self.num_sizes * len(self.dtypes)

    def on_backend(self, backend: str) -> Self:
        if backend != "mpi":
            return self
        return dataclasses.replace(self, dtypes=tuple(d for d in self.dtypes if d != "fp16"))


@dataclass(frozen=True)
class ResNet20(TrainingHyperparameters):
    """Task 1a: ResNet-20 on CIFAR-10, SGD with Nesterov momentum, LR scaled linearly with workers."""

    TASK: ClassVar[str] = "1a"

    batch_size: int = knob(128, "Samples per worker per step.", "override", ge=1, le=MAX_BATCH)
    max_epochs: int = knob(
        164, "Epochs before training stops without reaching the goal.", "override", ge=1, le=MAX_EPOCHS
    )
    lr: float = knob(
        0.02, "Learning rate per worker; the run uses lr x workers.", "override", gt=0, le=MAX_LR
    )
    warmup_epochs: float = knob(
        0.0, "Linear warm-up epochs; default log2(workers).", "override", ge=0, le=MAX_WARMUP_EPOCHS
    )
    plateau_patience: int = knob(
        2, "Epochs without val-loss improvement before a decay.", "override", gt=0, le=MAX_EPOCHS
    )
    plateau_factor: float = knob(0.5, "LR factor on a plateau.", "override", gt=0, lt=1)
    momentum: float = knob(0.9, "SGD momentum.", ge=0)
    nesterov: bool = knob(True, "Nesterov momentum.")
    weight_decay: float = knob(1e-4, "L2 weight decay.", ge=0)
    optimizer: Optimizer = knob("centralized_sgd", "Distributed optimizer.", "override")
    aggregation: Aggregation = knob(
        "by_model", "Gradient all-reduce: one flat buffer or per layer.", "override"
    )
    powersgd_rank: int = knob(1, "Rank of power_sgd's low-rank gradients.", "override", gt=0, le=1024)
    channels_last: Literal["auto"] | bool = knob(
        "auto", "Memory layout: auto is channels_last on CPU, NCHW on GPU.", "override"
    )
    base_lr: float | None = knob(
        None, "Unscaled learning rate (the warm-up's start).", "derived", gt=0, le=MAX_LR
    )

    def graph_problems(self) -> Iterator[HyperparameterProblem]:
        return optimizer_graph_problems(self.optimizer)

    def optimizer_settings(self) -> OptimizerSettings:
        """SGD with Nesterov momentum and weight decay, as MLBench's task 1a."""
        return OptimizerSettings(
            lr=self.lr,
            momentum=self.momentum,
            nesterov=self.nesterov,
            weight_decay=self.weight_decay,
            aggregation=self.aggregation,
            overlap_comm=bool(self.overlap_comm),
            bucket_mb=self.bucket_mb,
            powersgd_rank=self.powersgd_rank,
        )

    def for_workers(self, workers: int, given: frozenset[str]) -> Self:
        """MLBench's linear rule: lr x k, warmed up from lr over log2(k) epochs."""
        k = max(1, workers)
        warmup = self.warmup_epochs if "warmup_epochs" in given else float(math.log2(k))
        return dataclasses.replace(self, lr=round(self.lr * k, 12), base_lr=self.lr, warmup_epochs=warmup)


LocalUpdate = Literal["lars", "sgd"]
GradientAveraging = Literal["centralized_sgd", "power_sgd"]
LARS_MIN_GLOBAL_BATCH = 2048
"""Task 1b's ``opt_name: auto`` takes LARS from this global batch on, SGD below it: the smallest
global batch MLPerf's reference publishes LARS hyperparameters for."""


def _multiple_of(value: float, unit: float) -> bool:
    """Whether ``value`` is an integer multiple of ``unit``, as MLPerf's checker tests it."""
    ratio = value / unit
    return abs(round(ratio) - ratio) < 1e-5


def _power_of_two_multiple(value: float, unit: float) -> bool:
    """Whether ``value`` is ``unit * 2**N`` for an integer N (MLPerf's weight-decay rule)."""
    return value > 0 and _multiple_of(math.log2(value / unit), 1.0)


@dataclass(frozen=True)
class ImageNetRecipe:
    """Task 1b's optimizer and schedule for one global batch: ``ResNet50.recipe`` fills what the
    spec left to the reference's choice."""

    opt_name: LocalUpdate
    lr: float
    warmup_epochs: float
    max_epochs: int
    weight_decay: float


@dataclass(frozen=True)
class ResNet50(TrainingHyperparameters):
    """Task 1b: ResNet-50 v1.5 on ImageNet as MLPerf Training runs it: LARS for large global batches
    or SGD with momentum, linear warm-up from 0 then polynomial decay, label smoothing."""

    TASK: ClassVar[str] = "1b"

    batch_size: int = knob(256, "Samples per worker per step.", "override", ge=1)
    opt_name: Literal["auto", "lars", "sgd"] = knob(
        "auto",
        "Local update: lars, sgd (with momentum), or auto: lars from a global batch of 2048.",
        "override",
    )
    lr: float | None = knob(
        None,
        "Peak learning rate after warm-up; default LARS 10 (25 from a global batch of 16k, 31.2 "
        "from 32k), SGD 0.1 x global batch / 256. SGD's is a multiple of 0.001.",
        "override",
        gt=0,
    )
    warmup_epochs: float | None = knob(
        None, "Linear warm-up from 0; default 5 (25 for LARS from 32k, 0 for SGD at 256).", "override", ge=0
    )
    max_epochs: int | None = knob(
        None,
        "Epochs the polynomial decay spans, where training stops without the goal; default LARS 41, SGD 90.",
        "override",
        ge=1,
    )
    weight_decay: float | None = knob(
        None, "Weight decay, 1e-4 x 2^N; default LARS 2e-4, SGD 1e-4.", "override", gt=0
    )
    label_smoothing: float = knob(0.1, "Label smoothing of the loss: 0 or 0.1.", "override", ge=0, lt=1)
    zero_init_residual: bool = knob(
        True, "Start each block's last BatchNorm at weight 0 (the block as identity).", "override"
    )
    channels_last: Literal["auto"] | bool = knob(
        "auto", "Memory layout: auto is channels_last on every device.", "override"
    )
    optimizer: GradientAveraging = knob(
        "centralized_sgd", "Gradient averaging: all-reduce (centralized_sgd) or power_sgd.", "override"
    )
    aggregation: Aggregation = knob(
        "by_model", "Gradient all-reduce: one flat buffer or per layer.", "override"
    )
    powersgd_rank: int = knob(4, "Rank of power_sgd's low-rank gradients.", "override", gt=0)
    momentum: float = knob(0.9, "Momentum (MLPerf fixes 0.9 below a global batch of 32k).", ge=0, lt=1)
    end_lr: float = knob(1e-4, "Learning rate at the end of the polynomial decay.", gt=0)
    poly_power: float = knob(2.0, "Power of the polynomial decay.", gt=0)
    lars_eta: float = knob(1e-3, "LARS trust coefficient (eta).", gt=0)
    lars_epsilon: float = knob(0.0, "LARS epsilon in the trust ratio's denominator.", ge=0)
    image_size: int = knob(224, "Training crop and evaluation image size.", ge=32)
    eval_resize: int = knob(
        256, "Shorter side an evaluation image is resized to before its centre crop.", ge=32
    )
    num_classes: int = knob(1000, "Classes (ImageNet-1k).", ge=2)

    def problems(self) -> Iterator[HyperparameterProblem]:
        """MLPerf's constraints on its tunable values (training rules, ResNet rows)."""
        if self.weight_decay is not None and not _power_of_two_multiple(self.weight_decay, 1e-4):
            yield HyperparameterProblem(
                "weight_decay",
                "hyperparameter 'weight_decay' must be 1e-4 x 2^N (MLPerf's rule), "
                f"got {self.weight_decay:g}",
                hint="use 1e-4, 2e-4, 5e-5, ...",
            )
        if self.label_smoothing not in (0.0, 0.1):
            yield HyperparameterProblem(
                "label_smoothing",
                "hyperparameter 'label_smoothing' must be 0 or 0.1 (MLPerf's rule), "
                f"got {self.label_smoothing:g}",
            )
        if self.lr is not None and self.opt_name != "lars" and not _multiple_of(self.lr, 1e-3):
            yield HyperparameterProblem(
                "lr",
                f"hyperparameter 'lr' must be a multiple of 0.001 for SGD (MLPerf's rule), got {self.lr:g}",
                hint="round it, or set opt_name: lars (any constant)",
            )

    def graph_problems(self) -> Iterator[HyperparameterProblem]:
        return optimizer_graph_problems(self.optimizer)

    def recipe(self, workers: int) -> ImageNetRecipe:
        """The optimizer and schedule of a run of ``workers`` ranks: the spec's values, the rest
        the reference's for the global batch (MLPerf's ``lars_util.py`` and README for LARS; Goyal
        et al. 2017's linear rule for SGD)."""
        batch = self.batch_size * max(1, workers)
        opt: LocalUpdate = (
            self.opt_name
            if self.opt_name != "auto"
            else ("lars" if batch >= LARS_MIN_GLOBAL_BATCH else "sgd")
        )
        if opt == "lars":
            lr, warmup = (10.0, 5.0) if batch < 16384 else (25.0, 5.0) if batch < 32768 else (31.2, 25.0)
            epochs, decay = 41, 2e-4
        else:
            lr, warmup = max(0.001, round(0.1 * batch / 256, 3)), (5.0 if batch > 256 else 0.0)
            epochs, decay = 90, 1e-4
        return ImageNetRecipe(
            opt_name=opt,
            lr=self.lr if self.lr is not None else lr,
            warmup_epochs=self.warmup_epochs if self.warmup_epochs is not None else warmup,
            max_epochs=self.max_epochs if self.max_epochs is not None else epochs,
            weight_decay=self.weight_decay if self.weight_decay is not None else decay,
        )

    def for_workers(self, workers: int, given: frozenset[str]) -> Self:
        """The recipe for the run's global batch written into the values (what the plan records)."""
        recipe = self.recipe(workers)
        return dataclasses.replace(self, **dataclasses.asdict(recipe))

    def optimizer_settings(self, workers: int) -> OptimizerSettings:
        """LARS or SGD with momentum (no Nesterov, as MLPerf's reference); BatchNorm parameters and
        biases take neither weight decay nor LARS's trust ratio (the reference's skip list)."""
        recipe = self.recipe(workers)
        return OptimizerSettings(
            lr=recipe.lr,
            momentum=self.momentum,
            weight_decay=recipe.weight_decay,
            aggregation=self.aggregation,
            overlap_comm=bool(self.overlap_comm),
            bucket_mb=self.bucket_mb,
            powersgd_rank=self.powersgd_rank,
            local_update=recipe.opt_name,
            lars_eta=self.lars_eta,
            lars_epsilon=self.lars_epsilon,
            decay_vectors=False,
        )

    def steps_per_epoch(self, train_samples: int, workers: int) -> int:
        """Optimizer steps per epoch: each rank's equal share of the training set in whole batches."""
        return (train_samples // max(1, workers)) // self.batch_size

    def decay_steps(self, train_samples: int, workers: int) -> int:
        """The polynomial decay's length in steps, as MLPerf's reference counts it (train steps
        minus warm-up steps, plus one)."""
        recipe = self.recipe(workers)
        per_epoch = self.steps_per_epoch(train_samples, workers)
        return recipe.max_epochs * per_epoch - round(recipe.warmup_epochs * per_epoch) + 1


@dataclass(frozen=True)
class LogReg(TrainingHyperparameters):
    """Task 2a: L2-regularised logistic regression on epsilon, plain SGD, LR scaled linearly."""

    TASK: ClassVar[str] = "2a"

    timing_warmup_steps: int = knob(
        50,
        "First training steps left out of the step-time figures (micro-steps: more of them).",
        "override",
        ge=0,
        le=MAX_TIMING_WARMUP_STEPS,
    )
    batch_size: int = knob(128, "Samples per worker per step.", "override", ge=1, le=MAX_BATCH)
    max_epochs: int = knob(
        164, "Epochs before training stops without reaching the goal.", "override", ge=1, le=MAX_EPOCHS
    )
    lr: float = knob(4.0, "Learning rate per worker; the run uses lr x workers.", "override", gt=0, le=MAX_LR)
    plateau_patience: int = knob(
        2, "Epochs without val-loss improvement before a decay.", "override", gt=0, le=MAX_EPOCHS
    )
    plateau_factor: float = knob(0.5, "LR factor on a plateau.", "override", gt=0, lt=1)
    l2: float = knob(2.5e-6, "L2 regularisation of the loss.", ge=0)
    optimizer: Optimizer = knob("centralized_sgd", "Distributed optimizer.", "override")
    aggregation: Aggregation = knob(
        "by_model", "Gradient all-reduce: one flat buffer or per layer.", "override"
    )
    powersgd_rank: int = knob(1, "Rank of power_sgd's low-rank gradients.", "override", gt=0, le=1024)
    base_lr: float | None = knob(None, "Unscaled learning rate.", "derived", gt=0, le=MAX_LR)

    def graph_problems(self) -> Iterator[HyperparameterProblem]:
        return optimizer_graph_problems(self.optimizer)

    def optimizer_settings(self) -> OptimizerSettings:
        """Plain SGD (no momentum) with the L2 term as weight decay, as MLBench's task 2a."""
        return OptimizerSettings(
            lr=self.lr,
            weight_decay=self.l2,
            aggregation=self.aggregation,
            overlap_comm=bool(self.overlap_comm),
            bucket_mb=self.bucket_mb,
            powersgd_rank=self.powersgd_rank,
        )

    def for_workers(self, workers: int, given: frozenset[str]) -> Self:
        """MLBench's linear rule: lr x k."""
        return dataclasses.replace(self, lr=round(self.lr * max(1, workers), 12), base_lr=self.lr)


@dataclass(frozen=True)
class AwdLstm(TrainingHyperparameters):
    """Task 3a: AWD-LSTM on WikiText-2, SGD then averaged SGD, LR scaled by sqrt(workers)."""

    TASK: ClassVar[str] = "3a"
    optimizer: ClassVar[Optimizer] = "centralized_sgd"

    batch_size: int = knob(80, "Sentences per worker per step.", "override", ge=1, le=MAX_BATCH)
    bptt: int = knob(70, "Mean back-propagation-through-time length.", ge=1)
    lr: float = knob(
        30.0,
        "Learning rate per worker; the run warms up to lr x sqrt(workers).",
        "override",
        gt=0,
        le=MAX_LR,
    )
    warmup_epochs: float = knob(
        0.0, "Warm-up epochs; default 3 x workers.", "override", ge=0, le=MAX_WARMUP_EPOCHS
    )
    weight_decay: float = knob(1.2e-6, "L2 weight decay.", ge=0)
    clip: float = knob(0.25, "Gradient norm clip.", gt=0)
    nonmono: int = knob(5, "Epochs without improvement before averaged SGD.", gt=0)
    alpha: float = knob(2.0, "Activation regularisation (AR).", ge=0)
    beta: float = knob(1.0, "Temporal activation regularisation (TAR).", ge=0)
    max_epochs: int = knob(
        750, "Epochs before training stops without reaching the goal.", "override", ge=1, le=MAX_EPOCHS
    )
    emb_size: int = knob(400, "Embedding size.", ge=1)
    hidden_size: int = knob(1150, "LSTM hidden size.", ge=1)
    num_layers: int = knob(3, "LSTM layers.", ge=1)
    dropout: float = knob(0.4, "Output dropout.", ge=0, lt=1)
    dropouth: float = knob(0.3, "Dropout between LSTM layers.", ge=0, lt=1)
    dropouti: float = knob(0.65, "Input embedding dropout.", ge=0, lt=1)
    dropoute: float = knob(0.1, "Embedding (word) dropout.", ge=0, lt=1)
    wdrop: float = knob(0.5, "DropConnect on the hidden-to-hidden weights.", ge=0, lt=1)
    base_lr: float | None = knob(
        None, "Unscaled learning rate (the warm-up's start).", "derived", gt=0, le=MAX_LR
    )

    def optimizer_settings(self) -> OptimizerSettings:
        """Plain SGD (averaged SGD later, in the task), weight decay as AWD-LSTM."""
        return OptimizerSettings(
            lr=self.lr,
            weight_decay=self.weight_decay,
            overlap_comm=bool(self.overlap_comm),
            bucket_mb=self.bucket_mb,
        )

    def for_workers(self, workers: int, given: frozenset[str]) -> Self:
        """AWD-LSTM's rule: warm up from lr to lr x sqrt(k) over 3k epochs (none on one rank)."""
        k = max(1, workers)
        warmup = self.warmup_epochs if "warmup_epochs" in given else float(3 * k if k > 1 else 0)
        return dataclasses.replace(
            self, lr=round(self.lr * math.sqrt(k), 12), base_lr=self.lr, warmup_epochs=warmup
        )


@dataclass(frozen=True)
class Translation(TrainingHyperparameters):
    """What both translation tasks share beyond their own fields: Adam and beam-search batches."""

    optimizer: ClassVar[Optimizer] = "centralized_adam"

    eval_batch_size: int = knob(64, "Sentences per beam-search batch.", "tuning", ge=1, le=MAX_BATCH)


def _adam(hp: Gnmt | Transformer) -> OptimizerSettings:
    return OptimizerSettings(
        lr=hp.lr,
        adam_betas=hp.adam_betas,
        adam_eps=hp.adam_eps,
        overlap_comm=bool(hp.overlap_comm),
        bucket_mb=hp.bucket_mb,
    )


@dataclass(frozen=True)
class Gnmt(Translation):
    """Task 4a: GNMT on WMT16 EN-DE, exponential warm-up then step decay."""

    TASK: ClassVar[str] = "4a"

    global_batch_size: int = knob(2048, "Sentences per update, over all workers.", "override", ge=1, le=2**26)
    update_freq: int = knob(1, "Gradient accumulation steps per update.", "override", ge=1, le=2**16)
    lr: float = knob(2e-3, "Peak learning rate.", "override", gt=0, le=MAX_LR)
    adam_betas: tuple[float, float] = knob((0.9, 0.999), "Adam's beta1 and beta2.")
    adam_eps: float = knob(1e-8, "Adam's epsilon.", gt=0)
    warmup_steps: int = knob(200, "Exponential warm-up steps from 0 to lr.", "override", ge=0, le=MAX_STEPS)
    decay_start: float = knob(0.4, "Fraction of training when the decay starts.", "override", gt=0, le=1)
    decay_interval: float = knob(0.05, "Fraction of training between decays.", "override", gt=0, le=1)
    decay_steps: int = knob(4, "Most decays.", "override", gt=0, le=1000)
    decay_factor: float = knob(0.5, "LR factor at each decay.", "override", gt=0, lt=1)
    label_smoothing: float = knob(0.1, "Label smoothing of the loss.", ge=0, lt=1)
    clip: float = knob(5.0, "Gradient norm clip.", gt=0)
    loss_scale_init: float = knob(1024, "Initial fp16 loss scale.", gt=0)
    loss_scale_factor: float = knob(2, "Loss-scale growth and back-off factor.", gt=1)
    loss_scale_max: float | None = knob(8192, "Largest loss scale.", gt=0)
    loss_scale_window: int = knob(128, "Steps without overflow before the scale grows.", ge=1)
    max_epochs: int = knob(
        8, "Epochs before training stops without reaching the goal.", "override", ge=1, le=MAX_EPOCHS
    )
    max_len_train: int = knob(75, "Longest training sentence in tokens.", ge=1)
    max_len_test: int = knob(150, "Longest test sentence in tokens.", ge=1)
    beam_size: int = knob(5, "Beam width of the BLEU decoding.", ge=1)

    def length_limits(self) -> tuple[int, int]:
        """Longest train and test sentences."""
        return self.max_len_train, self.max_len_test

    def world_problems(self, workers: int) -> Iterator[HyperparameterProblem]:
        """Every micro-batch of every rank holds at least one sentence."""
        parts = workers * self.update_freq
        if self.global_batch_size < parts:
            yield HyperparameterProblem(
                "global_batch_size",
                f"global_batch_size {self.global_batch_size} is split over {workers} workers x update_freq "
                f"{self.update_freq} = {parts} micro-batches: some would hold no sentence",
                hint=f"raise global_batch_size to at least {parts}, or lower workers or update_freq",
            )

    def optimizer_settings(self) -> OptimizerSettings:
        """Adam, as MLBench's task 4a."""
        return _adam(self)

    def loss_scaling(self) -> LossScaling:
        return LossScaling(
            self.loss_scale_init, self.loss_scale_factor, self.loss_scale_window, self.loss_scale_max
        )


@dataclass(frozen=True)
class Transformer(Translation):
    """Task 4b: Transformer base on WMT17 EN-DE, linear warm-up then inverse-sqrt decay."""

    TASK: ClassVar[str] = "4b"

    global_batch_tokens: int = knob(
        131072, "Tokens per update, over all workers.", "override", ge=1, le=2**34
    )
    update_freq: int = knob(1, "Gradient accumulation steps per update.", "override", ge=1, le=2**16)
    lr: float = knob(1.976e-3, "Peak learning rate.", "override", gt=0, le=MAX_LR)
    adam_betas: tuple[float, float] = knob((0.9, 0.98), "Adam's beta1 and beta2.")
    adam_eps: float = knob(1e-9, "Adam's epsilon.", gt=0)
    warmup_steps: int = knob(1000, "Linear warm-up steps to lr.", "override", ge=0, le=MAX_STEPS)
    label_smoothing: float = knob(0.1, "Label smoothing of the loss.", ge=0, lt=1)
    loss_scale_init: float = knob(128, "Initial fp16 loss scale.", gt=0)
    loss_scale_factor: float = knob(2, "Loss-scale growth and back-off factor.", gt=1)
    loss_scale_window: int = knob(2000, "Steps without overflow before the scale grows.", ge=1)
    max_epochs: int = knob(
        10, "Epochs before training stops without reaching the goal.", "override", ge=1, le=MAX_EPOCHS
    )
    max_len: int = knob(80, "Longest sentence in tokens.", ge=1)
    beam_size: int = knob(4, "Beam width of the BLEU decoding.", ge=1)
    clip: float = knob(
        0.0, "Gradient norm clip; 0: none (MLBench's 4b does not clip).", "tuning", ge=0, le=1e6
    )

    def length_limits(self) -> tuple[int, int]:
        """Longest train and test sentences (one limit for both)."""
        return self.max_len, self.max_len

    def world_problems(self, workers: int) -> Iterator[HyperparameterProblem]:
        """Every micro-batch of every rank holds the longest sentence."""
        parts = workers * self.update_freq
        per_part = self.global_batch_tokens // parts
        if per_part < self.max_len:
            yield HyperparameterProblem(
                "global_batch_tokens",
                f"global_batch_tokens {self.global_batch_tokens} split over {workers} workers x update_freq "
                f"{self.update_freq} leaves {per_part} tokens per micro-batch, fewer than the longest "
                f"sentence ({self.max_len})",
                hint=f"raise global_batch_tokens to at least {parts * self.max_len}, or lower workers or "
                "update_freq",
            )

    def optimizer_settings(self) -> OptimizerSettings:
        """Adam, as MLBench's task 4b."""
        return _adam(self)

    def loss_scaling(self) -> LossScaling:
        return LossScaling(self.loss_scale_init, self.loss_scale_factor, self.loss_scale_window)


HYPERPARAMETERS: Mapping[str, type[TaskHyperparameters]] = MappingProxyType(
    {cls.TASK: cls for cls in (AllReduce, ResNet20, ResNet50, LogReg, AwdLstm, Gnmt, Transformer)}
)
"""Task id -> its hyperparameters."""

AnyHyperparameters = AllReduce | ResNet20 | ResNet50 | LogReg | AwdLstm | Gnmt | Transformer


def check_hyperparameters(
    task: str, values: Mapping[str, Any], policies: frozenset[Policy]
) -> tuple[dict[str, Any], list[HyperparameterProblem]]:
    """``values`` checked against task ``task``'s declarations (see ``knobs.check_values``)."""
    return check_values(HYPERPARAMETERS[task], task, values, policies)


def parse_hyperparameters(task: str, values: Mapping[str, Any]) -> TaskHyperparameters:
    """The task's typed hyperparameters from a plan's values (any policy; the rest default).

    Raises ``HyperparameterError`` naming every unknown key, wrong type and out-of-range value; a task
    this worker does not know has none (its registry says so when the run starts)."""
    if task not in HYPERPARAMETERS:
        return TaskHyperparameters()
    typed, problems = check_hyperparameters(task, values, ALL_POLICIES)
    if problems:
        raise HyperparameterError(task, problems)
    made = HYPERPARAMETERS[task](**typed)
    problems = list(made.problems())
    if problems:
        raise HyperparameterError(task, problems)
    return made


def plan_values(hp: TaskHyperparameters) -> dict[str, Any]:
    """The values a plan records (JSON data, tuning knobs and unset derived values left out)."""
    out: dict[str, Any] = {}
    for name, spec in knobs(type(hp)).items():
        value = getattr(hp, name)
        if spec.policy == "tuning" or (spec.policy == "derived" and value is None):
            continue
        out[name] = list(value) if isinstance(value, tuple) else value
    return out
