"""Property: whatever YAML a user writes, loading yields valid specs or a SpecError, nothing else."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mlbench_tui.errors import SpecError
from mlbench_tui.plan import expand
from mlbench_tui.spec.loader import load_text

SETTINGS = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])

KEYS = st.sampled_from(
    [
        "apiVersion", "kind", "metadata", "spec", "name", "task", "workers", "backend", "goal", "hardware",
        "cpu", "gpu", "memory", "precision", "target", "data", "source", "hyperparameters", "env", "seed",
        "repeats", "max_time", "image", "batch_size", "lr", "dtypes", "kind ", "x",
    ]
) | st.text(min_size=1, max_size=8)  # fmt: skip

SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**40), max_value=2**40)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.sampled_from(
        ["1a", "0a", "gloo", "nccl", "mpi", "full", "light", "30m", "1xT4", "500m", "local", "${X}"]
    )
    | st.text(max_size=12)
)
VALUES = st.recursive(
    SCALARS,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(KEYS, children, max_size=5),
    max_leaves=20,
)

VALID = {
    "apiVersion": "mlbench/v1",
    "kind": "Benchmark",
    "metadata": {"name": "prop"},
    "spec": {
        "task": "1a",
        "workers": [1, 2],
        "backend": "gloo",
        "hardware": {"cpu": "1"},
        "data": "synthetic",
    },
}


def _check(text: str) -> None:
    try:
        loaded = load_text(text, "prop.yaml", environ={"X": "2"})
    except SpecError as exc:
        assert exc.issues, "a SpecError always carries at least one issue"
        for issue in exc.issues:
            assert issue.line >= 1 and issue.col >= 1 and issue.message
        return
    for item in loaded:
        assert expand(item.spec), "a valid spec always expands to at least one run"


@SETTINGS
@given(VALUES)
def test_arbitrary_documents(value: Any) -> None:
    _check(json.dumps(value))  # JSON is YAML


@SETTINGS
@given(st.text(alphabet=st.sampled_from(list("ab:- \n[]{}#&*!|>'\"%@`,?$\t1")), max_size=60))
def test_arbitrary_text(text: str) -> None:
    _check(text)


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, (*prefix, k))
    return out


@SETTINGS
@given(st.data())
def test_mutations_of_a_valid_spec(data: st.DataObject) -> None:
    doc = json.loads(json.dumps(VALID))
    path = data.draw(st.sampled_from(_paths(doc)[1:]))
    node = doc
    for key in path[:-1]:
        node = node[key]
    if data.draw(st.booleans()):
        node[path[-1]] = data.draw(VALUES)
    else:
        node[data.draw(KEYS)] = data.draw(VALUES)
    _check(json.dumps(doc))
