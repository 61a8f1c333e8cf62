"""The worker config: the engine's ``worker_config`` output parses; bad files fail with one clear line."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from mlbench_worker.config import ConfigError, load_config, parse_config
from mlbench_worker.data.options import Cifar10Synthetic
from mlbench_worker.hyperparams import ResNet20
from mlbench_worker.launch.detect import detect_rendezvous

from mlbench_tui.plan import DataPlan, GoalPlan, ImplementationPlan, ResourcesPlan, RunPlan, worker_config


def _plan() -> RunPlan:
    return RunPlan(
        name="q-gloo-2w",
        spec_name="q",
        spec_hash="0" * 64,
        task="1a",
        task_name="resnet20-cifar10",
        backend="gloo",
        workers=2,
        seed=7,
        repeat=1,
        goal=GoalPlan(kind="light", metric="val_global_Prec@1", target=70.0, direction="max"),
        max_time_s=600.0,
        resources=ResourcesPlan(threads_per_rank=1, precision="bf16"),
        data=DataPlan(source="synthetic", options={"train_samples": 256}),
        hyperparameters={"batch_size": 32, "lr": 0.04},
        target={"kind": "local"},
    )


def test_engine_worker_config_parses_into_the_worker_dataclasses() -> None:
    config = parse_config(json.loads(json.dumps(worker_config(_plan(), "run-1"))))
    assert (config.run_id, config.task, config.backend, config.world_size) == ("run-1", "1a", "gloo", 2)
    assert config.seed == 8  # seed + repeat: repeats differ
    assert config.goal is not None and config.goal.reached(70.0) and not config.goal.reached(69.9)
    assert config.precision == "bf16" and config.max_time_s == 600.0
    assert config.data.options == Cifar10Synthetic(train_samples=256)  # typed, the rest defaults
    assert config.hyperparameters == ResNet20(batch_size=32, lr=0.04)  # typed, the rest official
    assert (config.device, config.gpu_type, config.gpu_type_strict) == ("cpu", None, True)
    assert config.implementation.cuda_graphs is False


def test_cuda_graphs_reach_the_worker_and_need_a_gpu_device() -> None:
    plan = _plan().model_copy(
        update={
            "backend": "nccl",
            "resources": ResourcesPlan(threads_per_rank=1, gpus=1),
            "implementation": ImplementationPlan(cuda_graphs=True),
        }
    )
    config = parse_config(json.loads(json.dumps(worker_config(plan, "run-1"))))
    assert config.device == "cuda" and config.implementation.cuda_graphs is True
    on_cpu = {**worker_config(plan, "run-1"), "device": "cpu"}
    with pytest.raises(ConfigError, match="cuda_graphs' needs device 'cuda'"):
        parse_config(on_cpu)


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"task": "0a", "backend": "gloo", "world_size": 1}, "missing key 'run_id'"),
        ({"run_id": "r", "task": "0a", "backend": "tcp", "world_size": 1}, "'backend' must be one of"),
        ({"run_id": "r", "task": "0a", "backend": "gloo", "world_size": 0}, "'world_size' must be >= 1"),
        ({"run_id": "r", "task": "0a", "backend": "gloo", "world_size": "2"}, "'world_size' must be int"),
        (
            {"run_id": "r", "task": "1a", "backend": "gloo", "world_size": 1, "data": {"source": "path"}},
            "needs data.path",
        ),
        (
            {"run_id": "r", "task": "1a", "backend": "gloo", "world_size": 1, "goal": {"metric": "x"}},
            "missing key 'goal.target'",
        ),
        (
            {"run_id": "r", "task": "0a", "backend": "gloo", "world_size": 1, "telemetry_interval_s": "1s"},
            "'telemetry_interval_s' must be float or null, got '1s'",
        ),
        (
            {"run_id": "r", "task": "0a", "backend": "gloo", "world_size": 1, "telemetry_interval_s": 0.01},
            "'telemetry_interval_s' must be between 0.1 and 3600.0",
        ),
        (  # the sampler thread cannot wait that long (threading.TIMEOUT_MAX)
            {
                "run_id": "r",
                "task": "0a",
                "backend": "gloo",
                "world_size": 1,
                "telemetry_interval_s": 8.64e16,
            },
            "'telemetry_interval_s' must be between 0.1 and 3600.0",
        ),
        (
            {
                "run_id": "r",
                "task": "0a",
                "backend": "gloo",
                "world_size": 1,
                "goal": {"metric": "x", "target": 1, "direction": "up"},
            },
            "'goal.direction' must be one of max, min, got 'up'",
        ),
        (
            {"run_id": "r", "task": "0a", "backend": "gloo", "world_size": 1, "max_time_s": 0},
            "'max_time_s' must be > 0, got 0",
        ),
        (
            {"run_id": "r", "task": "0a", "backend": "gloo", "world_size": 1, "data": {"options": []}},
            "'data.options' must be an object, got []",
        ),
        (
            {"run_id": "r", "task": "0a", "backend": "gloo", "world_size": True},
            "'world_size' must be int, got True",
        ),
    ],
)
def test_invalid_configs_name_the_offending_key(doc: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        parse_config(doc)


def test_telemetry_is_on_by_default_and_null_turns_it_off() -> None:
    doc = {"run_id": "r", "task": "0a", "backend": "gloo", "world_size": 1}
    assert parse_config(doc).telemetry_interval_s == 1.0  # a config written before the key existed
    assert parse_config({**doc, "telemetry_interval_s": None}).telemetry_interval_s is None
    assert parse_config({**doc, "telemetry_interval_s": 2}).telemetry_interval_s == 2.0


def test_cli_reports_a_bad_config_without_a_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    for argv in (["--config", str(bad)], ["--config", str(tmp_path / "missing.json")], []):
        proc = subprocess.run(
            [sys.executable, "-m", "mlbench_worker", *argv],
            capture_output=True,
            text=True,
            env={"PATH": "/usr/bin:/bin"},
            timeout=60,
        )
        assert proc.returncode == 2
        assert proc.stderr.startswith("error: ") and "Traceback" not in proc.stderr


def test_load_config_reads_a_file(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    path.write_text(json.dumps(worker_config(_plan(), "run-2")))
    assert load_config(path).run_id == "run-2"


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, (0, 1, 0, "single")),
        (
            {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "MASTER_ADDR": "h", "MASTER_PORT": "5"},
            (1, 2, 1, "torchrun"),
        ),
        (
            {
                "JOB_COMPLETION_INDEX": "3",
                "PET_NNODES": "4",
                "PET_MASTER_ADDR": "job-0.svc",
                "PET_MASTER_PORT": "29500",
            },
            (3, 4, 0, "indexed-job"),
        ),
        (
            {"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_LOCAL_RANK": "1"},
            (1, 2, 1, "mpi"),
        ),
    ],
)
def test_rendezvous_from_each_launcher(env: dict[str, str], expected: tuple[int, int, int, str]) -> None:
    rdv = detect_rendezvous(env)
    assert (rdv.rank, rdv.world_size, rdv.local_rank, rdv.launcher) == expected
    if rdv.launcher == "indexed-job":
        assert (rdv.master_addr, rdv.master_port) == ("job-0.svc", 29500)


def test_indexed_job_without_world_size_is_a_clear_error() -> None:
    with pytest.raises(ConfigError, match="WORLD_SIZE or PET_NNODES"):
        detect_rendezvous({"JOB_COMPLETION_INDEX": "0"})


def test_unknown_task_is_a_clean_error(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"run_id": "r", "task": "9z", "backend": "gloo", "world_size": 1}))
    proc = subprocess.run(
        [sys.executable, "-m", "mlbench_worker", "--config", str(path)],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin"},
        timeout=120,
    )
    assert proc.returncode == 2
    assert (
        "error: this worker has no task '9z' (it has: 0a, 1a" in proc.stderr
        and "Traceback" not in proc.stderr
    )
