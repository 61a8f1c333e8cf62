"""How a wire message is declared, and the one reader of every declared message.

A message is a frozen dataclass whose field types say what the JSON holds; bounds sit beside a
type as ``Annotated[int, Limits(ge=0)]`` and a field's description in its metadata (``doc``). That
one declaration serves every side: ``read`` turns a decoded JSON object into the message (the
rank's config strictly, a stored event's payload tolerantly), and the engine derives from it the
pydantic models of its HTTP API and the msgspec decoder of its ingest hot path
(``mlbench_tui.store.wire_models``). Standard library only.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal, TypeVar, Union, cast, get_args, get_origin

M = TypeVar("M")
READER = "mlbench.reader"  # field metadata: (value, the enclosing JSON object) -> the field's value
DOC = "mlbench.doc"  # field metadata: the field's description (the API document shows it)


class Invalid(ValueError):
    """A message that does not match its declaration; the text names the key and what it must be."""


@dataclass(frozen=True)
class Limits:
    """Bounds of a field's value, checked where it is read (``read``, pydantic, msgspec alike)."""

    ge: float | None = None
    le: float | None = None
    gt: float | None = None
    min_length: int | None = None
    max_length: int | None = None
    pattern: str | None = None  # searched in the string (anchor it: ^...$, "$" the string's very end)

    @property
    def python_pattern(self) -> str | None:
        """``pattern`` for Python's ``re`` (and msgspec, which uses it): a final ``$`` becomes
        ``\\Z``, since ``re``'s ``$`` also matches before a trailing newline, pydantic's does not."""
        if self.pattern is not None and self.pattern.endswith("$") and not self.pattern.endswith("\\$"):
            return self.pattern[:-1] + "\\Z"
        return self.pattern

    def problem(self, value: Any) -> str | None:
        """What ``value`` breaks, as "must be ..."; None when it keeps the bounds."""
        if isinstance(value, str | list | dict):
            unit = "characters" if isinstance(value, str) else "items"
            if self.min_length is not None and len(value) < self.min_length:
                return (
                    "must not be empty"
                    if self.min_length == 1
                    else f"must have at least {self.min_length} {unit}"
                )
            if self.max_length is not None and len(value) > self.max_length:
                return f"must have at most {self.max_length} {unit}"
            if (
                self.pattern is not None
                and isinstance(value, str)
                and re.search(self.python_pattern or "", value) is None
            ):
                return f"must match {self.pattern}"
            return None
        if self.gt is not None and not value > self.gt:
            return f"must be > {self.gt:g}"
        if self.ge is not None and self.le is not None and not self.ge <= value <= self.le:
            return f"must be between {self.ge} and {self.le}"
        if self.ge is not None and not value >= self.ge:
            return f"must be >= {self.ge:g}"
        if self.le is not None and not value <= self.le:
            return f"must be <= {self.le:g}"
        return None


def doc(text: str, **metadata: Any) -> dict[str, Any]:
    """Field metadata carrying a description: ``field(default=None, metadata=doc("..."))``."""
    return {DOC: text, **metadata}


def read(cls: type[M], document: Any, *, strict: bool, where: str = "") -> M:
    """The message ``cls`` read from a decoded JSON object; unknown keys are ignored.

    ``strict`` (a config): anything absent that has no default, mistyped or out of bounds raises
    ``Invalid`` naming the key (``where`` prefixes nested keys), and the message's own ``check``
    runs. Tolerant (a stored payload, of an earlier or later version): such a field takes its
    default instead. An absent key or a null for a field that cannot be null takes the default.
    """
    if not isinstance(document, Mapping):
        if strict:
            raise Invalid(f"{where.rstrip('.') or 'the document'} must be an object")
        document = {}
    hints = _hints(cast(type, cls))
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cast(Any, cls)):
        if not f.init:
            continue
        key = f"{where}{f.name}"
        has_default = f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
        reader: Callable[[Any, Mapping[str, Any]], Any] | None = f.metadata.get(READER)
        if reader is not None:  # absent too: the reader knows the field's default
            values[f.name] = reader(document.get(f.name), document)
            continue
        if f.name not in document:
            if not has_default:
                raise Invalid(f"missing key {key!r}")
            continue
        raw = document[f.name]
        if raw is None and not _nullable(hints[f.name]) and has_default:
            continue
        value = _convert(raw, hints[f.name], key, strict)
        if value is _DEFAULT:
            if not has_default:
                raise Invalid(f"{key!r} must be {_name(hints[f.name])}, got {raw!r}")
            continue
        values[f.name] = value
    message = cls(**values)
    check = getattr(message, "check", None)
    if strict and callable(check):
        check()
    return message


