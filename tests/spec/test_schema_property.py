"""Property: what ``validate`` accepts, the rest of the way accepts too. Specs are drawn from the
committed JSON Schema, one target kind at a time; for every spec the loader accepts, ``plan``
renders it, ``apply --dry-run`` renders every run on its target (local commands, Kubernetes
manifests, the Slurm batch script) and a real store creates its runs, all without an exception.
Refusals that depend on this machine (no GPU here, no cluster) come as clear MlbenchErrors from
the placement check, as they do in ``apply``."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from support.schema_strategy import from_schema

from mlbench_tui.commands.spec import render_plans
from mlbench_tui.errors import MlbenchError
from mlbench_tui.executors import executor_for
from mlbench_tui.executors.api import Executor, LaunchContext
from mlbench_tui.plan import expand
from mlbench_tui.runs.plans import check_placement, render_dry_run
from mlbench_tui.spec.loader import collect_text
from mlbench_tui.store.api_models import RunCreate
from mlbench_tui.store.store import Store

SCHEMA = json.loads((Path(__file__).resolve().parents[2] / "specs" / "mlbench.schema.json").read_text())
TARGETS = {"local": "LocalTarget", "kubernetes": "KubernetesTarget", "slurm": "SlurmTarget"}
PROPERTY = settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def schema_for(kind: str) -> dict[str, Any]:
    """The spec schema with ``target`` narrowed to one kind (a Slurm target without a recorded
    cluster: it uses this login node's configuration)."""
    schema = copy.deepcopy(SCHEMA)
    schema["$defs"]["BenchmarkBody"]["properties"]["target"] = {"$ref": f"#/$defs/{TARGETS[kind]}"}
    schema["$defs"]["BenchmarkBody"]["required"] = ["task", "target"]
    schema["$defs"]["SlurmTarget"]["properties"].pop("cluster")
    return schema


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    opened = Store(tmp_path_factory.mktemp("store") / "runs.db")
    yield opened
    opened.close()


def _all_the_way(doc: dict[str, Any], store: Store) -> None:
    loaded, issues = collect_text(json.dumps(doc), "drawn.yaml", environ={})
    event("validate accepted it" if loaded else "validate refused it")
    assert loaded or issues
    cache: dict[str, Executor] = {}
    for item in loaded:
        plans = expand(item.spec)
        for output in ("table", "json", "yaml"):
            render_plans(plans, output)
        try:
            check_placement(plans)
        except MlbenchError:
            event("placement refused it here")
        for index, plan in enumerate(plans):
            launch = LaunchContext(
                run_id=f"r-drawn{index:05d}", server_url="http://127.0.0.1:9", write_token="t"
            )
            render_dry_run(executor_for(plan, cache).dryrun(plan, launch))
            store.create_run(RunCreate.from_plan(plan, item.text))


STRATEGIES = {kind: from_schema(schema_for(kind)) for kind in TARGETS}


@pytest.mark.parametrize("kind", sorted(TARGETS))
@PROPERTY
@given(data=st.data())
def test_every_spec_validate_accepts_plans_renders_and_is_stored(
    kind: str, store: Store, data: st.DataObject
) -> None:
    _all_the_way(data.draw(STRATEGIES[kind], label="spec"), store)
