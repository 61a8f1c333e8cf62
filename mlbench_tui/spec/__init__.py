"""The benchmark spec language: models, the official task catalog, loading with diagnostics.

Imports stay light (pydantic, ruamel.yaml, stdlib): ``from mlbench_tui.spec import load_paths``.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "BenchmarkSpec": "mlbench_tui.spec.models",
    "LoadedSpec": "mlbench_tui.spec.loader",
    "load_paths": "mlbench_tui.spec.loader",
    "load_text": "mlbench_tui.spec.loader",
    "validate_data": "mlbench_tui.spec.loader",
    "TASKS": "mlbench_tui.spec.tasks",
    "TaskInfo": "mlbench_tui.spec.tasks",
    "get_task": "mlbench_tui.spec.tasks",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'mlbench_tui.spec' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
