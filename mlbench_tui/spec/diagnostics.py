"""Turn pydantic validation errors and policy issues into located, human messages.

A pydantic error location such as ``("spec", "target", "kubernetes", "image")`` is cleaned to
the keys that exist in the document, looked up in the position index the loader built from
ruamel's line/column data, and phrased as ``spec.target: missing required key 'image'``.
Misspelled keys and enum values get a ``did you mean`` hint from difflib.
"""

from __future__ import annotations

import difflib
import re
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from mlbench_tui.errors import SpecIssue

Loc = tuple[str | int, ...]

# Keys people reach for that the spec spells differently.
_KEY_ALIASES: dict[str, str] = {
    "timeout": "max_time",
    "time_limit": "max_time",
    "world_size": "workers",
    "nodes": "workers",
    "num_workers": "workers",
    "ranks": "workers",
    "backends": "backend",
    "gpus": "gpu",
    "cpus": "cpu",
    "mem": "memory",
    "hyperparams": "hyperparameters",
    "hparams": "hyperparameters",
    "environment": "env",
    "price": "price_per_hour",
    "repeat": "repeats",
    "runs": "repeats",
    "api_version": "apiVersion",
    "apiversion": "apiVersion",
    "nodeSelector": "node_selector",
    "serviceAccount": "service_account",
    "imagePullPolicy": "image_pull_policy",
    "serviceAccountName": "service_account",
}

_TYPE_WORDS = {
    "string_type": "a string",
    "int_type": "an integer",
    "float_type": "a number",
    "bool_type": "true or false",
    "dict_type": "a mapping",
    "model_type": "a mapping",
    "list_type": "a list",
    "model_attributes_type": "a mapping",
    "finite_number": "a finite number",
    "int_from_float": "an integer",
}


@dataclass(frozen=True)
class PolicyIssue:
    """A rule violation at ``loc`` (a path into the spec document), with an optional hint."""

    loc: Loc
    message: str
    hint: str | None = None
    at_key: bool = False  # point at the key itself (unknown or fixed keys), not its value


@dataclass
class Positions:
    """Where each node of one YAML document starts (1-based line and column)."""

    values: dict[Loc, tuple[int, int]] = field(default_factory=dict)
    keys: dict[Loc, tuple[int, int]] = field(default_factory=dict)
    start: tuple[int, int] = (1, 1)

    def of_value(self, loc: Loc) -> tuple[int, int]:
        """Position of the value at ``loc``, or of its closest ancestor that has one."""
        for i in range(len(loc), 0, -1):
            pos = self.values.get(loc[:i])
            if pos:
                return pos
        return self.start

    def of_key(self, loc: Loc) -> tuple[int, int]:
        """Position of the key naming ``loc`` (falls back to the value's position)."""
        return self.keys.get(loc) or self.of_value(loc)


_PLAIN_KEY = re.compile(r"^[A-Za-z0-9_@<>/-]+$")


def dotted(loc: Loc) -> str:
    """``("spec", "backend", 1)`` -> ``spec.backend[1]``; a key with spaces, dots or other
    characters is quoted (``node_selector['gpu type']``), so a message stays on one line."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif _PLAIN_KEY.fullmatch(str(part)):
            out += ("." if out else "") + str(part)
        else:
            out += f"[{str(part)!r}]"
    return out or "document"


def did_you_mean(word: str, candidates: list[str] | tuple[str, ...]) -> str | None:
    """``did you mean 'x'?`` for the closest candidate, or None."""
    alias = _KEY_ALIASES.get(word)
    if alias and alias in candidates:
        return f"did you mean '{alias}'?"
    match = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.6)
    if not match and len(word) >= 3:
        match = [c for c in candidates if c.lower().startswith(word.lower())][:1]
    if not match:
        lowered = {c.lower(): c for c in candidates}
        if word.lower() in lowered:
            match = [lowered[word.lower()]]
    return f"did you mean '{match[0]}'?" if match else None


def clean_loc(loc: Loc, data: Any) -> tuple[Loc, Loc]:
    """Split a pydantic loc into the part present in ``data`` and the rest.

    Segments that are not keys of the data (union tags such as ``'kubernetes'`` or ``'custom'``,
    validator names) are dropped; the first missing key and everything after it is the rest.
    """
    present: list[str | int] = []
    node = data
    parts = list(loc)
    i = 0
    while i < len(parts):
        part = parts[i]
        in_map = isinstance(node, Mapping) and isinstance(part, str) and part in node
        in_list = isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node)
        if in_map or in_list:
            present.append(part)
            node = node[part]
        elif isinstance(node, Mapping) and i == len(parts) - 1:
            return tuple(present), (part,)
        elif not isinstance(part, int) and i + 1 < len(parts):
            i += 1  # a union tag or validator name: skip it
            continue
        else:
            return tuple(present), tuple(parts[i:])
        i += 1
    return tuple(present), ()


def _unwrap(annotation: Any) -> list[Any]:
    """The concrete types inside Annotated/Optional/Union wrappers."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _unwrap(typing.get_args(annotation)[0])
    if origin is typing.Union or origin is types.UnionType:
        out: list[Any] = []
        for arg in typing.get_args(annotation):
            out.extend(_unwrap(arg))
        return out
    return [annotation]


