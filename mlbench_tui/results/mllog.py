"""A run's MLPerf training log (``mllog.txt``): MLPerf's keys, in MLPerf's order, built from what the
run reported and written by MLCommons' own ``mlperf-logging`` (its ``mllog`` module).

``entries`` is pure: from the plan, rank 0's events and the global metrics it lays out the log as
MLPerf's training rules ask for it (submission keys, ``cache_clear``, ``init_start``, the
hyperparameters, ``init_stop``/``run_start``, each epoch with its validation, ``run_stop`` with its
status); ``render`` turns the entries into ``:::MLLOG`` lines with ``mllog``. Every accuracy is in
the unit of the run's goal and of its stored metrics (percent for top-1, BLEU points, perplexity).
MLBench's tasks are not MLPerf benchmarks, so MLPerf's rulesets reject their names: ``check`` runs
MLCommons' compliance checker against the project's own ruleset for them (``mllog_rules/``).
"""

from __future__ import annotations

import dataclasses
import io
import logging
import math
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from mlbench_worker import wire
from mlbench_worker.hyperparams import AllReduce, ResNet50

from mlbench_tui.errors import MlbenchError
from mlbench_tui.plan import RunPlan
from mlbench_tui.results import events as ev
from mlbench_tui.results.events import EventRecord
from mlbench_tui.results.model import Suspect
from mlbench_tui.results.time_to_accuracy import MetricPoint
from mlbench_tui.spec.tasks import TASKS, TaskInfo

EventType = Literal["POINT_IN_TIME", "INTERVAL_START", "INTERVAL_END"]

RULES = Path(__file__).with_name("mllog_rules")
"""The project's ruleset in the checker's config format; ``common.yaml`` is the one to pass."""
MLPERF_RULESET = "6.1.0"  # the MLPerf training rules whose common part RULES mirrors
INSTALL_HINT = "install MLCommons' mlperf-logging with: pip install 'mlbench-tui[mlperf]'"
CONFIG_FILENAME = "spec.yaml"  # the export's copy of the spec the run was planned from
UNSPECIFIED_ORG = "unspecified"

# MLPerf's names for the catalog's hyperparameters where the meaning is the same; the others keep
# the catalog's name. Batch sizes become global_batch_size / micro_batch_size (see _batch_entries).
MLPERF_KEYS: Mapping[str, tuple[str, ...]] = {
    "lr": ("opt_base_learning_rate",),
    "base_lr": ("opt_learning_rate_warmup_start_lr",),
    "momentum": ("opt_momentum",),
    "nesterov": ("opt_nesterov",),
    "weight_decay": ("opt_weight_decay",),
    "l2": ("opt_weight_decay",),
    "warmup_epochs": ("opt_learning_rate_warmup_epochs",),
    "warmup_steps": ("opt_learning_rate_warmup_steps",),
    "plateau_factor": ("opt_learning_rate_decay_factor",),
    "decay_factor": ("opt_learning_rate_decay_factor",),
    "decay_interval": ("opt_learning_rate_decay_interval",),
    "decay_steps": ("opt_learning_rate_decay_steps",),
    "clip": ("opt_gradient_clip_norm",),
    "adam_betas": ("opt_adam_beta_1", "opt_adam_beta_2"),
    "adam_eps": ("opt_adam_epsilon",),
}
# Task 1b logs MLPerf's ResNet keys, named for its local update ({opt}: lars or sgd), as MLPerf's
# reference and compliance rules name them (training 4.0.0 closed_resnet_{lars,sgd}.yaml).
RESNET_KEYS: Mapping[str, str] = {
    "lr": "{opt}_opt_base_learning_rate",
    "end_lr": "{opt}_opt_end_learning_rate",
    "poly_power": "{opt}_opt_learning_rate_decay_poly_power",
    "momentum": "{opt}_opt_momentum",
    "weight_decay": "{opt}_opt_weight_decay",
    "lars_epsilon": "lars_epsilon",
}
_LARS_ONLY = frozenset({"lars_epsilon", "lars_eta"})
_BATCH_KEYS = frozenset({"batch_size", "global_batch_size", "global_batch_tokens", "update_freq"})
_PRECISIONS = {"fp32": "fp32", "bf16": "bfloat16", "fp16": "fp16", "amp": "fp16"}


