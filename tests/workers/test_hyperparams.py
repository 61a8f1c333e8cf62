"""Typed hyperparameters: a rank parses its plan's values once into the task's dataclass, and a value
of the wrong type, out of bounds or unknown stops the rank with one clear line."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from mlbench_worker.config import parse_config
from mlbench_worker.hyperparams import (
    HYPERPARAMETERS,
    AllReduce,
    AwdLstm,
    Gnmt,
    ResNet20,
    Transformer,
    parse_hyperparameters,
    plan_values,
)
from mlbench_worker.knobs import HyperparameterError, knobs

from mlbench_tui.plan import expand, worker_config
from mlbench_tui.spec.loader import load_text


def _spec(task: str, hyperparameters: str = "{}", backend: str = "gloo", workers: int = 4) -> str:
    return (
        "apiVersion: mlbench/v1\nkind: Benchmark\nmetadata: {name: hp}\nspec:\n"
        f"  task: {task}\n  workers: {workers}\n  backend: {backend}\n  data: synthetic\n"
        f"  hyperparameters: {hyperparameters}\n"
    )


@pytest.mark.parametrize("task", list(HYPERPARAMETERS))
def test_every_plan_reaches_the_rank_as_the_tasks_dataclass(task: str) -> None:
    (loaded,) = load_text(_spec(task), "hp.yaml", environ={})
    (plan,) = expand(loaded.spec)
    config = parse_config(json.loads(json.dumps(worker_config(plan, "run-1"))))
    hp = config.hyperparameters
    assert type(hp) is HYPERPARAMETERS[task]
    assert plan_values(hp) == plan.hyperparameters  # nothing lost or renamed on the way


def test_scaling_and_overrides_arrive_typed() -> None:
    (loaded,) = load_text(_spec("1a", "{batch_size: 64, lr: 1, channels_last: false}"), "hp.yaml", {})
    (plan,) = expand(loaded.spec)
    hp = parse_config(worker_config(plan, "r")).hyperparameters
    assert isinstance(hp, ResNet20)
    assert (hp.batch_size, hp.lr, hp.base_lr, hp.warmup_epochs, hp.channels_last) == (
        64,
        4.0,
        1.0,
        2.0,
        False,
    )
    assert isinstance(hp.lr, float) and hp.momentum == 0.9 and hp.nesterov is True


def test_awd_lstm_warms_up_to_sqrt_k_and_translation_keeps_its_adam() -> None:
    (loaded,) = load_text(_spec("3a"), "hp.yaml", environ={})
    hp = parse_config(worker_config(expand(loaded.spec)[0], "r")).hyperparameters
    assert isinstance(hp, AwdLstm) and (hp.lr, hp.base_lr, hp.warmup_epochs) == (60.0, 30.0, 12.0)
    gnmt, transformer = Gnmt(), Transformer()
    assert gnmt.optimizer_settings().adam_betas == (0.9, 0.999) and gnmt.length_limits() == (75, 150)
    assert transformer.optimizer_settings().adam_eps == 1e-9 and transformer.loss_scaling().max_scale is None
    assert gnmt.loss_scaling() == dataclasses.replace(gnmt.loss_scaling(), init_scale=1024, max_scale=8192)


def test_allreduce_drops_fp16_on_mpi_only() -> None:
    (loaded,) = load_text(_spec("0a", backend="[gloo, mpi]"), "hp.yaml", environ={})
    dtypes = [parse_config(worker_config(p, "r")).hyperparameters for p in expand(loaded.spec)]
    assert [hp.dtypes for hp in dtypes if isinstance(hp, AllReduce)] == [("fp32", "fp16"), ("fp32",)]


def test_bad_values_name_each_problem() -> None:
    with pytest.raises(HyperparameterError) as info:
        parse_hyperparameters("1a", {"batch_size": "64", "plateau_factor": 1.5, "momentun": 0.9, "lr": True})
    names = [p.name for p in info.value.problems]
    assert names == ["batch_size", "plateau_factor", "momentun", "lr"]
    text = str(info.value)
    assert "hyperparameter 'batch_size' must be an integer, got '64'" in text
    assert "hyperparameter 'plateau_factor' must be between 0 and 1, got 1.5" in text
    assert "unknown hyperparameter 'momentun' for task 1a" in text
    assert "hyperparameter 'lr' must be a number, got True" in text
    with pytest.raises(HyperparameterError, match="must not exceed sizes_max_exp"):
        parse_hyperparameters("0a", {"sizes_min_exp": 5, "sizes_max_exp": 2})
    with pytest.raises(HyperparameterError, match="must be a finite number, got inf"):
        parse_hyperparameters("4b", {"lr": float("inf")})


def test_every_field_is_declared_with_a_description_and_a_policy() -> None:
    for cls in HYPERPARAMETERS.values():
        for name, knob in knobs(cls).items():
            assert knob.description.endswith("."), f"{cls.__name__}.{name}"
            assert knob.policy in {"override", "fixed", "derived", "tuning"}


def test_a_bad_hyperparameter_stops_the_rank_with_one_line(tmp_path: Path) -> None:
    (loaded,) = load_text(_spec("0a"), "hp.yaml", environ={})
    doc = worker_config(expand(loaded.spec)[0], "r")
    path = tmp_path / "c.json"
    path.write_text(json.dumps({**doc, "hyperparameters": {"repetitions": 0, "dtypes": ["fp8"]}}))
    proc = subprocess.run(
        [sys.executable, "-m", "mlbench_worker", "--config", str(path)],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": os.environ.get("PYTHONPATH", "")},
        timeout=120,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "repetitions' must be >= 1, got 0" in proc.stderr and "invalid value 'fp8'" in proc.stderr
