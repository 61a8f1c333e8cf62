"""Hypothesis strategies that draw JSON documents from a JSON Schema (the subset the spec schema
uses: $ref, const, enum, anyOf/oneOf, objects with properties, propertyNames and
additionalProperties, arrays, bounded numbers, patterned strings). Values stay inside the
schema's bounds but reach its edges, so what an editor accepts is what gets tried."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import strategies as st

JsonDict = dict[str, Any]
_SIBLINGS = ("pattern", "maxLength", "propertyNames")
_TEXT = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=12)


def from_schema(schema: JsonDict) -> st.SearchStrategy[Any]:
    """Documents valid against ``schema`` (whose ``$defs`` hold every ``$ref`` target)."""
    return _Drawer(schema.get("$defs", {})).of(schema)


class _Drawer:
    def __init__(self, defs: JsonDict) -> None:
        self.defs = defs

    def of(self, node: JsonDict) -> st.SearchStrategy[Any]:
        if "$ref" in node:
            return st.deferred(lambda: self.of(self.defs[node["$ref"].rsplit("/", 1)[1]]))
        if "const" in node:
            return st.just(node["const"])
        if "enum" in node:
            return st.sampled_from(node["enum"])
        for key in ("anyOf", "oneOf"):
            if key in node:
                shared = {k: node[k] for k in _SIBLINGS if k in node}
                return st.one_of([self.of({**shared, **branch}) for branch in node[key]])
        kind = node.get("type", "object" if "properties" in node else None)
        if kind == "null":
            return st.none()
        if kind == "boolean":
            return st.booleans()
        if kind == "integer":
            return self.integer(node)
        if kind == "number":
            return self.number(node)
        if kind == "string":
            return self.string(node)
        if kind == "array":
            items = self.of(node.get("items", {"type": "string"}))
            unique = json.dumps if node.get("uniqueItems") else None
            return st.lists(items, min_size=node.get("minItems", 0), max_size=4, unique_by=unique)
        if kind == "object":
            return self.object(node)
        return _TEXT | st.integers() | st.booleans()

    def integer(self, node: JsonDict) -> st.SearchStrategy[int]:
        low = node.get("minimum", -(2**63))
        if "exclusiveMinimum" in node:
            low = int(node["exclusiveMinimum"]) + 1
        return st.integers(min_value=int(low), max_value=int(node.get("maximum", 2**63)))

    def number(self, node: JsonDict) -> st.SearchStrategy[float | int]:
        low = node.get("minimum", node.get("exclusiveMinimum", -1e300))
        high = node.get("maximum", 1e300)
        floats = st.floats(
            min_value=low, max_value=high, exclude_min="exclusiveMinimum" in node, allow_nan=False
        )
        return floats | self.integer({**node, "maximum": int(high)})

    def string(self, node: JsonDict) -> st.SearchStrategy[str]:
        size = node.get("maxLength")
        if "pattern" in node:
            pattern: str = node["pattern"]
            # Python's '$' also matches before a final newline, and so draws one at times: the
            # values a Python check with re.match would let through.
            anchored = pattern.startswith("^") and pattern.endswith("$")
            drawn = st.from_regex(pattern, fullmatch=not anchored)
            return drawn.filter(lambda s: len(s) <= size) if size else drawn
        return _TEXT if size is None else st.text(max_size=min(size, 12))

    def object(self, node: JsonDict) -> st.SearchStrategy[JsonDict]:
        props: JsonDict = node.get("properties", {})
        required = set(node.get("required", []))
        fixed = st.fixed_dictionaries(
            {k: self.of(v) for k, v in props.items() if k in required},
            optional={k: self.of(v) for k, v in props.items() if k not in required},
        )
        extra = node.get("additionalProperties", not props)
        if extra is False or not extra:
            return fixed
        keys = self.string({"type": "string", **node.get("propertyNames", {})})
        values = self.of(extra if isinstance(extra, dict) else {})
        more = st.dictionaries(keys.filter(lambda k: k not in props), values, max_size=3)
        return st.tuples(fixed, more).map(lambda pair: {**pair[1], **pair[0]})
