"""The JSON Schema of the spec language, generated from the models.

``mlbench schema`` prints it; ``specs/mlbench.schema.json`` is the committed copy that editors
use through the ``# yaml-language-server: $schema=...`` comment, and a test fails when it drifts.
"""

from __future__ import annotations

import json
from typing import Any

SCHEMA_ID = "https://mlbench-tui.dev/schemas/mlbench-v1.schema.json"


def json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) for ``apiVersion: mlbench/v1`` ``kind: Benchmark`` documents."""
    from mlbench_tui.spec.models import BenchmarkSpec

    schema = BenchmarkSpec.model_json_schema(by_alias=True, mode="validation")
    ordered: dict[str, Any] = {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": SCHEMA_ID}
    ordered.update({k: v for k, v in schema.items() if k != "$schema"})
    return ordered


def schema_text() -> str:
    """The schema exactly as committed: two-space indent, trailing newline."""
    return json.dumps(json_schema(), indent=2, ensure_ascii=False) + "\n"
