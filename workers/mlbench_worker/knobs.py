"""What a hyperparameter declaration says and how values are checked against it (stdlib only).

A field of a task's hyperparameter dataclass (``mlbench_worker.hyperparams``) carries a ``Knob`` in
its metadata: description, policy and bounds. ``check_values`` checks plain values (a spec's
overrides, a plan's values) against those declarations, with one message per problem, so the
engine and the worker apply the same rules.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType, NoneType, UnionType
from typing import Any, Literal

Policy = Literal["override", "fixed", "derived", "tuning"]
"""``override``: a spec may change it (MLPerf's rule: batch size and the LR schedule, plus the
distributed optimizer's choices); ``fixed``: the task's official value; ``derived``: the plan sets it
from other values (``base_lr``); ``tuning``: a knob of this implementation, not part of a plan."""


@dataclass(frozen=True)
class Knob:
    """What a field means and who may set it; bounds are inclusive (``ge``/``le``) or strict."""

    description: str
    policy: Policy = "fixed"
    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None
    closed: bool | None = None
    """Whether MLPerf's closed division needs the default; None: exactly when the value is fixed."""

    @property
    def in_closed_division(self) -> bool:
        """True when a run is only comparable (closed) with this field at its official value."""
        return self.closed if self.closed is not None else self.policy == "fixed"

    def bound_problem(self, value: float) -> str | None:
        """Why ``value`` is out of bounds (``must be > 0``), or None."""
        if not math.isfinite(value):
            return "must be a finite number"
        if self.gt is not None and self.lt is not None and not self.gt < value < self.lt:
            return f"must be between {show_bound(self.gt)} and {show_bound(self.lt)}"
        for bound, op in ((self.gt, ">"), (self.ge, ">="), (self.lt, "<"), (self.le, "<=")):
            if bound is not None and not _holds(value, op, bound):
                return f"must be {op} {show_bound(bound)}"
        return None


def _holds(value: float, op: str, bound: float) -> bool:
    """Whether ``value op bound`` (``op`` one of >, >=, <, <=)."""
    if op == ">":
        return value > bound
    if op == ">=":
        return value >= bound
    return value < bound if op == "<" else value <= bound


def show_bound(bound: float) -> str:
    """A bound as a person writes it: ``1000000``, ``0.5``, ``1e-08``."""
    if float(bound).is_integer() and abs(bound) < 1e16:
        return str(int(bound))
    return f"{bound:g}"


def knob(default: Any, description: str, policy: Policy = "fixed", **bounds: Any) -> Any:
    """A dataclass field with its official ``default`` and its ``Knob``."""
    return field(default=default, metadata={"knob": Knob(description, policy, **bounds)})


@dataclass(frozen=True)
class HyperparameterProblem:
    """One value a spec or config may not hold; ``choices`` lets the engine suggest the closest."""

    name: str
    message: str
    choices: tuple[str, ...] = ()
    at_key: bool = False
    hint: str = ""


class HyperparameterError(ValueError):
    """Hyperparameters the task does not accept; ``problems`` lists each one."""

    def __init__(self, task: str, problems: list[HyperparameterProblem]) -> None:
        super().__init__(f"task {task}: " + "; ".join(f"{p.name}: {p.message}" for p in problems))
        self.problems = problems


def knobs(cls: type[Any]) -> dict[str, Knob]:
    """The fields of ``cls`` and their knobs, in declaration order."""
    return dict(_knobs(cls))


def field_types(cls: type[Any]) -> dict[str, Any]:
    """The resolved type of each field of ``cls``."""
    return dict(_field_types(cls))


_KNOBS: dict[type[Any], Mapping[str, Knob]] = {}
_TYPES: dict[type[Any], Mapping[str, Any]] = {}


def _knobs(cls: type[Any]) -> Mapping[str, Knob]:
    found = _KNOBS.get(cls)
    if found is None:
        found = _KNOBS[cls] = MappingProxyType({f.name: f.metadata["knob"] for f in dataclasses.fields(cls)})
    return found


def _field_types(cls: type[Any]) -> Mapping[str, Any]:
    """Resolving annotations takes a millisecond per class; a plan check does it thousands of times."""
    found = _TYPES.get(cls)
    if found is None:
        hints = typing.get_type_hints(cls)
        found = _TYPES[cls] = MappingProxyType({f.name: hints[f.name] for f in dataclasses.fields(cls)})
    return found


class _Mismatch(Exception):
    """A value of the wrong type; ``choices`` when the type is a set of strings."""

    def __init__(self, expected: str, choices: tuple[str, ...] = (), item: Any = None) -> None:
        super().__init__(expected)
        self.expected, self.choices, self.item = expected, choices, item


def describe_type(tp: Any) -> str:
    """How a message names ``tp``: ``an integer``, ``'auto', true or false``, ``a list``."""
    if tp is bool:
        return "a boolean"
    if tp is int:
        return "an integer"
    if tp is float:
        return "a number"
    if tp is str:
        return "a string"
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is tuple:
        return "a list"
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in args)
    if origin in (UnionType, typing.Union):
        words: list[str] = []
        for arg in args:
            if arg is NoneType:
                continue
            if typing.get_origin(arg) is Literal:
                words += [repr(a) for a in typing.get_args(arg)]
            elif arg is bool:
                words += ["true", "false"]
            else:
                words.append(describe_type(arg))
        return ", ".join(words[:-1]) + " or " + words[-1] if len(words) > 1 else words[0]
    return getattr(tp, "__name__", str(tp))


