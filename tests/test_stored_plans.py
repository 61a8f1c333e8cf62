"""Runs recorded before typed hyperparameters still read, hash and plan the same: an unchanged spec
keeps its hash (so `apply` does not re-run what succeeded) and its runs' hyperparameters."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from mlbench_worker.hyperparams import plan_values

from mlbench_tui.plan import RunPlan, expand, spec_hash
from mlbench_tui.results.mllog import division
from mlbench_tui.server.serve import EmbeddedServer
from mlbench_tui.spec.loader import load_text
from mlbench_tui.store.api_models import RunDetail
from mlbench_tui.store.store import Store

RECORDED = Path(__file__).resolve().parent / "fixtures" / "stores" / "h200-2026-11-27"  # read-only copies
STORES = ("suite", "holdout")
NEW_KNOBS = {"timing_warmup_steps"}  # declared after these stores were recorded


def _runs(tmp_path: Path, store: str) -> Iterator[RunDetail]:
    source = RECORDED / store
    copy = tmp_path / store
    shutil.copytree(source, copy, ignore=shutil.ignore_patterns("state"))
    for path in copy.rglob("*"):
        path.chmod(0o644 if path.is_file() else 0o755)
    with Store(copy / "mlbench.db") as writer:  # the first writer migrates it, as the server does
        assert "0004_run_launch" in writer.migrations_applied  # written before launch milestones
    # its results were stored by older rules, so a server reads it (and brings them up to date)
    with EmbeddedServer(copy / "mlbench.db", record=False) as server, server.info.client() as reader:
        runs = reader.list_runs()
        assert runs
        for run in runs:
            yield reader.get_run(run.id)


@pytest.mark.parametrize("store", STORES)
def test_recorded_specs_keep_their_hash_and_their_hyperparameters(tmp_path: Path, store: str) -> None:
    for run in _runs(tmp_path, store):
        assert run.spec_text, run.name
        (loaded,) = load_text(run.spec_text, f"{run.name}.yaml", environ={})
        assert spec_hash(loaded.spec) == run.spec_hash, run.name
        stored = RunPlan.model_validate(run.plan)
        (replanned,) = [p for p in expand(loaded.spec) if p.name == stored.name]
        # knobs declared since the run was recorded (the step-time warm-up) join at their defaults
        added = {k: v for k, v in replanned.hyperparameters.items() if k not in stored.hyperparameters}
        assert set(added) <= NEW_KNOBS, run.name
        defaults = plan_values(type(stored.typed_hyperparameters())())
        assert all(defaults[k] == v for k, v in added.items()), run.name
        assert {k: replanned.hyperparameters[k] for k in stored.hyperparameters} == stored.hyperparameters
        typed = stored.typed_hyperparameters()
        recorded = {
            k: v for k, v in plan_values(typed).items() if k not in NEW_KNOBS or k in stored.hyperparameters
        }
        assert recorded == stored.hyperparameters, run.name  # every recorded key is declared
        assert division(stored) == "open"  # synthetic data or the light goal, as recorded
