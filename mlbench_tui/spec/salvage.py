"""What is left of a document whose fields failed, validated anyway, so the catalog, policy and
placement checks still run on the rest and one problem never hides another.

Each failing field is removed (its default takes its place) or, where the spec requires it, given
a valid stand-in; the caller drops every later issue located under a removed field, since those
would judge the stand-in rather than what was written.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pydantic import ValidationError
from pydantic_core import ErrorDetails, PydanticCustomError

from mlbench_tui.spec.diagnostics import Loc, clean_loc
from mlbench_tui.spec.limits import MAX_GPUS_PER_RANK
from mlbench_tui.spec.models import BenchmarkSpec
from mlbench_tui.spec.shortforms import parse_gpu

STAND_INS: dict[Loc, Any] = {("metadata",): {"name": "x"}, ("metadata", "name"): "x"}


def _gpu_count(value: Any) -> Any:
    """A failing GPU request still says the run has GPUs (an unknown model, say): keep the count,
    so the backend and placement checks do not judge a CPU run nobody wrote."""
    try:
        parsed = parse_gpu(value)
    except PydanticCustomError:
        return None
    count = parsed.get("count", 1) if isinstance(parsed, Mapping) else None
    if isinstance(count, int) and not isinstance(count, bool) and 1 <= count <= MAX_GPUS_PER_RANK:
        return {"count": count}
    return None


KEEP: dict[Loc, Callable[[Any], Any]] = {("spec", "hardware", "gpu"): _gpu_count}
MAX_ROUNDS = 4  # a removal can uncover errors the first pass never reached (a union's other branch)


def salvage(data: Mapping[str, Any], errors: Sequence[ErrorDetails]) -> tuple[BenchmarkSpec | None, set[Loc]]:
    """A spec built from ``data`` without the fields ``errors`` point at, and those fields; None
    when nothing valid is left (a required field such as ``spec.task`` failed)."""
    doc: dict[str, Any] = copy.deepcopy(dict(data))
    removed: set[Loc] = set()
    for _ in range(MAX_ROUNDS):
        for error in errors:
            present, rest = clean_loc(tuple(error["loc"]), doc)
            if error["type"] == "missing":
                where = (*present, *rest)
                if where in STAND_INS and _set(doc, where, copy.deepcopy(STAND_INS[where])):
                    removed.add(where)
                    continue
                parent = _field(where[:-1])
                if len(parent) < 2:  # a required section of the document itself (spec.task, spec)
                    return None, removed
                _delete(doc, parent)  # a section missing a key it needs (a target's image) goes whole
                removed.add(parent)
                continue
            field = _field(present)
            if not field:
                return None, removed
            kept = KEEP[field](_parent(doc, field).get(field[-1])) if field in KEEP else None
            if kept is None or not _set(doc, field, kept):
                _delete(doc, field)
            removed.add(field)
        try:
            return BenchmarkSpec.model_validate(doc), removed
        except ValidationError as exc:
            errors = exc.errors(include_url=False)
    return None, removed


def under(loc: Loc, fields: set[Loc]) -> bool:
    """Whether ``loc`` is one of ``fields`` or inside one."""
    return any(loc[: len(f)] == f for f in fields)


def _field(loc: Loc) -> Loc:
    """The mapping key that holds ``loc``: up to its first list index (a sweep is removed whole,
    so the positions of its other items stay those written)."""
    for i, part in enumerate(loc):
        if isinstance(part, int):
            return loc[:i]
    return loc


def _parent(doc: dict[str, Any], loc: Loc) -> Any:
    node: Any = doc
    for part in loc[:-1]:
        node = node.get(part) if isinstance(node, Mapping) and isinstance(part, str) else None
    return node


def _delete(doc: dict[str, Any], loc: Loc) -> None:
    parent = _parent(doc, loc)
    if isinstance(parent, dict):
        parent.pop(loc[-1], None)


def _set(doc: dict[str, Any], loc: Loc, value: Any) -> bool:
    parent = _parent(doc, loc)
    if not isinstance(parent, dict):
        return False
    parent[loc[-1]] = value
    return True