def _coerce(value: Any, tp: Any) -> Any:
    """``value`` as ``tp`` (lists become tuples, integers numbers), or ``_Mismatch``."""
    if tp is bool:
        if isinstance(value, bool):
            return value
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif tp is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
    elif tp is str:
        if isinstance(value, str):
            return value
    elif typing.get_origin(tp) is Literal:
        choices = typing.get_args(tp)
        if value in choices and type(value) is type(choices[0]):
            return value
        raise _Mismatch(describe_type(tp), tuple(str(c) for c in choices), value)
    elif typing.get_origin(tp) is tuple:
        args = typing.get_args(tp)
        if isinstance(value, list | tuple):
            if len(args) == 2 and args[1] is Ellipsis:
                return tuple(_coerce(v, args[0]) for v in value)
            if len(value) == len(args):
                return tuple(_coerce(v, a) for v, a in zip(value, args, strict=True))
            raise _Mismatch(f"a list of {len(args)}")
    elif typing.get_origin(tp) in (UnionType, typing.Union):
        if value is None and NoneType in typing.get_args(tp):
            return None
        for arg in typing.get_args(tp):
            try:
                return _coerce(value, arg)
            except _Mismatch:
                continue
    raise _Mismatch(describe_type(tp))


INT64 = (-(2**63), 2**63 - 1)


def check_values(
    cls: type[Any],
    task: str,
    values: Mapping[str, Any],
    policies: frozenset[Policy],
    *,
    what: str = "hyperparameter",
) -> tuple[dict[str, Any], list[HyperparameterProblem]]:
    """``values`` checked against the declarations of ``cls`` (task ``task``'s ``what``s, such as
    hyperparameters): known, of a ``policies`` a caller may set, of the right type, within bounds
    and 64-bit integers. Returns the typed values and every problem."""
    declared, types = _knobs(cls), _field_types(cls)
    settable = sorted(name for name, k in declared.items() if k.policy in policies)
    allowed = ", ".join(settable)
    typed: dict[str, Any] = {}
    problems: list[HyperparameterProblem] = []
    for name, value in values.items():
        spec = declared.get(name)
        if spec is None or (spec.policy not in policies and spec.policy != "fixed"):
            message = f"unknown {what} '{name}' for {_of(task)}; {_settable(what)}: {allowed or 'none'}"
            problems.append(HyperparameterProblem(name, message, tuple(settable), at_key=True))
            continue
        if spec.policy not in policies:
            problems.append(_fixed(task, name, allowed))
            continue
        try:
            typed[name] = item = _coerce(value, types[name])
        except _Mismatch as bad:
            problems.append(_mismatch(name, value, bad, what))
            continue
        numbers = item if isinstance(item, tuple) else (item,)
        for number in numbers:
            if isinstance(number, int | float) and not isinstance(number, bool):
                why = spec.bound_problem(number)
                if why is None and isinstance(number, int) and not INT64[0] <= number <= INT64[1]:
                    why = "must fit in 64 bits"
                if why is not None:
                    shown = number if isinstance(item, tuple) else value  # as written
                    problems.append(HyperparameterProblem(name, f"{what} '{name}' {why}, got {shown}"))
                    break
    return typed, problems


def _of(task: str) -> str:
    return task if task.startswith("task ") else f"task {task}"


def _settable(what: str) -> str:
    return "overridable" if what == "hyperparameter" else "known"


def _fixed(task: str, name: str, allowed: str) -> HyperparameterProblem:
    return HyperparameterProblem(
        name,
        f"hyperparameter '{name}' is fixed by task {task} (only batch size and the learning-rate "
        f"schedule may change, so results stay comparable); overridable: {allowed}",
        at_key=True,
    )


def _mismatch(name: str, value: Any, bad: _Mismatch, what: str) -> HyperparameterProblem:
    if bad.choices:
        expected = ", ".join(repr(c) for c in bad.choices)
        message = f"invalid value {bad.item!r} for {what} '{name}': expected one of {expected}"
        return HyperparameterProblem(name, message, bad.choices)
    return HyperparameterProblem(name, f"{what} '{name}' must be {bad.expected}, got {value!r}")


ALL_POLICIES: frozenset[Policy] = frozenset({"override", "fixed", "derived", "tuning"})
