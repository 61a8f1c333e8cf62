"""The wire contract's messages as the engine validates them: derived, never declared again.

A message is declared once, in ``mlbench_worker.wire`` (a dataclass; ``wire_types.Limits`` beside a
type, a description in a field's metadata). From that declaration this module builds the pydantic
model of the HTTP API (its OpenAPI document, its 422 reasons, the client's typed requests) and the
msgspec struct the server's ingest decodes metric batches with (``server.ingest``, the hot path),
so the API, the server and the worker's reader cannot disagree on a field, a bound or a default.
Floats are finite on the wire (JSON has no NaN): pydantic's ``FiniteFloat``, msgspec's bounds.
"""

from __future__ import annotations

import dataclasses
import sys
import types
import typing
from collections.abc import Mapping
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import msgspec
from mlbench_worker.wire_types import DOC, Limits
from pydantic import BaseModel, ConfigDict, Field, FiniteFloat, create_model

_FINITE = msgspec.Meta(ge=-sys.float_info.max, le=sys.float_info.max)
_models: dict[type, type[BaseModel]] = {}
_structs: dict[tuple[type, frozenset[str]], type[msgspec.Struct]] = {}


def pydantic_model(cls: type) -> type[BaseModel]:
    """The pydantic model of the wire message ``cls``: same name, fields, bounds, defaults and
    descriptions; unknown keys refused (``extra="forbid"``)."""
    model = _models.get(cls)
    if model is None:
        hints = typing.get_type_hints(cls, include_extras=True)
        fields: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            annotation, limits = _split(hints[f.name])
            field: dict[str, Any] = {**_bounds(limits), "description": f.metadata.get(DOC)}
            if f.default is not dataclasses.MISSING:
                field["default"] = f.default
            elif f.default_factory is not dataclasses.MISSING:
                field["default_factory"] = f.default_factory
            fields[f.name] = (_pydantic_type(annotation), Field(**field))
        model = create_model(cls.__name__, __config__=ConfigDict(extra="forbid"), **fields)
        _models[cls] = model
    return model


def msgspec_struct(cls: type, *, skip_patterns: frozenset[str] = frozenset()) -> type[msgspec.Struct]:
    """The msgspec struct of the wire message ``cls`` (nested messages too): same fields, bounds and
    defaults, unknown keys refused. The patterns of the fields named in ``skip_patterns`` are left
    to the caller, which checks them where it is cheaper (``server.ingest``: once per new name)."""
    struct = _structs.get((cls, skip_patterns))
    if struct is None:
        hints = typing.get_type_hints(cls, include_extras=True)
        fields: list[tuple[str, Any] | tuple[str, Any, Any]] = []
        for f in dataclasses.fields(cls):
            annotation = _msgspec_type(hints[f.name], f.name in skip_patterns, skip_patterns)
            if f.default is not dataclasses.MISSING:
                fields.append((f.name, annotation, f.default))
            elif f.default_factory is not dataclasses.MISSING:
                fields.append((f.name, annotation, msgspec.field(default_factory=f.default_factory)))
            else:
                fields.append((f.name, annotation))
        struct = msgspec.defstruct(cls.__name__, fields, forbid_unknown_fields=True, gc=False, kw_only=True)
        _structs[cls, skip_patterns] = struct
    return struct


def _split(hint: Any) -> tuple[Any, Limits | None]:
    """A field's type and the limits on the field itself (``Annotated`` at its top)."""
    if get_origin(hint) is Annotated:
        base, *extras = get_args(hint)
        return base, next((x for x in extras if isinstance(x, Limits)), None)
    return hint, None


def _bounds(limits: Limits | None) -> dict[str, Any]:
    if limits is None:
        return {}
    values = {
        "ge": limits.ge,
        "le": limits.le,
        "gt": limits.gt,
        "min_length": limits.min_length,
        "max_length": limits.max_length,
        "pattern": limits.pattern,
    }
    return {k: v for k, v in values.items() if v is not None}


def _pydantic_type(hint: Any) -> Any:
    origin = get_origin(hint)
    if origin is Annotated:
        base, limits = _split(hint)
        return Annotated[_pydantic_type(base), Field(**_bounds(limits))]
    if origin in (Union, types.UnionType):
        return Union[tuple(_pydantic_type(arm) for arm in get_args(hint))]  # noqa: UP007 (built)
    if origin is list:
        return list[_pydantic_type(get_args(hint)[0])]  # type: ignore[misc]
    if origin in (dict, Mapping):
        return dict[str, Any]
    if hint is float:
        return FiniteFloat
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        return pydantic_model(hint)
    if origin is Literal or hint in (int, str, bool, type(None)) or hint is Any:
        return hint
    raise TypeError(f"no pydantic type for {hint!r}")


def _msgspec_type(hint: Any, skip_pattern: bool, skip_patterns: frozenset[str]) -> Any:
    origin = get_origin(hint)
    if origin is Annotated:
        base, limits = _split(hint)
        bounds = _bounds(limits)
        bounds.pop("pattern", None)
        if limits is not None and limits.pattern is not None and not skip_pattern:
            bounds["pattern"] = limits.python_pattern  # msgspec matches with Python's re
        inner = _msgspec_type(base, skip_pattern, skip_patterns)
        return Annotated[inner, msgspec.Meta(**bounds)] if bounds else inner
    if origin in (Union, types.UnionType):
        return Union[tuple(_msgspec_type(arm, skip_pattern, skip_patterns) for arm in get_args(hint))]  # noqa: UP007
    if origin is list:
        return list[_msgspec_type(get_args(hint)[0], skip_pattern, skip_patterns)]  # type: ignore[misc]
    if origin in (dict, Mapping):
        return dict[str, Any]
    if hint is float:
        return Annotated[float, _FINITE]
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        return msgspec_struct(hint, skip_patterns=skip_patterns)
    if origin is Literal or hint in (int, str, bool, type(None)) or hint is Any:
        return hint
    raise TypeError(f"no msgspec type for {hint!r}")
