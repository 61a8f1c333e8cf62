"""The official task catalog as data: models, datasets, goals, and each task's hyperparameters.

Values follow MLBench's task descriptions (see ANCHORS.md). ``mlbench_worker.tasks`` holds the
code; this module only says what each task is. Each task's hyperparameters (defaults, bounds, which
knobs a spec may turn so a result stays comparable) are declared once, as the worker's dataclasses
in ``mlbench_worker.hyperparams`` (stdlib, like this module).
"""

from __future__ import annotations

import math
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal

from mlbench_worker import hyperparams as hps
from mlbench_worker import knobs as kn
from mlbench_worker import wire
from mlbench_worker.data.options import DATA_OPTIONS, DataOptions

Backend = Literal["gloo", "nccl", "mpi"]
Precision = Literal["fp32", "bf16", "fp16", "amp"]
Direction = Literal["max", "min"]
LrScaling = Literal["none", "linear", "sqrt"]

ALL_BACKENDS: tuple[str, ...] = ("gloo", "nccl", "mpi")
ALL_PRECISIONS: tuple[str, ...] = ("fp32", "bf16", "fp16", "amp")
ALL_FRAMEWORKS: tuple[str, ...] = ("pytorch", "tensorflow")


@dataclass(frozen=True)
class GoalMetric:
    """A global validation metric a goal may watch: the direction that improves it and the values
    it can take (a goal outside them is never reached, one at the far end is met untrained)."""

    direction: Direction
    lowest: float
    highest: float
    what: str


GOAL_METRICS: Mapping[str, GoalMetric] = MappingProxyType(
    {
        wire.VAL_GLOBAL_PREC1: GoalMetric("max", 0.0, 100.0, "top-1 accuracy in percent"),
        wire.VAL_GLOBAL_PERPLEXITY: GoalMetric("min", 1.0, math.inf, "perplexity"),
        wire.VAL_GLOBAL_BLEU: GoalMetric("max", 0.0, 100.0, "BLEU"),
        wire.VAL_GLOBAL_LOSS: GoalMetric("min", 0.0, math.inf, "the validation loss"),
    }
)


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
    ``count_figure`` is one size measured, so progress counts ``unit`` up to the hyperparameters'
    ``sweep_points()``. The worker describes the sweep once in a ``wire.AllreduceSweep`` event
    (``latency_only`` when one rank moves no data).
    """

    prefix: str
    count_figure: str
    unit: str
    x_label: str
    charts: tuple[str, ...]  # charted when a run opens

    def owns(self, metric: str) -> bool:
        """Whether ``metric`` is a curve of this sweep (its x is a size, every point counts)."""
        return metric.startswith(self.prefix)

    def counts(self, metric: str) -> bool:
        """Whether each point of ``metric`` is one size measured."""
        return self.owns(metric) and metric.endswith("_" + self.count_figure)

    def total(self, hyperparameters: hps.TaskHyperparameters) -> int | None:
        """How many sizes the run measures in all (None when the task does not sweep)."""
        return hyperparameters.sweep_points()


@dataclass(frozen=True)
class TaskInfo:
    """One official task: what it trains, its goals, defaults and what a spec may change."""

    id: str
    name: str
    title: str
    model: str
    dataset: str
    goal: TaskGoal | None
    hyperparameters: type[hps.TaskHyperparameters]
    backends: tuple[str, ...]
    precisions: tuple[str, ...]
    frameworks: tuple[str, ...] = ("pytorch",)
    lr_scaling: LrScaling = "none"
    notes: str = ""
    sweep: TaskSweep | None = None  # measurement tasks without a goal
    no_cuda_graphs: str | None = None  # why the task's step cannot be captured in CUDA graphs
    reads_data: bool = True  # False: the task generates its inputs (0a) and a spec names no dataset
    batch_unit: str = "samples"  # what batch_size counts, as MLPerf's log names it
    attention: bool = False  # the model has attention (MLPerf's lowest_numerical_precision_in_attn)
    template_max_time: str = "2h"  # the max_time `mlbench spec TASK` writes into a new spec
    synthetic_sizes: tuple[str, ...] = ()  # hyperparameters a synthetic run takes from its data options

    @property
    def goal_metrics(self) -> tuple[str, ...]:
        """The global metrics this task reports that a goal may watch: its goal's and the loss."""
        return () if self.goal is None else (self.goal.metric, wire.VAL_GLOBAL_LOSS)

    @property
    def lr_linearly_scaled(self) -> bool:
        """True when the effective learning rate is ``base_lr * workers`` (MLBench's linear rule)."""
        return self.lr_scaling == "linear"

    @property
    def defaults(self) -> Mapping[str, Any]:
        """The official value of each hyperparameter a plan records (JSON data)."""
        return MappingProxyType(hps.plan_values(self.hyperparameters()))

    @property
    def knobs(self) -> Mapping[str, kn.Knob]:
        """Each hyperparameter's description, policy and bounds."""
        return kn.knobs(self.hyperparameters)

    @property
    def overridable(self) -> frozenset[str]:
        """The hyperparameters a spec may set."""
        return frozenset(n for n, k in kn.knobs(self.hyperparameters).items() if k.policy == "override")

    @property
    def choices(self) -> Mapping[str, tuple[str, ...]]:
        """The allowed values of each overridable hyperparameter that is a set of names."""
        out: dict[str, tuple[str, ...]] = {}
        for name, tp in kn.field_types(self.hyperparameters).items():
            item = typing.get_args(tp)[0] if typing.get_origin(tp) is tuple else tp
            if name in self.overridable and typing.get_origin(item) is Literal:
                out[name] = tuple(str(a) for a in typing.get_args(item))
        return out

    @property
    def data_options(self) -> Mapping[str, type[DataOptions]]:
        """The options a spec may give each data source of this task (``data.options``)."""
        return MappingProxyType(
            {source: cls for (task, source), cls in DATA_OPTIONS.items() if task == self.id}
        )

    @property
    def closed_division(self) -> Mapping[str, Any]:
        """The hyperparameters MLPerf's closed division holds at their official values."""
        fixed = {n for n, k in kn.knobs(self.hyperparameters).items() if k.in_closed_division}
        return {name: value for name, value in self.defaults.items() if name in fixed}


