"""plan.expand: sweeps x repeats, names, scaling rules, resources, hashes; pure and deterministic."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from mlbench_tui.errors import SpecError
from mlbench_tui.plan import RunPlan, expand, spec_hash, threads_per_rank, worker_config
from mlbench_tui.spec.loader import load_paths, validate_data
from mlbench_tui.spec.models import BenchmarkSpec

ROOT = Path(__file__).resolve().parents[1]


def make(body: dict[str, Any], name: str = "bench") -> BenchmarkSpec:
    return validate_data(
        {"apiVersion": "mlbench/v1", "kind": "Benchmark", "metadata": {"name": name}, "spec": body}
    )


def test_quickstart_plan() -> None:
    (loaded,) = load_paths([ROOT / "specs" / "quickstart.yaml"])
    (plan,) = expand(loaded.spec)
    assert plan.name == "quickstart-gloo-2w"
    assert (plan.task, plan.task_name, plan.backend, plan.workers) == ("1a", "resnet20-cifar10", "gloo", 2)
    assert plan.goal is not None and plan.goal.model_dump() == {
        "kind": "light",
        "metric": "val_global_Prec@1",
        "target": 70.0,
        "direction": "max",
    }
    assert plan.max_time_s == 300.0
    hp = plan.hyperparameters
    assert hp["batch_size"] == 64
    assert hp["base_lr"] == 0.02 and hp["lr"] == pytest.approx(0.04)
    assert hp["warmup_epochs"] == 1.0
    assert plan.data.source == "synthetic"
    assert plan.data.options == {"train_samples": 2048, "val_samples": 512}
    assert plan.resources.threads_per_rank == 1
    assert plan.target.kind == "local" and plan.model_dump(mode="json")["target"] == {"kind": "local"}


def test_sweep_order_names_and_repeats() -> None:
    plans = expand(make({"task": "1a", "workers": [1, 4], "backend": ["gloo", "mpi"], "repeats": 2}))
    assert [p.name for p in plans] == [
        "bench-gloo-1w-r0",
        "bench-gloo-1w-r1",
        "bench-gloo-4w-r0",
        "bench-gloo-4w-r1",
        "bench-mpi-1w-r0",
        "bench-mpi-1w-r1",
        "bench-mpi-4w-r0",
        "bench-mpi-4w-r1",
    ]
    assert [p.repeat for p in plans[:2]] == [0, 1]
    assert all(p.repeats == 2 for p in plans)
    assert len({p.spec_hash for p in plans}) == 1
    # no -r suffix for a single repeat
    assert [p.name for p in expand(make({"task": "1a", "workers": [2, 8]}))] == [
        "bench-gloo-2w",
        "bench-gloo-8w",
    ]


def test_framework_sweep_compares_pytorch_and_tensorflow_in_one_spec() -> None:
    plans = expand(make({"task": "1a", "framework": ["pytorch", "tensorflow"], "workers": [1, 2]}))
    assert [(p.name, p.framework) for p in plans] == [
        ("bench-pt-gloo-1w", "pytorch"),
        ("bench-pt-gloo-2w", "pytorch"),
        ("bench-tf-gloo-1w", "tensorflow"),
        ("bench-tf-gloo-2w", "tensorflow"),
    ]
    assert worker_config(plans[2], "r-1")["framework"] == "tensorflow"
    # a single framework keeps the short names
    (plan,) = expand(make({"task": "1a", "framework": "tensorflow"}))
    assert (plan.name, plan.framework) == ("bench-gloo-1w", "tensorflow")


def test_tensorflow_refuses_what_its_implementation_cannot_run() -> None:
    with pytest.raises(SpecError) as err:
        make({"task": "1a", "framework": ["pytorch", "tensorflow"], "hardware": {"precision": "amp"}})
    assert "tensorflow implementation runs precision fp32 or bf16, not amp" in err.value.render()
    with pytest.raises(SpecError) as err:
        make({"task": "2a", "framework": ["pytorch", "tensorflow"]})
    assert "task 2a (logreg-epsilon) has no tensorflow implementation" in err.value.render()


def test_linear_lr_scaling_and_warmup_for_1a() -> None:
    plans = expand(make({"task": "1a", "workers": [1, 2, 8], "hyperparameters": {"lr": 0.1}}))
    assert [p.hyperparameters["lr"] for p in plans] == pytest.approx([0.1, 0.2, 0.8])
    assert [p.hyperparameters["base_lr"] for p in plans] == [0.1, 0.1, 0.1]
    assert [p.hyperparameters["warmup_epochs"] for p in plans] == [0.0, 1.0, 3.0]
    explicit = expand(make({"task": "1a", "workers": 8, "hyperparameters": {"warmup_epochs": 5}}))
    assert explicit[0].hyperparameters["warmup_epochs"] == 5


def test_scaling_rules_of_other_tasks() -> None:
    (p2a,) = expand(make({"task": "2a", "workers": 4}))
    assert p2a.hyperparameters["lr"] == 16.0 and p2a.hyperparameters["base_lr"] == 4.0
    assert "warmup_epochs" not in p2a.hyperparameters
    (p3a,) = expand(make({"task": "3a", "workers": 4}))
    assert p3a.hyperparameters["lr"] == pytest.approx(30 * math.sqrt(4))
    assert p3a.hyperparameters["warmup_epochs"] == 12
    (p4a,) = expand(make({"task": "4a", "workers": 8}))
    assert p4a.hyperparameters["lr"] == 2e-3 and "base_lr" not in p4a.hyperparameters
    assert p4a.hyperparameters["global_batch_size"] == 2048


def test_allreduce_drops_fp16_on_mpi_only() -> None:
    gloo, mpi = expand(make({"task": "0a", "workers": 2, "backend": ["gloo", "mpi"]}))
    assert gloo.hyperparameters["dtypes"] == ["fp32", "fp16"]
    assert mpi.hyperparameters["dtypes"] == ["fp32"]
    assert gloo.goal is None


@pytest.mark.parametrize(
    ("cpu", "threads"), [(None, 1), ("500m", 1), ("1", 1), ("2.5", 3), ("4", 4), ("1500m", 2)]
)
def test_threads_per_rank(cpu: str | None, threads: int) -> None:
    assert threads_per_rank(cpu) == threads
    hardware = {"cpu": cpu} if cpu else {}
    (plan,) = expand(make({"task": "1a", "hardware": hardware}))
    assert plan.resources.threads_per_rank == threads
    assert plan.env["OMP_NUM_THREADS"] == str(threads)


def test_resources_env_target_labels() -> None:
    spec = validate_data(
        {
            "apiVersion": "mlbench/v1",
            "kind": "Benchmark",
            "metadata": {"name": "gpu", "labels": {"team": "ml"}},
            "spec": {
                "task": "4b",
                "workers": 2,
                "backend": "nccl",
                "hardware": {"cpu": 8, "memory": "32Gi", "gpu": "1xA100", "precision": "amp"},
                "target": {"kind": "kubernetes", "image": "w:1", "namespace": "bench"},
                "env": {"NCCL_DEBUG": "INFO", "OMP_NUM_THREADS": "4"},
                "price_per_hour": 3.5,
            },
        }
    )
    (plan,) = expand(spec)
    assert plan.resources.model_dump() == {
        "cpu": "8",
        "threads_per_rank": 8,
        "memory": "32Gi",
        "gpus": 1,
        "gpu_type": "A100",
        "gpu_type_strict": True,
        "precision": "amp",
    }
    assert plan.env == {"OMP_NUM_THREADS": "4", "NCCL_DEBUG": "INFO"}  # the spec's env wins
    assert plan.model_dump(mode="json")["target"] == {
        "kind": "kubernetes",
        "namespace": "bench",
        "image": "w:1",
        "node_selector": {},
        "tolerations": [],
    }
    assert plan.labels == {"team": "ml"} and plan.price_per_hour == 3.5
    assert worker_config(plan, "run-1")["device"] == "cuda"


def test_custom_goal_direction_defaults_to_metric() -> None:
    (plan,) = expand(make({"task": "3a", "goal": {"metric": "val_global_Perplexity", "target": 120}}))
    assert plan.goal is not None
    assert (plan.goal.kind, plan.goal.direction, plan.goal.target) == ("custom", "min", 120.0)


def test_expand_is_deterministic_and_plans_are_frozen() -> None:
    spec = make({"task": "1a", "workers": [1, 2], "repeats": 3})
    first, second = expand(spec), expand(spec)
    assert [p.model_dump() for p in first] == [p.model_dump() for p in second]
    with pytest.raises(ValidationError):
        first[0].workers = 5  # type: ignore[misc]
    # mutating a plan's dict does not leak into its siblings
    first[0].hyperparameters["lr"] = 99
    assert first[1].hyperparameters["lr"] != 99


def test_spec_hash_normalizes_short_forms_and_changes_with_content() -> None:
    short = make({"task": "resnet20-cifar10", "workers": 2, "max_time": "1h", "target": "local"})
    long = make({"task": "1a", "workers": [2], "max_time": 3600, "target": {"kind": "local"}})
    assert spec_hash(short) == spec_hash(long)
    assert len(spec_hash(short)) == 64
    assert spec_hash(make({"task": "1a", "workers": 2, "seed": 7})) != spec_hash(short)


def test_worker_config_contract() -> None:
    (plan,) = expand(make({"task": "1a", "workers": 2, "seed": 10, "repeats": 1}))
    cfg = worker_config(plan, "abc")
    assert cfg["run_id"] == "abc" and cfg["world_size"] == 2 and cfg["seed"] == 10
    assert cfg["hyperparameters"]["lr"] == pytest.approx(0.04)
    assert cfg["goal"]["metric"] == "val_global_Prec@1" and cfg["device"] == "cpu"
    assert isinstance(RunPlan.model_validate(plan.model_dump()), RunPlan)


def test_allreduce_reads_no_dataset() -> None:
    (plan,) = expand(make({"task": "0a"}))
    assert plan.data.source == "synthetic"
    with pytest.raises(SpecError) as info:
        make({"task": "0a", "data": "download"})
    assert "reads no dataset" in info.value.render()


def test_cuda_graphs_are_recorded_in_the_plan_and_the_worker_config() -> None:
    gpu = {"task": "1a", "backend": "nccl", "hardware": {"gpu": "1xH100"}}
    (eager,) = expand(make(gpu))
    (graphed,) = expand(make({**gpu, "implementation": {"cuda_graphs": True}}))
    assert eager.implementation.cuda_graphs is False  # off by default
    assert graphed.implementation.cuda_graphs is True
    assert worker_config(eager, "r")["implementation"] == {"cuda_graphs": False, "host_allocator": "tuned"}
    assert worker_config(graphed, "r")["implementation"] == {"cuda_graphs": True, "host_allocator": "tuned"}
    assert RunPlan.model_validate(graphed.model_dump()).implementation.cuda_graphs is True


def test_the_host_allocator_is_tuned_unless_the_spec_asks_for_the_systems() -> None:
    (tuned,) = expand(make({"task": "1a"}))
    (system,) = expand(make({"task": "1a", "implementation": {"host_allocator": "system"}}))
    assert tuned.implementation.host_allocator == "tuned"
    assert worker_config(system, "r")["implementation"]["host_allocator"] == "system"
    with pytest.raises(SpecError) as info:
        make({"task": "1a", "implementation": {"host_allocator": "jemalloc"}})
    assert "host_allocator" in info.value.render() and "'tuned'" in info.value.render()


def test_an_implementation_left_at_its_defaults_keeps_the_spec_hash() -> None:
    body = {"task": "1a", "backend": "nccl", "hardware": {"gpu": "1xH100"}}
    plain = make(body)
    assert "implementation" not in plain.normalized()["spec"]  # specs from before the field: same hash
    assert spec_hash(make({**body, "implementation": {"cuda_graphs": False}})) == spec_hash(plain)
    assert spec_hash(make({**body, "implementation": {"host_allocator": "tuned"}})) == spec_hash(plain)
    assert spec_hash(make({**body, "implementation": {"cuda_graphs": True}})) != spec_hash(plain)


def test_ranks_per_node_is_planned_per_world_size_and_keeps_old_hashes() -> None:
    body = {"task": "0a", "workers": [1, 2, 4, 8], "backend": "nccl", "hardware": {"gpu": "1xH100"}}
    plans = expand(make({**body, "hardware": {"gpu": "1xH100", "ranks_per_node": 4}}))
    assert [(p.workers, p.ranks_per_node) for p in plans] == [(1, 1), (2, 2), (4, 4), (8, 4)]
    assert all(p.ranks_per_node is None for p in expand(make(body)))
    plain = make(body)
    assert "ranks_per_node" not in plain.normalized()["spec"]["hardware"]  # specs from before: same hash
    assert spec_hash(make({**body, "hardware": {"gpu": "1xH100", "ranks_per_node": 4}})) != spec_hash(plain)


@pytest.mark.parametrize(
    ("telemetry", "interval"),
    [
        (None, 1.0),
        ("off", None),
        (False, None),
        ("on", 1.0),
        ({"interval": "2s"}, 2.0),
        ({"interval": 0.5}, 0.5),
    ],
)
def test_telemetry_interval_reaches_the_worker(telemetry: Any, interval: float | None) -> None:
    from mlbench_worker.config import parse_config

    body: dict[str, Any] = {"task": "1a", "price_per_kwh": 0.25}
    if telemetry is not None:
        body["telemetry"] = telemetry
    (plan,) = expand(make(body))
    assert plan.telemetry_interval_s == interval and plan.price_per_kwh == 0.25
    assert parse_config(worker_config(plan, "r")).telemetry_interval_s == interval


def test_telemetry_and_energy_price_at_their_defaults_keep_the_spec_hash() -> None:
    plain = make({"task": "1a"})
    assert not {"telemetry", "price_per_kwh", "currency"} & set(plain.normalized()["spec"])
    assert spec_hash(make({"task": "1a", "telemetry": {"interval": "1s"}})) == spec_hash(plain)
    assert spec_hash(make({"task": "1a", "telemetry": "off"})) != spec_hash(plain)
    assert spec_hash(make({"task": "1a", "price_per_kwh": 0.3})) != spec_hash(plain)
    priced = make({"task": "1a", "price_per_kwh": 0.3, "currency": "EUR"})
    assert expand(priced)[0].currency == "EUR" and expand(plain)[0].currency is None
    assert spec_hash(priced) != spec_hash(make({"task": "1a", "price_per_kwh": 0.3}))


@pytest.mark.parametrize(
    ("preflight", "gpu", "enabled", "on_failure"),
    [
        (None, 0, False, "stop"),  # auto: off on a CPU run
        (None, 1, True, "stop"),  # auto: on on a GPU run
        ("off", 1, False, "stop"),
        ("on", 0, True, "stop"),
        ("warn", 0, True, "warn"),
        ({"min_gemm_tflops": 5}, 0, True, "stop"),  # auto with a limit of the spec's own
        ({"enabled": False, "min_gemm_tflops": 5}, 0, False, "stop"),
    ],
)
def test_preflight_resolves_auto_and_its_short_forms(
    preflight: object, gpu: int, enabled: bool, on_failure: str
) -> None:
    body: dict[str, Any] = {"task": "2a", "backend": "nccl" if gpu else "gloo", "hardware": {"gpu": gpu}}
    if preflight is not None:
        body["preflight"] = preflight
    (plan,) = expand(make(body))
    assert (plan.preflight.enabled, plan.preflight.on_failure) == (enabled, on_failure)
    config = worker_config(plan, "r-1")["preflight"]
    assert (config is not None) == enabled


def test_preflight_expectations_come_from_the_spec_s_limits_and_the_reference_rows() -> None:
    body = {"task": "1a", "backend": "nccl", "hardware": {"gpu": 1}, "preflight": {"max_allreduce_us": 80}}
    (plan,) = expand(make(body))
    config = worker_config(plan, "r-1")["preflight"]
    first = config["expectations"][0]
    assert (first["machine"], first["figure"], first["value"], first["limit"]) == (
        "*", "preflight_allreduce_us", 80.0, True,
    )  # fmt: skip
    # each machine's rows of this backend and world size (all-reduce) or precision (GEMM)
    figures = {(e["machine"], e["figure"]) for e in config["expectations"][1:]}
    assert all(f in ("preflight_allreduce_us", "gemm_tflops") for _, f in figures)