_DEFAULT: Any = object()  # a tolerant read's "take the field's default"


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    """A message's field types, resolved once per class (a report reads thousands of events)."""
    return typing.get_type_hints(cls, include_extras=True)


def _convert(value: Any, hint: Any, key: str, strict: bool) -> Any:
    """``value`` read as ``hint``; in strict mode a mismatch raises, else it is ``_DEFAULT``."""
    got = _as(value, hint, key, strict)
    if got is _DEFAULT and strict:
        raise Invalid(f"{key!r} must be {_name(hint)}, got {value!r}")
    return got


def _as(value: Any, hint: Any, key: str, strict: bool) -> Any:
    origin = get_origin(hint)
    if origin is Annotated:
        base, *extras = get_args(hint)
        got = _as(value, base, key, strict)
        if got is _DEFAULT:
            return got
        for limits in extras:
            problem = limits.problem(got) if isinstance(limits, Limits) else None
            if problem is not None:
                if strict:
                    raise Invalid(f"{key!r} {problem}, got {value!r}")
                return _DEFAULT
        return got
    if value is None:
        return None if _nullable(hint) else _DEFAULT
    if origin in (Union, types.UnionType):  # the first arm of the value's type, with its limits
        for arm in get_args(hint):
            if arm is not type(None) and _as(value, _bare(arm), key, False) is not _DEFAULT:
                return _as(value, arm, key, strict)
        return _DEFAULT
    if origin is Literal:
        if value in get_args(hint):
            return value
        if strict:
            allowed = ", ".join(str(a) for a in get_args(hint))
            raise Invalid(f"{key!r} must be one of {allowed}, got {value!r}")
        return _DEFAULT
    if hint is Any:
        return value
    if hint is bool:
        return value if isinstance(value, bool) else _DEFAULT
    if hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        integral = not strict and isinstance(value, float) and value.is_integer()
        return int(value) if integral else _DEFAULT
    if hint is float:
        number = isinstance(value, int | float) and not isinstance(value, bool)
        return float(value) if number and math.isfinite(value) else _DEFAULT
    if hint is str:
        return value if isinstance(value, str) else _DEFAULT
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        if not isinstance(value, Mapping):
            return _DEFAULT
        return read(hint, value, strict=strict, where=f"{key}.")
    if origin in (dict, Mapping) or hint in (dict, Mapping):
        if not isinstance(value, Mapping):
            return _DEFAULT
        item = get_args(hint)[1] if get_args(hint) else Any
        out = {}
        for k, v in value.items():
            got = _convert(v, item, f"{key}.{k}", strict) if strict else _as(v, item, key, False)
            if got is not _DEFAULT:
                out[str(k)] = got
        return out
    if origin in (list, tuple):
        if not isinstance(value, list | tuple):
            return _DEFAULT
        item = get_args(hint)[0] if get_args(hint) else Any
        items = [_convert(v, item, f"{key}[{i}]", strict) for i, v in enumerate(value)]
        if not strict and _DEFAULT in items:
            return _DEFAULT
        return tuple(items) if origin is tuple else items
    return value


def _bare(hint: Any) -> Any:
    """``hint`` without its ``Annotated`` limits."""
    return get_args(hint)[0] if get_origin(hint) is Annotated else hint


def _nullable(hint: Any) -> bool:
    if get_origin(hint) is Annotated:
        return _nullable(get_args(hint)[0])
    return hint is Any or (get_origin(hint) in (Union, types.UnionType) and type(None) in get_args(hint))


def _name(hint: Any) -> str:
    """A type as an error message says it: ``int``, ``int or float``, ``float or null``."""
    origin = get_origin(hint)
    if origin is Annotated:
        return _name(get_args(hint)[0])
    if origin in (Union, types.UnionType):
        return " or ".join(_name(arm) for arm in get_args(hint))
    if hint is type(None):
        return "null"
    if origin is Literal:
        return "one of " + ", ".join(str(a) for a in get_args(hint))
    if origin in (dict, Mapping) or (dataclasses.is_dataclass(hint) and isinstance(hint, type)):
        return "an object"
    if origin in (list, tuple):
        return "a list"
    return getattr(hint, "__name__", str(hint))


def to_json(message: Any) -> dict[str, Any]:
    """A message as the JSON object sent: NaN and infinity become null, and a field left at None
    is left out where the reader takes its default for an absent key (``read``)."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(message):
        value = jsonable(getattr(message, f.name))
        optional = f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
        if value is not None or not optional:
            out[f.name] = value
    return out


def jsonable(value: Any) -> Any:
    """``value`` as JSON holds it: NaN and infinity become None (JSON has neither)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    return value