class MllogUnavailable(MlbenchError):
    """MLCommons' ``mlperf-logging`` is not installed (the ``mlperf`` extra)."""


@dataclass(frozen=True)
class Entry:
    """One ``:::MLLOG`` line before rendering; ``t`` in seconds since the epoch."""

    key: str
    value: Any
    t: float
    event_type: EventType = "POINT_IN_TIME"
    metadata: Mapping[str, Any] = field(default_factory=dict)


def mllog_keys(name: str, opt_name: str | None = None) -> tuple[str, ...]:
    """The log keys of a catalog hyperparameter (one, or one per item of a list such as Adam's betas);
    with ``opt_name`` (task 1b's local update, lars or sgd) MLPerf's ResNet keys for it."""
    if opt_name is not None:
        if name == "warmup_epochs":
            return (
                "lars_opt_learning_rate_warmup_epochs"
                if opt_name == "lars"
                else "opt_learning_rate_warmup_epochs",
            )
        if name in RESNET_KEYS:
            return (RESNET_KEYS[name].format(opt=opt_name),)
    return MLPERF_KEYS.get(name, (name,))


def division(plan: RunPlan, suspects: Sequence[Suspect] = ()) -> Literal["closed", "open"]:
    """``closed`` when the run is the task as MLBench defines it: its official data, its full goal and
    its fixed hyperparameters (the spec policy lets only batch size and the LR schedule change), and
    none of its figures fails a physical bound (``suspects``); ``open`` otherwise (synthetic data, the
    light or a custom goal, a smaller 0a sweep, a suspect figure)."""
    if suspects:
        return "open"
    task = TASKS[plan.task]
    if task.goal is not None and (plan.data.source == "synthetic" or plan.goal is None):
        return "open"
    if plan.goal is not None and plan.goal.kind != "full":
        return "open"
    fixed = fixed_hyperparameters(task)
    hp = {**task.defaults, **plan.hyperparameters}
    return "closed" if all(hp[key] == value for key, value in fixed.items()) else "open"


def fixed_hyperparameters(task: TaskInfo) -> dict[str, Any]:
    """The hyperparameters the closed division fixes: those the spec may not override, and for task
    0a the sweep itself (the catalog's ``closed_division``)."""
    return dict(task.closed_division)


def submission_platform(plan: RunPlan, environment: wire.Environment) -> str:
    """The hardware, from rank 0's ``environment`` event: ``<count>x <GPU model>`` on GPUs, else the
    CPU model with the ranks and threads; the plan's GPU type when the event is missing."""
    gpus = plan.workers * max(1, plan.resources.gpus)
    gpu = environment.gpu_model or (plan.resources.gpu_type if plan.resources.gpus else None)
    if gpu:
        return f"{gpus}x {gpu}"
    cpu = environment.cpu_model or "CPU (model not reported)"
    threads = plan.resources.threads_per_rank
    return f"{cpu}, {plan.workers} rank{'s' * (plan.workers != 1)} x {threads} thread{'s' * (threads != 1)}"


