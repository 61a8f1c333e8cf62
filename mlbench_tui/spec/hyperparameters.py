"""The engine's view of each task's hyperparameters, derived from ``mlbench_worker.hyperparams``.

The worker's frozen dataclasses declare every hyperparameter once (type, official default, bounds,
policy); this module checks a spec's overrides against them, computes a run's effective values,
and derives one pydantic model per task of what a spec may set, for the JSON Schema.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from mlbench_worker.config import DATA_SOURCES
from mlbench_worker.data.options import DATA_OPTIONS
from mlbench_worker.hyperparams import (
    HYPERPARAMETERS,
    AnyHyperparameters,
    TaskHyperparameters,
    check_hyperparameters,
    plan_values,
)
from mlbench_worker.knobs import ALL_POLICIES, HyperparameterProblem, Policy, field_types, knobs
from pydantic import BaseModel, ConfigDict, Field, create_model

OVERRIDE: frozenset[Policy] = frozenset({"override"})


def override_problems(
    task: str, overrides: Mapping[str, Any], backends: Sequence[str] = ()
) -> Iterator[HyperparameterProblem]:
    """Every reason the spec's ``overrides`` are not runnable for ``task`` on ``backends``: unknown or
    fixed keys, wrong types, values out of bounds, rules across fields and backends."""
    typed, problems = check_hyperparameters(task, overrides, OVERRIDE)
    yield from problems
    made = overridden(task, overrides)
    yield from made.problems()
    given = frozenset(typed) - {p.name for p in problems}
    for backend in dict.fromkeys(backends):
        yield from made.backend_problems(backend, given)


def overridden(task: str, overrides: Mapping[str, Any]) -> TaskHyperparameters:
    """The task's defaults with the spec's valid ``overrides`` applied (invalid ones left out)."""
    typed, problems = check_hyperparameters(task, overrides, OVERRIDE)
    bad = {p.name for p in problems}
    return HYPERPARAMETERS[task](**{k: v for k, v in typed.items() if k not in bad})


def effective_hyperparameters(
    task: str, overrides: Mapping[str, Any], workers: int, backend: str
) -> TaskHyperparameters:
    """What a run of ``workers`` ranks on ``backend`` uses: defaults, the spec's overrides, then the
    task's scaling and backend rules. ``overrides`` are a validated spec's (see ``override_problems``)."""
    typed, problems = check_hyperparameters(task, overrides, OVERRIDE)
    if problems:
        raise ValueError(f"task {task}: {problems[0].message}")
    made = HYPERPARAMETERS[task](**typed)
    return made.for_workers(workers, frozenset(typed)).on_backend(backend)


def planned_values(task: str, overrides: Mapping[str, Any], workers: int, backend: str) -> dict[str, Any]:
    """The effective hyperparameters as a plan records them (JSON data)."""
    return plan_values(effective_hyperparameters(task, overrides, workers, backend))


def of_plan(task: str, values: Mapping[str, Any]) -> AnyHyperparameters:
    """A plan's recorded hyperparameters, typed (fields an older plan lacks take their default)."""
    typed = HYPERPARAMETERS[task](**check_hyperparameters(task, values, ALL_POLICIES)[0])
    return typing.cast(AnyHyperparameters, typed)


def _field(cls: type[Any], name: str) -> tuple[Any, Any]:
    """A pydantic field definition (type, ``Field``) of the dataclass field ``name``."""
    spec = knobs(cls)[name]
    default = next(f.default for f in dataclasses.fields(cls) if f.name == name)
    return (
        field_types(cls)[name],
        Field(
            default=list(default) if isinstance(default, tuple) else default,
            description=spec.description,
            ge=spec.ge,
            gt=spec.gt,
            le=spec.le,
            lt=spec.lt,
        ),
    )


def _override_model(
    task: str, cls: type[Any], suffix: str = "Overrides", what: str = "override"
) -> type[BaseModel]:
    fields = {name: _field(cls, name) for name, spec in knobs(cls).items() if spec.policy == "override"}
    config = ConfigDict(extra="forbid", title=f"{cls.__name__}{suffix}")
    model: type[BaseModel] = create_model(  # type: ignore[call-overload]
        f"{cls.__name__}{suffix}",
        __config__=config,
        __doc__=f"What a spec of task {task} may {what}: {(cls.__doc__ or '').strip()}",
        **fields,
    )
    return model


OVERRIDE_MODELS: Mapping[str, type[BaseModel]] = {
    task: _override_model(task, cls) for task, cls in HYPERPARAMETERS.items()
}
"""Task id -> the pydantic model of the overrides a spec of that task may write."""

OPTION_MODELS: Mapping[tuple[str, str], type[BaseModel]] = {
    (task, source): _override_model(task, cls, "Options", f"give its {source} data")
    for (task, source), cls in DATA_OPTIONS.items()
}
"""(task id, data source) -> the pydantic model of the ``data.options`` a spec may write for it."""


def select_by_task(schema: dict[str, Any]) -> None:
    """Add to the spec body's JSON Schema one ``if task is T then hyperparameters is T's model`` per
    task, so an editor checks the overrides of the task the spec names."""
    from mlbench_tui.spec.tasks import TASKS

    schema["allOf"] = [
        {
            "if": {"properties": {"task": {"enum": [task.id, task.name]}}, "required": ["task"]},
            "then": {"properties": _task_properties(task.id)},
        }
        for task in TASKS.values()
    ]


def _task_properties(task: str) -> dict[str, Any]:
    """The body properties one task constrains: its overrides, and each data source's options
    (none for a source the task declares none for; an absent source is synthetic)."""
    out: dict[str, Any] = {"hyperparameters": OVERRIDE_MODELS[task].model_json_schema()}
    clauses = []
    for source in DATA_SOURCES:
        model = OPTION_MODELS.get((task, source))
        named: dict[str, Any] = {"properties": {"source": {"const": source}}, "required": ["source"]}
        when = {"anyOf": [{"not": {"required": ["source"]}}, named]} if source == "synthetic" else named
        options = model.model_json_schema() if model else {"maxProperties": 0}
        clauses.append({"if": when, "then": {"properties": {"options": options}}})
    out["data"] = {"allOf": clauses}
    return out