def _ro(d: dict[str, Any]) -> Mapping[str, Any]:
    return MappingProxyType(d)


TASKS: Mapping[str, TaskInfo] = _ro(
    {
        "0a": TaskInfo(
            id="0a",
            template_max_time="30m",
            name="allreduce",
            title="All-reduce bandwidth and latency",
            model="none (collective sweep)",
            dataset="tensors of np.logspace(0, 8, 80) elements",
            goal=None,
            hyperparameters=hps.AllReduce,
            backends=ALL_BACKENDS,
            precisions=("fp32",),
            notes="sizes = unique ints of np.logspace(sizes_min_exp, sizes_max_exp, num_sizes); "
            "fp16 is dropped on mpi (Open MPI has no fp16 reduction).",
            sweep=TaskSweep(
                prefix=wire.ALLREDUCE_PREFIX,
                count_figure="latency_p50",
                unit="sizes",
                x_label="size (elements)",
                charts=(
                    wire.allreduce_metric("fp32", "busbw"),
                    wire.allreduce_metric("fp16", "busbw"),
                    wire.allreduce_metric("fp32", "latency_p50"),
                ),
            ),
            no_cuda_graphs="it measures all-reduce calls themselves and has no training step to capture",
            reads_data=False,
        ),
        "1a": TaskInfo(
            id="1a",
            name="resnet20-cifar10",
            title="Image classification: ResNet-20 on CIFAR-10",
            model="ResNet-20 (He et al. 2015, v1)",
            dataset="CIFAR-10 (50k train / 10k val)",
            goal=TaskGoal(metric=wire.VAL_GLOBAL_PREC1, direction="max", full=80.0, light=70.0),
            hyperparameters=hps.ResNet20,
            backends=ALL_BACKENDS,
            precisions=ALL_PRECISIONS,
            frameworks=ALL_FRAMEWORKS,
            lr_scaling="linear",
            notes="batch_size is per worker; lr = 0.02*k with linear warm-up over log2(k) epochs; "
            "reduce on plateau of val loss (patience 2, factor 0.5); disjoint data per worker; "
            "channels_last 'auto' trains in channels_last memory layout on CPU (same math, "
            "1.3-1.5x faster convolutions there) and NCHW on GPU.",
        ),
        "1b": TaskInfo(
            id="1b",
            template_max_time="12h",
            synthetic_sizes=("image_size", "num_classes"),
            name="resnet50-imagenet",
            title="Image classification: ResNet-50 v1.5 on ImageNet (MLPerf Training)",
            model="ResNet-50 v1.5 (He et al. 2015; stride on the 3x3 convolution)",
            dataset="ImageNet ILSVRC 2012 (1,281,167 train / 50,000 val, 224x224)",
            goal=TaskGoal(metric=wire.VAL_GLOBAL_PREC1, direction="max", full=75.9, light=50.0),
            hyperparameters=hps.ResNet50,
            backends=ALL_BACKENDS,
            precisions=ALL_PRECISIONS,
            notes="MLPerf Training's image classification (rules: mlcommons/training_policies "
            "training_rules.adoc, ResNet rows; reference: mlcommons/training image_classification). "
            "batch_size is per worker; opt_name auto is LARS from a global batch of 2048 (base lr 10, "
            "5 warm-up epochs, 41 epochs, weight decay 2e-4), SGD with momentum below it (lr 0.1 x "
            "global batch / 256, a multiple of 0.001; 90 epochs; weight decay 1e-4); linear warm-up from "
            "0, then polynomial decay (power 2) to 1e-4; label smoothing 0.1; no weight decay or LARS "
            "scaling on BatchNorm parameters and biases; random resized crops to 224 with flips, "
            "evaluation on the centre 224 of 256; weight decay 1e-4 x 2^N and label smoothing 0 or 0.1 "
            "as MLPerf allows. data.options: synthetic {train_samples, val_samples, image_size, "
            "num_classes, noise, seed}; path/download {decoder: auto|cpu|gpu, loader_workers, "
            "prefetch_batches}. The light goal (50%) is reachable on synthetic data.",
        ),
        "2a": TaskInfo(
            id="2a",
            name="logreg-epsilon",
            title="Linear learning: L2 logistic regression on epsilon",
            model="logistic regression (L2)",
            dataset="epsilon (LIBSVM, 400k x 2000 dense)",
            goal=TaskGoal(metric=wire.VAL_GLOBAL_PREC1, direction="max", full=89.0, light=80.0),
            hyperparameters=hps.LogReg,
            backends=ALL_BACKENDS,
            precisions=("fp32", "bf16"),
            lr_scaling="linear",
            notes="batch_size is per worker; lr = 4*k; plain SGD (momentum 0); BCE + L2 2.5e-6.",
        ),
        "3a": TaskInfo(
            id="3a",
            template_max_time="12h",
            synthetic_sizes=("bptt", "emb_size", "hidden_size", "num_layers"),
            name="awd-lstm-wikitext2",
            title="Language modelling: AWD-LSTM on WikiText-2",
            model="AWD-LSTM (3 layers, 400 emb, 1150 hidden, tied weights)",
            dataset="WikiText-2 (2,088,628 train tokens, vocab 33,278)",
            goal=TaskGoal(metric=wire.VAL_GLOBAL_PERPLEXITY, direction="min", full=70.0, light=90.0),
            hyperparameters=hps.AwdLstm,
            backends=ALL_BACKENDS,
            precisions=("fp32", "bf16", "amp"),
            lr_scaling="sqrt",
            batch_unit="sequences",
            notes="batch_size is sentences per worker; lr 30*seq_len/bptt per batch, warm-up from "
            "base_lr to lr = base_lr*sqrt(k) over warmup_epochs = 3*k epochs; averaged SGD after "
            "nonmono epochs without improvement.",
        ),
        "4a": TaskInfo(
            id="4a",
            template_max_time="12h",
            name="gnmt-wmt16",
            title="Machine translation: GNMT on WMT16 EN-DE",
            model="GNMT (stacked residual LSTM with attention)",
            dataset="WMT16 EN-DE (train len <= 75, test <= 150)",
            goal=TaskGoal(metric=wire.VAL_GLOBAL_BLEU, direction="max", full=24.0, light=20.0),
            hyperparameters=hps.Gnmt,
            attention=True,
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
            template_max_time="12h",
            name="transformer-wmt17",
            title="Machine translation: Transformer (base) on WMT17 EN-DE",
            model="Transformer base (Vaswani et al. 2017)",
            dataset="WMT17 EN-DE (len <= 80)",
            goal=TaskGoal(metric=wire.VAL_GLOBAL_BLEU, direction="max", full=25.0, light=20.0),
            hyperparameters=hps.Transformer,
            attention=True,
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
    return [wire.TRAIN_LOSS, *([goal_metric] if goal_metric else []), wire.STEP_TIME]
