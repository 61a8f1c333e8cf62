"""Property: whatever a file holds, ``mlbench validate`` (the CLI entry point, in this process)
exits 0 or 2 without a traceback, within a time bound; and a spec it accepts plans, dry-runs, and
gives worker configs the ranks' own parser accepts.

Three kinds of input: any bytes, any structure of YAML values (with YAML's own syntax: anchors,
aliases, merges, tags), and a valid spec of every task and target with one field mutated
(replaced, removed, added, or given a hostile string or number).
"""

from __future__ import annotations

import contextlib
import io
import json
import tempfile
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mlbench_worker.config import parse_config

from mlbench_tui.cli import main
from mlbench_tui.plan import expand, worker_config
from mlbench_tui.spec.loader import load_paths
from mlbench_tui.spec.tasks import TASKS
from mlbench_tui.spec.templates import spec_template

SETTINGS = settings(
    max_examples=60, deadline=timedelta(seconds=20), suppress_health_check=[HealthCheck.too_slow]
)
"""Moderate: the three properties take a few seconds each on 2 cores. The deadline is the time
bound: one validate of any input is far below it (the loader's caps guard every costly step)."""


def _cli(argv: list[str]) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(argv)
    return code, err.getvalue()


@contextlib.contextmanager
def _file(data: bytes) -> Iterator[Path]:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "spec.yaml"
        path.write_bytes(data)
        yield path


def _check(data: bytes) -> None:
    """validate exits 0 or 2 without a traceback; what it accepts plans, dry-runs and parses."""
    with _file(data) as path:
        code, err = _cli(["validate", str(path)])
        assert code in (0, 2), err
        assert "Traceback" not in err
        if code == 2:
            assert f"{path}:" in err  # every problem located in the file
            return
        for argv in (["plan", "-o", "json"], ["apply", "--dry-run"]):
            code, err = _cli([*argv, str(path)])
            assert code == 0, (argv, err)
        for item in load_paths([path]):
            for plan in expand(item.spec):
                parse_config(json.loads(json.dumps(worker_config(plan, "r-prop"))))


@SETTINGS
@given(st.binary(max_size=3000))
def test_any_bytes(data: bytes) -> None:
    _check(data)


KEYS = st.sampled_from(
    ["apiVersion", "kind", "metadata", "name", "spec", "task", "workers", "backend", "data", "env",
     "hyperparameters", "<<", "? x", "options", "target", "kind ", "tаsk"]
) | st.text(min_size=1, max_size=6)  # fmt: skip
SCALARS = st.sampled_from(
    ["1a", "mlbench/v1", "Benchmark", "synthetic", "gloo", "~", "null", "yes", "0x1F", "1e400", ".nan",
     "99999999999999999999999", "'quoted'", '"\\u202e"', "2024-01-01", "1:30", "&a x", "*a", "!!int x",
     "!!python/object:os.system {}", "!foo bar", "${X}", "|\n  block"]
) | st.text(max_size=10)  # fmt: skip


def _yaml(node: Any, depth: int = 0) -> str:
    """YAML text of a generated structure, block style (flow styles come from the scalars)."""
    pad = "  " * depth
    if isinstance(node, dict):
        if not node:
            return "{}"
        return "\n" + "\n".join(f"{pad}{k}: {_yaml(v, depth + 1)}" for k, v in node.items())
    if isinstance(node, list):
        if not node:
            return "[]"
        return "\n" + "\n".join(f"{pad}- {_yaml(v, depth + 1)}" for v in node)
    return str(node).replace("\n", "\n" + pad)


PREFIXES = [
    "",
    "%YAML 1.1\n---\n",
    "%YAML 1.0\n---\n",
    "%YAML 2.5\n",
    "%TAG ! tag:x,1:\n---\n",
    "--- &a\n",
    "a: &a {b: 1}\n",
]
"""Directives and anchors before the document (a %YAML 1.0 once stopped ruamel with an assertion)."""

STRUCTURES = st.recursive(
    SCALARS,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(KEYS, children, max_size=5),
    max_leaves=25,
)


@SETTINGS
@given(STRUCTURES, st.sampled_from(PREFIXES))
def test_any_structure_of_yaml_values(node: Any, prefix: str) -> None:
    _check((prefix + _yaml(node).lstrip("\n") + "\n").encode("utf-8", "surrogatepass"))


def _bases() -> list[dict[str, Any]]:
    """A valid spec of every task (its `mlbench init` template, synthetic data), and of each target."""
    from ruamel.yaml import YAML

    yaml = YAML(typ="safe", pure=True)
    docs = [yaml.load(spec_template(task)) for task in TASKS.values()]
    for doc in docs:
        doc["spec"]["data"] = "synthetic"
    kube = json.loads(json.dumps(docs[1]))
    kube["spec"]["target"] = {
        "kind": "kubernetes",
        "image": "mlbench-worker:dev",
        "node_selector": {"a": "b"},
    }
    slurm = json.loads(json.dumps(docs[2]))
    slurm["spec"]["target"] = {"kind": "slurm", "tasks_per_node": 2, "extra_args": ["--exclusive"]}
    return [*docs, kube, slurm]


BASES = _bases()
HOSTILE = st.sampled_from(
    [2**64, -(2**63) - 1, float("nan"), float("inf"), -1, 0, 4096, 10**9, 1e308, True, None, "", [], {},
     "a\u202eb", "x\u200b", "gl\u03bfo", "\x07", "../../etc", "$(reboot)", "' ; rm -rf /", "LD_PRELOAD",
     {"LD_PRELOAD": "/x.so"}, {"rank": 1}, ["--hold"], {"metric": "val_global_loss", "target": -1}]
)  # fmt: skip
VALUES = HOSTILE | STRUCTURES


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _paths(v, (*prefix, i))
    return out


@SETTINGS
@given(st.data())
def test_a_valid_spec_with_one_field_mutated(data: st.DataObject) -> None:
    check_mutated(data)


def check_mutated(data: st.DataObject) -> None:
    """One field of a valid spec replaced, removed or added, then ``_check``."""
    doc = json.loads(json.dumps(data.draw(st.sampled_from(BASES))))
    path = data.draw(st.sampled_from(_paths(doc)[1:]))
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    how = data.draw(st.sampled_from(["replace", "remove", "add"]))
    if how == "replace":
        parent[path[-1]] = data.draw(VALUES)
    elif how == "remove" and isinstance(parent, dict):
        del parent[path[-1]]
    elif isinstance(parent, dict):
        parent[data.draw(KEYS)] = data.draw(VALUES)
    else:
        parent.append(data.draw(VALUES))
    text = json.dumps(doc, allow_nan=True)
    _check(text.encode("utf-8", "surrogatepass"))
