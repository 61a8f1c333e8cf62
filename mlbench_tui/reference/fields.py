"""Every field of the spec language, read from its JSON Schema: where it sits, its type, default,
bounds, an example and which targets honour it.

The schema is the models' own (``spec.schema``), so a field added to a model appears here with no
other edit. A union of models (the target kinds) gives each kind's fields their own entries;
short forms (``workers: 4`` for a sweep of one) are part of a field's type.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from mlbench_tui.spec.schema import json_schema

TARGET_KINDS = ("local", "kubernetes", "slurm")
# What a target does with a field other than honouring it (a field not named here is honoured by
# every target; a target section's fields by their own kind).
TARGET_NOTES: Mapping[str, Mapping[str, str]] = {
    "spec.framework": {"slurm": "refuses tensorflow before submitting"},
    "spec.hardware.memory": {"local": "recorded, not enforced", "kubernetes": "the pod's request and limit",
                             "slurm": "--mem-per-cpu (--mem per node without a CPU count)"},
    "spec.hardware.cpu": {"kubernetes": "the pod's request and limit", "slurm": "--cpus-per-task"},
}  # fmt: skip

Schema = Mapping[str, Any]


@dataclass(frozen=True)
class SpecField:
    """One field: its dotted path from the document's top (``spec.hardware.gpu``), the target kind
    its section belongs to (None: every kind), and what the schema says of it."""

    path: str
    schema: Schema
    required: bool
    variant: str | None = None
    children: bool = False  # a section (an object of fields) rather than a value

    @property
    def name(self) -> str:
        return self.path.rsplit(".", 1)[-1]

    @property
    def anchor(self) -> str:
        """The Markdown heading's id (GitHub's rule: lowercase, punctuation dropped)."""
        text = self.heading.lower()
        return "".join(c for c in text.replace(" ", "-") if c.isalnum() or c in "-_")

    @property
    def heading(self) -> str:
        return f"{self.path} ({self.variant} target)" if self.variant else self.path

    def targets(self) -> list[tuple[str, str]]:
        """``(target kind, how it honours the field)``: its own kind for a target's field, every
        kind otherwise, with what a target does differently."""
        if self.variant is not None:
            return [(self.variant, "")]
        notes = TARGET_NOTES.get(self.path, {})
        return [(kind, notes.get(kind, "")) for kind in TARGET_KINDS]


def _resolve(node: Schema, defs: Mapping[str, Schema]) -> Schema:
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        return {**defs[ref.removeprefix("#/$defs/")], **{k: v for k, v in node.items() if k != "$ref"}}
    return node


def _branches(node: Schema) -> list[Schema]:
    """A node's alternatives (``anyOf``/``oneOf``, nested ones flattened), or the node itself."""
    for key in ("anyOf", "oneOf"):
        if key in node:
            return [b for branch in node[key] for b in _branches(branch)]
    return [node]


def _models(node: Schema, defs: Mapping[str, Schema]) -> list[tuple[str, Schema]]:
    """The object models among a node's alternatives (a list's items: ``name[]``), by their name."""
    found = []
    for branch in _branches(node):
        if branch.get("type") == "array" and isinstance(branch.get("items"), Mapping):
            found += [(f"{name}[]", model) for name, model in _models(branch["items"], defs)]
            continue
        ref = branch.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            name = ref.removeprefix("#/$defs/")
            if "properties" in defs[name]:
                found.append((name, defs[name]))
        elif branch.get("properties"):  # an inline mapping ({count, type, strict})
            found.append(("", branch))
    return found


def _variant(model: Schema) -> str | None:
    """The target kind a model is (its ``kind`` constant), if it is one."""
    kind = model.get("properties", {}).get("kind", {})
    value = kind.get("const", (kind.get("enum") or [None])[0])
    return value if value in TARGET_KINDS else None


def _walk(model: Schema, prefix: str, defs: Mapping[str, Schema], variant: str | None) -> Iterator[SpecField]:
    required = set(model.get("required", ()))
    for name, node in model.get("properties", {}).items():
        path = f"{prefix}{name}"
        models = _models(node, defs)
        yield SpecField(path, _resolve(node, defs), name in required, variant, bool(models))
        for model_name, sub in models:
            kind = _variant(sub)
            inner = f"{path}[]." if model_name.endswith("[]") else f"{path}."
            yield from _walk(sub, inner, defs, kind if kind is not None else variant)


def spec_fields() -> list[SpecField]:
    """Every field of a spec document, in the schema's order (a section before its fields)."""
    schema = json_schema()
    defs: Mapping[str, Schema] = schema.get("$defs", {})
    return list(_walk(schema, "", defs, None))


def find_fields(query: str, fields: list[SpecField]) -> list[SpecField]:
    """The fields ``query`` names: a path (``spec.hardware.gpu``), a path without ``spec.``
    (``hardware.gpu``) or a name's tail (``gpu``), with every field under a section it names."""
    wanted = query.strip().strip(".").lower()
    exact = [f for f in fields if f.path.lower() in (wanted, f"spec.{wanted}", f"metadata.{wanted}")] or [
        f for f in fields if f.path.lower().endswith("." + wanted)
    ]
    found: list[SpecField] = []
    for field in exact:
        found += [
            f
            for f in fields
            if (f.path == field.path or f.path.startswith(field.path + ".")) and f not in found
        ]
    return found