def entries(
    plan: RunPlan,
    metrics: Sequence[MetricPoint],
    events: Sequence[EventRecord],
    *,
    state: str,
    org: str | None = None,
    message: str | None = None,
    suspects: Sequence[Suspect] = (),
) -> list[Entry]:
    """The run's log, in order. ``state`` is the run's final state (its ``run_stop`` when the ranks
    sent none); ``org`` defaults to the spec's ``org`` label; ``suspects`` keep it out of the
    closed division."""
    main = sorted((e for e in events if e.rank == 0), key=lambda e: _t(e.t))
    times = [e.t for e in events if e.t is not None] + [p.t for p in metrics if p.t is not None]
    startup = ev.first(main, wire.Startup)
    process_start = startup.payload.process_start_t if startup is not None else None
    if isinstance(process_start, int | float):
        times.append(float(process_start))
    origin = min(times) if times else 0.0
    run_start = ev.first(main, wire.RunStart)
    environment = ev.first(main, wire.Environment)
    # MLPerf's initialisation: from rank 0's process start (``startup``) to its run_start
    init_t = (
        float(process_start)
        if isinstance(process_start, int | float)
        else _time(ev.first(main, wire.InitStart) or environment or run_start, origin)
    )
    facts = run_start.payload if run_start is not None else wire.RunStart()
    task = TASKS[plan.task]
    out = [
        Entry("submission_org", org or plan.labels.get("org") or UNSPECIFIED_ORG, init_t),
        Entry(
            "submission_platform",
            submission_platform(plan, environment.payload if environment else wire.Environment()),
            init_t,
        ),
        Entry("submission_division", division(plan, suspects), init_t),
        Entry("submission_benchmark", plan.task_name, init_t),
        Entry("cache_clear", False, init_t),  # the worker does not drop the OS page cache
        Entry("init_start", None, init_t, "INTERVAL_START"),
        *(
            Entry(key, value, init_t, metadata=meta)
            for key, value, meta in _config(plan, task, facts, metrics)
        ),
    ]
    if run_start is not None:
        out += [
            Entry("init_stop", None, _time(run_start, init_t), "INTERVAL_END"),
            Entry("run_start", None, _time(run_start, init_t), "INTERVAL_START"),
        ]
    stop = ev.first(main, wire.RunStop) or ev.first(events, wire.RunStop)
    stop_t = _time(stop, max(times, default=init_t))
    start_t = _time(run_start, init_t)
    if task.goal is None:
        out += _sweep(plan, metrics, start=start_t)
    else:
        out += _epochs(task, metrics, main, start=start_t, stop=stop_t)
    if stop is not None:
        status, reason = stop.payload.status, stop.payload.reason
    else:  # the ranks never said: the run's recorded state does
        status = "success" if state == "succeeded" else "aborted"
        reason = message or f"the run ended {state} without a run_stop event"
    out.append(Entry("run_stop", None, stop_t, "INTERVAL_END", {"status": status, "reason": reason}))
    return out


def _config(
    plan: RunPlan, task: TaskInfo, facts: wire.RunStart, metrics: Sequence[MetricPoint]
) -> Iterable[tuple[str, Any, Mapping[str, Any]]]:
    """The run's configuration, logged during init: seed, data, hyperparameters, batch sizes,
    sample counts, precisions, parallelism, the goal."""
    yield "seed", plan.seed + plan.repeat, {}  # the seed the ranks used (see plan.worker_config)
    yield "framework", plan.framework, {}
    yield "comm_backend", plan.backend, {}
    yield "world_size", plan.workers, {}
    yield "data_source", plan.data.source, {"path": plan.data.path, "options": dict(plan.data.options)}
    hp = dict(plan.hyperparameters)
    if plan.data.source == "synthetic":  # smoke sizes the worker takes from the data options
        hp.update({k: v for k, v in plan.data.options.items() if k in task.synthetic_sizes})
    yield from _batch_entries(task, hp, plan.workers)
    typed = plan.typed_hyperparameters()
    opt_name = None
    if isinstance(typed, ResNet50):  # the recipe the ranks ran, whatever an older plan left open
        recipe = typed.recipe(plan.workers)
        opt_name = recipe.opt_name
        hp.update(dataclasses.asdict(recipe))
        hp.pop("opt_name")  # logged with the keys it names (_resnet_entries)
    for name, value in hp.items():
        if name in _BATCH_KEYS or (opt_name == "sgd" and name in _LARS_ONLY):
            continue
        keys = mllog_keys(name, opt_name)
        values = value if len(keys) > 1 else [value]
        for key, item in zip(keys, values, strict=True):
            yield key, item, {}
    if isinstance(typed, ResNet50):
        yield from _resnet_entries(typed, plan.workers, facts)
    elif task.goal is not None and not isinstance(typed, AllReduce):  # 0a: no optimizer, no goal
        yield "opt_name", "adam" if typed.optimizer == "centralized_adam" else "sgd", {}
    yield "train_samples", facts.train_samples, {}
    yield "eval_samples", facts.eval_samples, {}
    compute = _PRECISIONS[plan.resources.precision]
    yield "lowest_numerical_precision_in_linear", compute, {}
    yield "lowest_numerical_precision_in_attn", compute, {"attention": TASKS[plan.task].attention}
    yield "lowest_numerical_precision_in_comm", _comm_precision(plan, facts, metrics), {}
    for kind in ("tensor", "pipeline", "context", "expert"):
        yield f"{kind}_parallelism", 1, {}  # data parallel only
    yield "config_filename", CONFIG_FILENAME, {}
    if plan.goal is not None:
        goal = plan.goal
        yield (
            "eval_target",
            goal.target,
            {"metric": goal.metric, "direction": goal.direction, "kind": goal.kind},
        )


