"""The spec reference (``docs/spec.md``): one section per field, and ``mlbench explain FIELD``.

Each section says what the field means (its description), its type with the short forms it
accepts, its default (what a spec that leaves it out gets), its bounds, an example in place in a
spec, and which targets honour it. Everything is read from the schema and from what a minimal spec
normalises to, so a field added to the models is documented here without another edit.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from mlbench_tui.reference.fields import Schema, SpecField, find_fields, spec_fields
from mlbench_tui.spec.tasks import TASKS

MINIMAL = {
    "apiVersion": "mlbench/v1",
    "kind": "Benchmark",
    "metadata": {"name": "example"},
    "spec": {"task": "1a"},
}
PATTERN_SHOWN = 40  # longer patterns (durations, quantities) are described in words instead
INTRO = """# Spec reference

A benchmark spec is a YAML document (several per file, or a directory of files) validated against
`specs/mlbench.schema.json`. `mlbench validate` reports every problem at once with `file:line:col`;
`mlbench explain FIELD` prints one section of this page, and `mlbench tasks TASK` a task's page
([tasks](tasks/README.md)). This page is generated from the schema (`mlbench docs`): edit the
models' descriptions, not this file.

```yaml
apiVersion: mlbench/v1
kind: Benchmark
metadata:
  name: resnet20-sweep
spec:
  task: resnet20-cifar10
  goal: light
  workers: [1, 2]
  backend: gloo
```

Each field below gives its type (with the short forms it accepts), its default (what a spec that
leaves it out gets, for task 1a where it depends on the task), its bounds, an example in place and
the targets that honour it.
"""


def _scalar(value: Any) -> str:
    """A value as a spec writes it (flow style, strings bare where YAML reads them back)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return (
            value
            if value and value.strip() == value and not any(c in value for c in ":#{}[],'\"")
            else json.dumps(value)
        )
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_scalar(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k}: {_scalar(v)}" for k, v in value.items()) + "}"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _number(value: Any) -> str:
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


def _branch_type(node: Schema, plural: bool = False) -> str:
    if "$ref" in node:
        return "a mapping (its fields below)"
    if "const" in node:
        return f"`{_scalar(node['const'])}`"
    if "enum" in node:
        names = ", ".join(f"`{_scalar(v)}`" for v in node["enum"])
        return names if plural else f"one of {names}"
    kind = node.get("type")
    words = {"integer": "an integer", "number": "a number", "string": "a string", "boolean": "true or false"}
    if kind in words:
        word = words[kind]
        return word.split(" ", 1)[1] + "s" if plural and kind != "boolean" else word
    if kind == "array":
        items = node.get("items")
        return "a list of " + (_branch_type(items, plural=True) if isinstance(items, Mapping) else "values")
    if kind == "object" or "properties" in node:
        extra = node.get("additionalProperties")
        if isinstance(extra, Mapping):
            return "a mapping of names to " + _branch_type(extra, plural=True)
        keys = ", ".join(f"`{k}`" for k in node.get("properties", {}))
        return f"a mapping of {keys} (below)" if keys else "a mapping"
    return "any value"


def _branches(node: Schema) -> list[Schema]:
    for key in ("anyOf", "oneOf"):
        if key in node:
            return [b for branch in node[key] for b in _branches(branch)]
    return [node]


def type_text(field: SpecField) -> str:
    """``an integer, or a list of integers``; ``(or null: unset)`` when it may be null."""
    branches = _branches(field.schema)
    nullable = any(b.get("type") == "null" for b in branches)
    words: list[str] = []
    for branch in branches:
        if branch.get("type") != "null" and (text := _branch_type(branch)) not in words:
            words.append(text)
    text = ", or ".join(words) or "any value"
    return text + (" (null: unset)" if nullable else "")


