"""The official task catalog as data: models, datasets, goals, default hyperparameters and policy.

Values follow MLBench's task descriptions (see ANCHORS.md). ``mlbench_worker.tasks`` holds the
code; this module only says what each task is and which knobs a spec may turn, so a result stays
comparable (MLPerf's rule: batch size and learning-rate schedule, nothing else). Pure stdlib.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

Backend = Literal["gloo", "nccl", "mpi"]
Precision = Literal["fp32", "bf16", "fp16", "amp"]
Direction = Literal["max", "min"]
LrScaling = Literal["none", "linear", "sqrt"]

ALL_BACKENDS: tuple[str, ...] = ("gloo", "nccl", "mpi")
ALL_PRECISIONS: tuple[str, ...] = ("fp32", "bf16", "fp16", "amp")
ALL_FRAMEWORKS: tuple[str, ...] = ("pytorch", "tensorflow")


@dataclass(frozen=True)
class TaskGoal:
    """A time-to-accuracy goal: the global validation metric and the thresholds to reach."""

    metric: str
    direction: Direction
    full: float
    light: float


@dataclass(frozen=True)
class TaskSweep:
    """A measurement task's sweep (0a): one point per message size and series, the size as step.

    Metrics are named ``<prefix><series>_<figure>`` (``allreduce_fp32_busbw``). Each point of
    ``count_figure`` is one size measured, so progress counts ``unit`` up to
    ``hyperparameters[size_param] x len(hyperparameters[series_param])``. The worker describes
    the sweep once in a ``wire.AllreduceSweep`` event (``latency_only`` when one rank moves no data).
    """

    prefix: str
    count_figure: str
    size_param: str
    series_param: str
    unit: str
    x_label: str
    charts: tuple[str, ...]  # charted when a run opens

    def owns(self, metric: str) -> bool:
        """Whether ``metric`` is a curve of this sweep (its x is a size, every point counts)."""
        return metric.startswith(self.prefix)

    def counts(self, metric: str) -> bool:
        """Whether each point of ``metric`` is one size measured."""
        return self.owns(metric) and metric.endswith("_" + self.count_figure)

    def total(self, hyperparameters: Mapping[str, Any]) -> int | None:
        """How many sizes the run measures in all (None when the plan does not say)."""
        sizes = int(hyperparameters.get(self.size_param) or 0)
        return sizes * max(1, len(hyperparameters.get(self.series_param) or ())) or None


@dataclass(frozen=True)
class TaskInfo:
    """One official task: what it trains, its goals, defaults and what a spec may change."""

    id: str
    name: str
    title: str
    model: str
    dataset: str
    goal: TaskGoal | None
    defaults: Mapping[str, Any]
    overridable: frozenset[str]
    backends: tuple[str, ...]
    precisions: tuple[str, ...]
    frameworks: tuple[str, ...] = ("pytorch",)
    lr_scaling: LrScaling = "none"
    choices: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)
    notes: str = ""
    sweep: TaskSweep | None = None  # measurement tasks without a goal
    no_cuda_graphs: str | None = None  # why the task's step cannot be captured in CUDA graphs

    @property
    def lr_linearly_scaled(self) -> bool:
        """True when the effective learning rate is ``base_lr * workers`` (MLBench's linear rule)."""
        return self.lr_scaling == "linear"


AUTO = "auto"
"""A switch's default when the worker picks per device (the spec may still say true or false)."""


def _ro(d: dict[str, Any]) -> Mapping[str, Any]:
    return MappingProxyType(d)


_OPTIMIZERS = ("centralized_sgd", "centralized_adam", "power_sgd")

TASKS: Mapping[str, TaskInfo] = _ro(
    {
        "0a": TaskInfo(
            id="0a",
            name="allreduce",
            title="All-reduce bandwidth and latency",
            model="none (collective sweep)",
            dataset="tensors of np.logspace(0, 8, 80) elements",
            goal=None,
            defaults=_ro(
                {
                    "sizes_min_exp": 0,
                    "sizes_max_exp": 8,
                    "num_sizes": 80,
                    "repetitions": 100,
                    "warmup": 10,
                    "dtypes": ["fp32", "fp16"],
                }
            ),
            overridable=frozenset(
                {"sizes_min_exp", "sizes_max_exp", "num_sizes", "repetitions", "warmup", "dtypes"}
            ),
            backends=ALL_BACKENDS,
            precisions=("fp32",),
            choices=_ro({"dtypes": ("fp32", "fp16", "bf16")}),
            notes="sizes = unique ints of np.logspace(sizes_min_exp, sizes_max_exp, num_sizes); "
            "fp16 is dropped on mpi (Open MPI has no fp16 reduction).",
            sweep=TaskSweep(
                prefix="allreduce_",
                count_figure="latency_p50",
                size_param="num_sizes",
                series_param="dtypes",
                unit="sizes",
                x_label="size (elements)",
                charts=("allreduce_fp32_busbw", "allreduce_fp16_busbw", "allreduce_fp32_latency_p50"),
            ),
            no_cuda_graphs="it measures all-reduce calls themselves and has no training step to capture",
        ),
        "1a": TaskInfo(
            id="1a",
            name="resnet20-cifar10",
            title="Image classification: ResNet-20 on CIFAR-10",
            model="ResNet-20 (He et al. 2015, v1)",
            dataset="CIFAR-10 (50k train / 10k val)",
            goal=TaskGoal(metric="val_global_Prec@1", direction="max", full=80.0, light=70.0),
            defaults=_ro(
                {
                    "batch_size": 128,
                    "max_epochs": 164,
                    "lr": 0.02,
                    "warmup_epochs": 0.0,
                    "plateau_patience": 2,
                    "plateau_factor": 0.5,
                    "momentum": 0.9,
                    "nesterov": True,
                    "weight_decay": 1e-4,
                    "optimizer": "centralized_sgd",
                    "aggregation": "by_model",
                    "powersgd_rank": 1,
                    "channels_last": AUTO,
                }
            ),
            overridable=frozenset(
                {
                    "batch_size",
                    "lr",
                    "warmup_epochs",
                    "plateau_patience",
                    "plateau_factor",
                    "max_epochs",
                    "optimizer",
                    "aggregation",
                    "powersgd_rank",
                    "channels_last",
                }
            ),
            backends=ALL_BACKENDS,
            precisions=ALL_PRECISIONS,
            frameworks=ALL_FRAMEWORKS,
            lr_scaling="linear",
            choices=_ro({"optimizer": _OPTIMIZERS, "aggregation": ("by_model", "by_layer")}),
            notes="batch_size is per worker; lr = 0.02*k with linear warm-up over log2(k) epochs; "
            "reduce on plateau of val loss (patience 2, factor 0.5); disjoint data per worker; "
            "channels_last 'auto' trains in channels_last memory layout on CPU (same math, "
            "1.3-1.5x faster convolutions there) and NCHW on GPU.",
        ),
        "2a": TaskInfo(
            id="2a",
            name="logreg-epsilon",
            title="Linear learning: L2 logistic regression on epsilon",
            model="logistic regression (L2)",
            dataset="epsilon (LIBSVM, 400k x 2000 dense)",
            goal=TaskGoal(metric="val_global_Prec@1", direction="max", full=89.0, light=80.0),
            defaults=_ro(
                {
                    "batch_size": 128,
                    "max_epochs": 164,
                    "lr": 4.0,
                    "plateau_patience": 2,
                    "plateau_factor": 0.5,
                    "l2": 2.5e-6,
                    "optimizer": "centralized_sgd",
                    "aggregation": "by_model",
                    "powersgd_rank": 1,
                }
            ),
            overridable=frozenset(
                {
                    "batch_size",
                    "lr",
                    "plateau_patience",
                    "plateau_factor",
                    "max_epochs",
                    "optimizer",
                    "aggregation",
                    "powersgd_rank",
                }
            ),
            backends=ALL_BACKENDS,
            precisions=("fp32", "bf16"),
            lr_scaling="linear",
            choices=_ro({"optimizer": _OPTIMIZERS, "aggregation": ("by_model", "by_layer")}),
            notes="batch_size is per worker; lr = 4*k; plain SGD (momentum 0); BCE + L2 2.5e-6.",
        ),
        "3a": TaskInfo(
            id="3a",
            name="awd-lstm-wikitext2",
            title="Language modelling: AWD-LSTM on WikiText-2",
            model="AWD-LSTM (3 layers, 400 emb, 1150 hidden, tied weights)",
            dataset="WikiText-2 (2,088,628 train tokens, vocab 33,278)",
            goal=TaskGoal(metric="val_global_Perplexity", direction="min", full=70.0, light=90.0),
            defaults=_ro(
                {
                    "batch_size": 80,
                    "bptt": 70,
                    "lr": 30.0,
                    "warmup_epochs": 0,
                    "weight_decay": 1.2e-6,
                    "clip": 0.25,
                    "nonmono": 5,
                    "alpha": 2.0,
                    "beta": 1.0,
                    "max_epochs": 750,
                    "emb_size": 400,
                    "hidden_size": 1150,
                    "num_layers": 3,
                    "dropout": 0.4,
                    "dropouth": 0.3,
                    "dropouti": 0.65,
                    "dropoute": 0.1,
                    "wdrop": 0.5,
                }
            ),
            overridable=frozenset({"batch_size", "lr", "warmup_epochs", "max_epochs"}),
            backends=ALL_BACKENDS,
            precisions=("fp32", "bf16", "amp"),
            lr_scaling="sqrt",
            notes="batch_size is sentences per worker; lr 30*seq_len/bptt per batch, warm-up from "
            "base_lr to lr = base_lr*sqrt(k) over warmup_epochs = 3*k epochs; averaged SGD after "
            "nonmono epochs without improvement.",
        ),
        "4a": TaskInfo(
            id="4a",
            name="gnmt-wmt16",
            title="Machine translation: GNMT on WMT16 EN-DE",
            model="GNMT (stacked residual LSTM with attention)",
            dataset="WMT16 EN-DE (train len <= 75, test <= 150)",
            goal=TaskGoal(metric="val_global_BLEU-Score", direction="max", full=24.0, light=20.0),
            defaults=_ro(
                {
                    "global_batch_size": 2048,
                    "update_freq": 1,
                    "lr": 2e-3,
                    "adam_betas": [0.9, 0.999],
                    "adam_eps": 1e-8,
                    "warmup_steps": 200,
                    "decay_start": 0.4,
                    "decay_interval": 0.05,
                    "decay_steps": 4,
                    "decay_factor": 0.5,
                    "label_smoothing": 0.1,
                    "clip": 5.0,
                    "loss_scale_init": 1024,
                    "loss_scale_factor": 2,
                    "loss_scale_max": 8192,
                    "loss_scale_window": 128,
                    "max_epochs": 8,
                    "max_len_train": 75,
                    "max_len_test": 150,
                    "beam_size": 5,
                }
            ),
            overridable=frozenset(
                {
                    "global_batch_size",
                    "update_freq",
                    "lr",
                    "warmup_steps",
                    "decay_start",
                    "decay_interval",
                    "decay_steps",
                    "decay_factor",
                    "max_epochs",
                }
            ),
            backends=ALL_BACKENDS,
            precisions=ALL_PRECISIONS,
            notes="global_batch_size in sentences is split over workers x update_freq (gradient "
            "accumulation); exponential warm-up to lr over warmup_steps, x decay_factor from "
            "decay_start of training every decay_interval, at most decay_steps times.",
            no_cuda_graphs="its length-bucketed batches change shape on almost every step and its encoder "
            "packs sequences by lengths read on the host",
        ),
        "4b": TaskInfo(
            id="4b",
            name="transformer-wmt17",
            title="Machine translation: Transformer (base) on WMT17 EN-DE",
            model="Transformer base (Vaswani et al. 2017)",
            dataset="WMT17 EN-DE (len <= 80)",
            goal=TaskGoal(metric="val_global_BLEU-Score", direction="max", full=25.0, light=20.0),
            defaults=_ro(
                {
                    "global_batch_tokens": 131072,
                    "update_freq": 1,
                    "lr": 1.976e-3,
                    "adam_betas": [0.9, 0.98],
                    "adam_eps": 1e-9,
                    "warmup_steps": 1000,
                    "label_smoothing": 0.1,
                    "loss_scale_init": 128,
                    "loss_scale_factor": 2,
                    "loss_scale_window": 2000,
                    "max_epochs": 10,
                    "max_len": 80,
                    "beam_size": 4,
                }
            ),
            overridable=frozenset({"global_batch_tokens", "update_freq", "lr", "warmup_steps", "max_epochs"}),
            backends=ALL_BACKENDS,
            precisions=ALL_PRECISIONS,
            notes="global_batch_tokens (2^17) is split over workers x update_freq; linear warm-up "
            "to lr over warmup_steps, then inverse-sqrt decay.",
            no_cuda_graphs="its token-bucketed batches change shape on almost every step (a graph per "
            "shape would spend more time capturing than it saves)",
        ),
    }
)

_BY_NAME: Mapping[str, TaskInfo] = _ro({t.name: t for t in TASKS.values()})

TASK_KEYS: tuple[str, ...] = tuple(TASKS) + tuple(_BY_NAME)


def get_task(key: str) -> TaskInfo | None:
    """The task with this id (``1a``) or name (``resnet20-cifar10``), case-insensitive; None if unknown."""
    k = key.strip().lower()
    return TASKS.get(k) or _BY_NAME.get(k)


SWEEPS: tuple[TaskSweep, ...] = tuple(t.sweep for t in TASKS.values() if t.sweep is not None)


def sweep_of(metric: str) -> TaskSweep | None:
    """The sweep whose curve ``metric`` is (``allreduce_fp32_busbw``: 0a's), or None."""
    return next((sweep for sweep in SWEEPS if sweep.owns(metric)), None)


def default_charts(task_id: str, goal_metric: str | None) -> list[str]:
    """Metrics charted when a run opens: a sweep's curves, else loss, the goal metric, step time."""
    task = get_task(task_id)
    if task is not None and task.sweep is not None:
        return list(task.sweep.charts)
    return ["train_loss", *([goal_metric] if goal_metric else []), "step_time"]


def scaled_hyperparameters(task: TaskInfo, workers: int, overrides: Mapping[str, Any]) -> dict[str, Any]:
    """Effective hyperparameters for ``workers`` ranks: defaults, then scaling rules, then overrides.

    ``lr`` given in a spec is the per-worker base rate and is scaled like the default; explicit
    ``warmup_epochs`` wins over the derived one. ``base_lr`` always records the unscaled rate.
    """
    hp: dict[str, Any] = {k: (list(v) if isinstance(v, list) else v) for k, v in task.defaults.items()}
    hp.update({k: (list(v) if isinstance(v, list) else v) for k, v in overrides.items()})
    k = max(1, workers)
    if task.lr_scaling != "none":
        base = float(hp["lr"])
        hp["base_lr"] = base
        if task.lr_scaling == "linear":
            hp["lr"] = round(base * k, 12)
            if "warmup_epochs" in task.defaults and "warmup_epochs" not in overrides:
                hp["warmup_epochs"] = float(math.log2(k))
        else:  # sqrt: AWD-LSTM warms up from base_lr to base_lr*sqrt(k) over 3k epochs
            hp["lr"] = round(base * math.sqrt(k), 12)
            if "warmup_epochs" not in overrides:
                hp["warmup_epochs"] = 3 * k if k > 1 else 0
    return hp