def _model_choice(annotation: Any, value: Any) -> type[BaseModel] | None:
    models = [t for t in _unwrap(annotation) if isinstance(t, type) and issubclass(t, BaseModel)]
    if len(models) <= 1:
        return models[0] if models else None
    kind = value.get("kind") if isinstance(value, Mapping) else None
    for model in models:
        kind_field = model.model_fields.get("kind")
        if kind_field is not None and kind in typing.get_args(kind_field.annotation):
            return model
    return None


def keys_at(root: type[BaseModel], loc: Loc, data: Any) -> list[str]:
    """The keys the model at ``loc`` accepts (aliases where set), for 'did you mean' hints."""
    model: type[BaseModel] | None = root
    node = data
    for part in loc:
        if model is None:
            return []
        if isinstance(part, int):
            return []
        fields = {(f.alias or name): f for name, f in model.model_fields.items()}
        info = fields.get(part)
        if info is None:
            return []
        node = node.get(part) if isinstance(node, Mapping) else None
        annotation = info.annotation
        model = _model_choice(annotation, node)
        if model is None:
            # a list of models (tolerations): look through the list type
            for t in _unwrap(annotation):
                if typing.get_origin(t) is list:
                    model = _model_choice(typing.get_args(t)[0], None)
    if model is None:
        return []
    return [(f.alias or name) for name, f in model.model_fields.items()]


def _choices(expected: str) -> list[str]:
    return re.findall(r"'([^']*)'", expected)


def _fmt_input(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def issue_from_error(
    error: Mapping[str, Any], data: Any, positions: Positions, file: str, root: type[BaseModel]
) -> SpecIssue:
    """One pydantic error (``ValidationError.errors()`` item) as a located ``SpecIssue``."""
    etype: str = error["type"]
    at_key = tuple(error["loc"])[-1:] == ("[key]",)  # a mapping's key (a label's) is what failed
    loc, rest = clean_loc(tuple(error["loc"])[: -1 if at_key else None], data)
    where = dotted(loc)
    ctx = error.get("ctx") or {}
    value = error.get("input")
    hint: str | None = None

    if etype == "extra_forbidden":
        key = str(loc[-1]) if loc else "?"
        parent = loc[:-1]
        line, col = positions.of_key(loc)
        message = f"unknown key '{key}' in {dotted(parent)}"
        hint = did_you_mean(key, keys_at(root, parent, data))
        if hint is None and parent == ("spec",) and key in ("name", "labels", "description"):
            hint = f"'{key}' belongs under metadata"
        return SpecIssue(file, line, col, message, hint)
    if etype == "missing":
        key = str(rest[-1]) if rest else str(loc[-1]) if loc else "?"
        line, col = positions.of_key(loc) if loc else positions.start
        where_parent = dotted(loc) if loc else "the document"
        return SpecIssue(file, line, col, f"missing required key '{key}' in {where_parent}")

    line, col = (positions.of_key(loc) if at_key else positions.of_value(loc)) if loc else positions.start
    if etype == "union_tag_invalid":
        tag = ctx.get("tag")
        choices = _choices(str(ctx.get("expected_tags", "")))
        kind_loc = (*loc, "kind")
        line, col = positions.of_value(kind_loc)
        message = f"{dotted(kind_loc)}: unknown kind '{tag}': expected one of {', '.join(choices)}"
        return SpecIssue(file, line, col, message, did_you_mean(str(tag), choices))
    if etype == "union_tag_not_found":
        return SpecIssue(file, line, col, f"{where}: missing key 'kind' (one of 'local', 'kubernetes')")
    if etype == "literal_error":
        choices = _choices(str(ctx.get("expected", "")))
        raw = ctx.get("raw", value)
        if isinstance(raw, str):
            hint = did_you_mean(raw, choices)
        shown = raw
        msg = str(error["msg"])
        if msg.startswith("Input should be"):
            msg = f"invalid value {_fmt_input(shown)}: expected one of {', '.join(repr(c) for c in choices)}"
        return SpecIssue(file, line, col, f"{where}: {msg}", hint)
    if etype in _TYPE_WORDS:
        message = f"{where} must be {_TYPE_WORDS[etype]}, got {_fmt_input(value)}"
        if etype == "string_type" and isinstance(value, int | float) and not isinstance(value, bool):
            hint = f'quote the value: "{value}"'
        elif etype == "string_type" and isinstance(value, bool):
            hint = 'quote the value: "true"/"false" (YAML reads yes/no/true/false as booleans)'
        return SpecIssue(file, line, col, message, hint)
    msg = str(error["msg"])
    if msg.startswith("Input should be "):
        msg = f"must be {msg[len('Input should be ') :]}, got {_fmt_input(value)}"
        return SpecIssue(file, line, col, f"{where} {msg}")
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    hint = ctx.get("hint") if isinstance(ctx.get("hint"), str) else None  # a validator's own hint
    return SpecIssue(file, line, col, f"{where}: {msg}", hint)