def _bounds_of(node: Schema, prefix: str = "") -> list[str]:
    out = []
    low = next(
        ((op, node[key]) for key, op in (("minimum", ">="), ("exclusiveMinimum", ">")) if key in node), None
    )
    high = next(
        ((op, node[key]) for key, op in (("maximum", "<="), ("exclusiveMaximum", "<")) if key in node), None
    )
    if low and high and low[0] == ">=" and high[0] == "<=":
        out.append(f"{prefix}{_number(low[1])} to {_number(high[1])}")
    else:
        out += [f"{prefix}{bound[0]} {_number(bound[1])}" for bound in (low, high) if bound]
    for key, words in (("minLength", "at least {} characters"), ("maxLength", "at most {} characters"),
                       ("minItems", "at least {} item(s)"), ("maxItems", "at most {} items")):  # fmt: skip
        if key in node:
            out.append(prefix + words.format(node[key]))
    if node.get("uniqueItems"):
        out.append(prefix + "no value twice")
    pattern = node.get("pattern")
    if isinstance(pattern, str) and len(pattern) <= PATTERN_SHOWN:
        out.append(f"{prefix}matches `{pattern}`")
    names = node.get("propertyNames")
    if isinstance(names, Mapping) and isinstance(names.get("pattern"), str):
        out.append(f"names match `{names['pattern']}`")
    note = node.get("description")
    if note and "properties" not in node and note.startswith("At most"):
        out.append(prefix + note.rstrip(".").replace("At most", "at most"))
    items = node.get("items")
    if isinstance(items, Mapping) and "$ref" not in items:
        out += _bounds_of(items, "each ")
    extra = node.get("additionalProperties")
    if isinstance(extra, Mapping):
        out += _bounds_of(extra, "each value ")
    return out


def bounds_text(field: SpecField) -> str:
    found: list[str] = []
    for branch in _branches(field.schema):
        found += [b for b in _bounds_of(branch) if b not in found]
    return "; ".join(found) or "none"


def _minimal_values() -> dict[str, Any]:
    """What a minimal spec (task 1a, nothing else) normalises to, by dotted path."""
    from mlbench_tui.spec.loader import validate_data

    spec = validate_data(MINIMAL, "<minimal>").model_dump(mode="json", by_alias=True, exclude_none=False)
    flat: dict[str, Any] = {}

    def walk(value: Any, path: str) -> None:
        flat[path] = value
        if isinstance(value, Mapping):
            for key, sub in value.items():
                walk(sub, f"{path}.{key}" if path else str(key))

    walk(spec, "")
    return flat


def default_text(field: SpecField, values: Mapping[str, Any]) -> str:
    if field.required:
        return "required"
    if "default" in field.schema:
        value = field.schema["default"]
        return "unset" if value is None else f"`{_scalar(value)}`"
    if field.variant is None and field.path in values:
        value = _without_nulls(values[field.path])
        return "unset" if value in (None, {}, []) else f"`{_scalar(value)}`"
    return "unset" if not field.children else "see its fields"


def _without_nulls(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _without_nulls(v) for k, v in value.items() if v not in (None, {}, [])}
    return value


def _nodes(node: Schema) -> list[Schema]:
    """A node and every alternative nested in it, outermost first."""
    found = [node]
    for key in ("anyOf", "oneOf"):
        for branch in node.get(key, ()):
            found += _nodes(branch)
    return found


def example_value(field: SpecField) -> Any:
    for branch in _nodes(field.schema):
        examples = branch.get("examples")
        if examples:
            return examples[-1] if len(examples) > 1 and isinstance(examples[-1], list) else examples[0]
    default = field.schema.get("default")
    if default is not None:
        return default
    for branch in _branches(field.schema):
        if "const" in branch:
            return branch["const"]
        if "enum" in branch:
            return branch["enum"][0]
    if field.path == "spec.hyperparameters":  # a knob task 1a lets a spec turn, at its default
        task = TASKS["1a"]
        name = "batch_size" if "batch_size" in task.overridable else sorted(task.overridable)[0]
        return {name: task.defaults[name]}
    kind = next((b.get("type") for b in _branches(field.schema) if b.get("type") not in (None, "null")), None)
    placeholder = field.name.removesuffix("[]").upper()  # the CLI's way of naming a value to fill in
    return {
        "integer": 1,
        "number": 1.5,
        "string": placeholder,
        "boolean": True,
        "array": [],
        "object": {},
    }.get(kind or "", placeholder)


