"""Checking ``data.options`` against a task's declared options (stdlib only).

A data source's options are a frozen dataclass whose fields carry a ``Knob`` (description,
bounds), like the hyperparameters; ``check_options`` runs the hyperparameters' own checks on them
(known names with the closest one, types, bounds, no NaN) and words the messages for data
options. The engine checks a spec with it and the worker parses its config with it, so what
validate accepts, the ranks accept.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, TypeVar

from mlbench_worker.knobs import ALL_POLICIES, HyperparameterError, HyperparameterProblem, check_values

OptionsT = TypeVar("OptionsT")


def check_options(
    cls: type[Any], label: str, values: Mapping[str, Any]
) -> tuple[dict[str, Any], list[HyperparameterProblem]]:
    """``values`` checked against the options dataclass ``cls`` (``label`` names its task and
    source in messages): the typed values and every problem."""
    typed, problems = check_values(cls, label, values, ALL_POLICIES)
    return typed, [dataclasses.replace(p, message=_worded(p.message)) for p in problems]


def parse_options(cls: type[OptionsT], label: str, values: Mapping[str, Any]) -> OptionsT:
    """The typed options (defaults for the rest); ``HyperparameterError`` names every problem."""
    typed, problems = check_options(cls, label, values)
    if problems:
        raise HyperparameterError(label, problems)
    return cls(**typed)


def _worded(message: str) -> str:
    return (
        message.replace("unknown hyperparameter", "unknown data option")
        .replace("hyperparameter '", "data option '")
        .replace("; overridable:", "; known:")
    )
