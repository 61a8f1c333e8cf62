"""The committed JSON Schema matches the models, and example specs satisfy it."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from ruamel.yaml import YAML

from mlbench_tui.spec.schema import schema_text

ROOT = Path(__file__).resolve().parents[2]
SCHEMA_FILE = ROOT / "specs" / "mlbench.schema.json"
EXAMPLES = sorted((ROOT / "specs").glob("*.yaml"))


def test_committed_schema_does_not_drift() -> None:
    assert SCHEMA_FILE.read_text(encoding="utf-8") == schema_text(), (
        "specs/mlbench.schema.json is stale: run `mlbench schema > specs/mlbench.schema.json`"
    )


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_examples_satisfy_the_schema(path: Path) -> None:
    validator = jsonschema.Draft202012Validator(json.loads(SCHEMA_FILE.read_text()))
    for doc in YAML(typ="safe").load_all(path.read_text()):
        errors = [e.message for e in validator.iter_errors(json.loads(json.dumps(doc)))]
        assert errors == []


def test_schema_rejects_unknown_keys() -> None:
    validator = jsonschema.Draft202012Validator(json.loads(SCHEMA_FILE.read_text()))
    doc = {
        "apiVersion": "mlbench/v1",
        "kind": "Benchmark",
        "metadata": {"name": "x"},
        "spec": {"task": "1a", "wokers": 2},
    }
    assert not validator.is_valid(doc)
    doc["spec"] = {"task": "1a", "workers": 2}
    assert validator.is_valid(doc)


def test_the_task_selects_what_the_schema_accepts_as_hyperparameters() -> None:
    validator = jsonschema.Draft202012Validator(json.loads(SCHEMA_FILE.read_text()))

    def valid(task: str, hyperparameters: dict[str, object]) -> bool:
        spec = {"task": task, "hyperparameters": hyperparameters}
        return validator.is_valid(
            {"apiVersion": "mlbench/v1", "kind": "Benchmark", "metadata": {"name": "x"}, "spec": spec}
        )

    assert valid("0a", {"sizes_max_exp": 3, "dtypes": ["fp32"]})
    assert not valid("1a", {"sizes_max_exp": 3})  # another task's key
    assert valid("resnet20-cifar10", {"batch_size": 64, "channels_last": "auto"})
    assert not valid("1a", {"momentum": 0.5})  # fixed by the task
    assert not valid("1a", {"plateau_factor": 1.5})  # out of its bounds
    assert not valid("4b", {"global_batch_tokens": "many"})