def example_text(field: SpecField) -> str:
    """The field in place in a spec (a target's field with its ``kind``)."""
    parts = field.path.split(".")
    lines: list[str] = []
    for depth, part in enumerate(parts[:-1]):
        item = part.endswith("[]")
        name = part.removesuffix("[]")
        lines.append("  " * depth + f"{name}:")
        if field.variant is not None and name == "target":
            lines.append("  " * (depth + 1) + f"kind: {field.variant}" if parts[-1] != "kind" else "")
        if item:
            parts[depth + 1] = "- " + parts[depth + 1]
    indent = "  " * (len(parts) - 1)
    lines.append(f"{indent}{parts[-1]}: {_scalar(example_value(field))}")
    body = "\n".join(line for line in lines if line)
    return f"```yaml\n{body}\n```"


def _has_value_form(field: SpecField) -> bool:
    """Whether the field is written as a value (or has a short form), not only as a mapping."""
    forms = [b for b in _branches(field.schema) if b.get("type") != "null"]
    return not field.children or any("$ref" not in b and not b.get("properties") for b in forms)


def targets_text(field: SpecField) -> str:
    return ", ".join(f"{kind} ({note})" if note else kind for kind, note in field.targets())


def field_section(field: SpecField, values: Mapping[str, Any]) -> str:
    """A field's section of the reference, as Markdown (what ``mlbench explain`` prints)."""
    level = "##" if field.path.count(".") <= 1 and field.children else "###"
    description = " ".join(str(field.schema.get("description", "")).split())
    lines = [f"{level} {field.heading}", ""]
    if description:
        lines += [description, ""]
    lines += [
        f"- type: {type_text(field)}",
        f"- default: {default_text(field, values)}",
        f"- bounds: {bounds_text(field)}",
        f"- targets: {targets_text(field)}",
    ]
    if _has_value_form(field):
        lines += ["- example:", "", *("  " + line for line in example_text(field).splitlines())]
    lines.append("")
    if field.path == "spec.hyperparameters":
        lines += [hyperparameters_note(), ""]
    return "\n".join(lines)


def hyperparameters_note() -> str:
    """Which hyperparameters each task lets a spec override (its page has the rest)."""
    rows = [
        f"- [{t.id} {t.name}](tasks/{t.id}.md): "
        + (", ".join(f"`{k}`" for k in sorted(t.overridable)) or "none")
        for t in TASKS.values()
    ]
    return (
        "What each task lets a spec override (bounds, defaults and the fixed ones on its page):\n\n"
        + "\n".join(rows)
    )


def spec_page(fields: Sequence[SpecField] | None = None) -> str:
    """The whole reference page: the introduction and every field."""
    fields = list(fields) if fields is not None else spec_fields()
    values = _minimal_values()
    contents = "\n".join(
        "  " * max(0, f.path.count(".") - 1) + f"- [{f.heading}](#{f.anchor})" for f in fields
    )
    body = "\n".join(field_section(f, values) for f in fields)
    return f"{INTRO}\n## Fields\n\n{contents}\n\n{body}".rstrip() + "\n"


def explain(query: str) -> str | None:
    """The sections of the fields ``query`` names (a section with its fields), or None."""
    fields = spec_fields()
    found = find_fields(query, fields)
    if not found:
        return None
    values = _minimal_values()
    return "\n".join(field_section(f, values) for f in found).rstrip() + "\n"


def field_names() -> list[str]:
    """Every field's path (for did-you-mean)."""
    return [f.path for f in spec_fields()]