def _resnet_entries(
    hp: ResNet50, workers: int, facts: wire.RunStart
) -> Iterable[tuple[str, Any, Mapping[str, Any]]]:
    """Task 1b's keys beyond its hyperparameters, as MLPerf's ResNet reference logs them: the local
    update, the decay's length in steps and the BatchNorm span (each rank's batch)."""
    opt = hp.recipe(workers).opt_name
    yield "opt_name", opt, {}
    if facts.train_samples:
        yield f"{opt}_opt_learning_rate_decay_steps", hp.decay_steps(facts.train_samples, workers), {}
    yield "model_bn_span", hp.batch_size, {}


def _batch_entries(
    task: TaskInfo, hp: Mapping[str, Any], workers: int
) -> Iterable[tuple[str, Any, Mapping[str, Any]]]:
    """global_batch_size, micro_batch_size (per rank and accumulation step) and
    gradient_accumulation_steps, in the task's batch unit."""
    accumulation = int(hp.get("update_freq", 1))
    if "global_batch_tokens" in hp:
        total, unit = int(hp["global_batch_tokens"]), "tokens"
        micro = max(1, total // (workers * accumulation))
    elif "global_batch_size" in hp:
        total, unit = int(hp["global_batch_size"]), "sentences"
        micro = max(1, math.ceil(total / (workers * accumulation)))
    elif "batch_size" in hp:
        micro, unit = int(hp["batch_size"]), task.batch_unit
        total = micro * workers
    else:  # task 0a: one tensor per all-reduce
        yield "micro_batch_size", 1, {"unit": "tensors"}
        yield "gradient_accumulation_steps", 1, {}
        return
    yield "global_batch_size", total, {"unit": unit}
    yield "micro_batch_size", micro, {"unit": unit}
    yield "gradient_accumulation_steps", accumulation, {}


def _comm_precision(plan: RunPlan, facts: wire.RunStart, metrics: Sequence[MetricPoint]) -> str:
    """The lowest precision that crossed the network: what the worker reported, the 16-bit dtypes a
    0a sweep measured, or (from a worker that did not say) the compute precision."""
    reported = facts.comm_precision
    if reported in _PRECISIONS:
        return _PRECISIONS[reported]
    if TASKS[plan.task].sweep is not None:  # 0a: what its curves measured
        measured = {p.name.split("_")[1] for p in metrics if p.name.startswith(wire.ALLREDUCE_PREFIX)}
        return next((_PRECISIONS[d] for d in ("fp16", "bf16") if d in measured), "fp32")
    return _PRECISIONS[plan.resources.precision]


def _epochs(
    task: TaskInfo, metrics: Sequence[MetricPoint], main: Sequence[EventRecord], *, start: float, stop: float
) -> list[Entry]:
    """Each epoch: epoch_start, epoch_stop as its validation starts, eval_start, eval_accuracy (the
    task's goal metric), eval_stop (the worker's epoch_end, sent as the validation ends)."""
    assert task.goal is not None
    metric = task.goal.metric
    evals = {_epoch(p.epoch): p for p in metrics if p.name == metric and p.rank == 0 and p.epoch is not None}
    starts = {e.payload.epoch: e for e in ev.of(main, wire.EpochStart) if e.payload.epoch is not None}
    eval_starts = {e.payload.epoch: e for e in ev.of(main, wire.EvalStart) if e.payload.epoch is not None}
    ends = {e.payload.epoch: e for e in ev.of(main, wire.EpochEnd) if e.payload.epoch is not None}
    out: list[Entry] = []
    previous_end, previous_val = start, 0.0
    for epoch in sorted(set(starts) | set(ends) | set(evals)):
        epoch_t = _time(starts.get(epoch), previous_end)
        meta = {"epoch_num": epoch}
        out.append(Entry("epoch_start", None, epoch_t, "INTERVAL_START", meta))
        end, point = ends.get(epoch), evals.get(epoch)
        if end is None and point is None:  # cut short (max_time, a failure): training stopped with the run
            out.append(Entry("epoch_stop", None, stop, "INTERVAL_END", meta))
            break
        end_t = _time(end, _t(point.t if point else None, epoch_t))
        val_total = end.payload.val_time_s if end is not None else None  # NaN arrives as null
        # A worker without eval_start events: the validation took this epoch's share of val_time_s.
        fallback = end_t - (val_total - previous_val) if val_total is not None else end_t
        eval_t = _time(eval_starts.get(epoch), max(epoch_t, fallback))
        out += [
            Entry("epoch_stop", None, eval_t, "INTERVAL_END", meta),
            Entry("eval_start", None, eval_t, "INTERVAL_START", meta),
        ]
        if point is not None:
            out.append(
                Entry("eval_accuracy", point.value, _t(point.t, end_t), metadata={**meta, "metric": metric})
            )
        out.append(Entry("eval_stop", None, end_t, "INTERVAL_END", meta))
        previous_end, previous_val = end_t, val_total if val_total is not None else previous_val
    return out


def _sweep(plan: RunPlan, metrics: Sequence[MetricPoint], *, start: float) -> list[Entry]:
    """Task 0a: each (dtype, size) point is a block of ``repetitions`` timed all-reduces (samples);
    its eval_accuracy is its bus bandwidth in GB/s, with the latencies in the metadata. One rank
    moves no data and reports no bandwidth: its points' eval_accuracy is the p50 latency in s."""
    hp = plan.typed_hyperparameters()
    repetitions = hp.repetitions if isinstance(hp, AllReduce) else 1
    figure_of, unit = ("busbw", "GB/s") if plan.workers > 1 else ("latency_p50", "s")
    points: dict[tuple[str, int], dict[str, MetricPoint]] = {}  # (dtype, size) -> figure -> point
    for p in metrics:
        if p.rank == 0 and p.name.startswith(wire.ALLREDUCE_PREFIX) and p.step is not None:
            dtype, _, figure = p.name.removeprefix(wire.ALLREDUCE_PREFIX).partition("_")
            points.setdefault((dtype, p.step), {})[figure] = p
    measured = sorted(
        ((dtype, size, figures) for (dtype, size), figures in points.items() if figure_of in figures),
        key=lambda item: (_t(item[2][figure_of].t), item[1]),
    )
    out: list[Entry] = []
    done, block_t = 0, start
    for dtype, size, figures in measured:
        value = figures[figure_of]
        end_t = _t(value.t, block_t)
        out.append(Entry("block_start", None, block_t, "INTERVAL_START", {"samples_count": done}))
        done += repetitions
        extra = {figure: p.value for figure, p in figures.items() if figure != figure_of}
        meta = {"samples_count": done, "dtype": dtype, "size": size, "unit": unit, **extra}
        out += [
            Entry("eval_accuracy", value.value, end_t, metadata={**meta, "metric": value.name}),
            Entry("block_stop", None, end_t, "INTERVAL_END", {"samples_count": done}),
        ]
        block_t = end_t
    return out


def render(log: Iterable[Entry]) -> list[str]:
    """``:::MLLOG`` lines written by MLCommons' ``mllog`` (raises ``MllogUnavailable`` without it)."""
    require_mlperf_logging("writing mllog.txt")
    from mlperf_logging.mllog import mllog

    buffer = io.StringIO()
    logger = logging.getLogger(f"{__name__}.{id(buffer)}")
    logger.propagate = False
    logger.setLevel(logging.INFO)
    handler = logging.StreamHandler(buffer)
    logger.addHandler(handler)
    try:
        root = re.escape(str(Path(__file__).resolve().parents[2]))  # call sites relative to the package
        writer = mllog.MLLogger(logger=logger, default_stack_offset=1, root_dir=root)
        emit = {"POINT_IN_TIME": writer.event, "INTERVAL_START": writer.start, "INTERVAL_END": writer.end}
        for entry in log:
            emit[entry.event_type](
                key=entry.key, value=entry.value, metadata=dict(entry.metadata), time_ms=round(entry.t * 1000)
            )
    finally:
        logger.removeHandler(handler)
    return buffer.getvalue().splitlines()


def mllog_lines(
    plan: RunPlan,
    metrics: Sequence[MetricPoint],
    events: Sequence[EventRecord],
    *,
    state: str,
    org: str | None = None,
    message: str | None = None,
    suspects: Sequence[Suspect] = (),
) -> list[str]:
    """The run's ``mllog.txt`` lines (see ``entries``)."""
    return render(entries(plan, metrics, events, state=state, org=org, message=message, suspects=suspects))


def _time(event: ev.Event[Any] | None, default: float) -> float:
    return _t(event.t if event is not None else None, default)


def _t(value: float | None, default: float = 0.0) -> float:
    return default if value is None else float(value)


def _epoch(value: Any) -> int:
    return round(float(value))


@dataclass(frozen=True)
class Compliance:
    """The compliance checker's verdict on one log, with its report."""

    ok: bool
    report: str


def require_mlperf_logging(what: str) -> None:
    """Raise ``MllogUnavailable`` (with the install hint) when ``mlperf-logging`` is not installed."""
    try:
        import mlperf_logging  # noqa: F401  (an empty package: the import costs nothing)
    except ImportError:
        raise MllogUnavailable(f"{what} needs MLCommons' mlperf-logging", hint=INSTALL_HINT) from None


def check(log: Path, rules: Path = RULES) -> Compliance:
    """Run MLCommons' checker (``python -m mlperf_logging.compliance_checker``) on ``log`` against
    the ruleset in ``rules`` (the project's, or a copy such as an export's ``mllog_rules/``)."""
    require_mlperf_logging("the compliance check")
    with tempfile.TemporaryDirectory(prefix="mlbench-mllog-") as tmp:
        report = Path(tmp) / "checker.log"
        command = [
            sys.executable,
            "-m",
            "mlperf_logging.compliance_checker",
            "--usage",
            "training",
            "--ruleset",
            MLPERF_RULESET,
            "--config",
            str((rules / "common.yaml").resolve()),
            "--log_output",
            str(report),
            str(log),
        ]
        proc = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
        text = report.read_text(encoding="utf-8") if report.exists() else ""
    return Compliance(proc.returncode == 0, text or proc.stderr)
