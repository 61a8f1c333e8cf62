"""Spec models: short forms, strictness, normalization, documentation of every field."""

from __future__ import annotations

import typing
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from mlbench_tui.spec.models import BenchmarkSpec, parse_duration


def doc(**body: Any) -> dict[str, Any]:
    return {
        "apiVersion": "mlbench/v1",
        "kind": "Benchmark",
        "metadata": {"name": "m"},
        "spec": {"task": "1a", **body},
    }


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30m", 1800),
        ("2h", 7200),
        ("1h30m", 5400),
        ("90s", 90),
        ("1d", 86400),
        ("1.5h", 5400),
        (600, 600),
        (2.5, 2.5),
    ],
)
def test_duration_short_forms(text: Any, seconds: float) -> None:
    assert parse_duration(text) == seconds
    assert BenchmarkSpec.model_validate(doc(max_time=text)).spec.max_time == seconds


@pytest.mark.parametrize("bad", ["30 minutes", "", "m", "-5m", 0, True, [1]])
def test_bad_durations(bad: Any) -> None:
    with pytest.raises(ValidationError):
        BenchmarkSpec.model_validate(doc(max_time=bad))


def test_hardware_short_forms() -> None:
    hw = BenchmarkSpec.model_validate(
        doc(hardware={"cpu": 2, "memory": "12Gi", "gpu": "2xA100"})
    ).spec.hardware
    assert (hw.cpu, hw.memory, hw.gpus, hw.gpu and hw.gpu.type) == ("2", "12Gi", 2, "A100")
    assert BenchmarkSpec.model_validate(doc(hardware={"gpu": "T4"})).spec.hardware.gpus == 1
    assert BenchmarkSpec.model_validate(doc(hardware={"gpu": 4})).spec.hardware.gpus == 4
    gpu = BenchmarkSpec.model_validate(doc(hardware={"gpu": {"count": 2, "type": "H100"}})).spec.hardware.gpu
    assert gpu is not None and (gpu.count, gpu.type) == (2, "H100")
    assert BenchmarkSpec.model_validate(doc(hardware={"cpu": "500m"})).spec.hardware.cpu == "500m"


def test_target_data_task_short_forms() -> None:
    body = BenchmarkSpec.model_validate(doc(target="local", data="synthetic", task="resnet20-cifar10")).spec
    assert body.target.kind == "local" and body.data.source == "synthetic" and body.task == "1a"
    assert BenchmarkSpec.model_validate(doc(task="AllReduce")).spec.task == "0a"


def test_sweeps_normalize_to_lists() -> None:
    body = BenchmarkSpec.model_validate(doc(workers=4, backend="mpi")).spec
    assert body.workers == [4] and body.backend == ["mpi"]
    body = BenchmarkSpec.model_validate(doc(workers=[1, 2], backend=["gloo", "mpi"])).spec
    assert body.workers == [1, 2] and body.backend == ["gloo", "mpi"]


@pytest.mark.parametrize(
    "body",
    [
        {"workers": "2"},  # strict: a string is not an int
        {"workers": 0},
        {"workers": []},
        {"workers": True},
        {"repeats": 0},
        {"seed": "1"},
        {"price_per_hour": -1},
        {"backend": "gloo2"},
        {"unknown": 1},
        {"hardware": {"cpus": 2}},
        {"target": {"kind": "kubernetes", "image": "x", "namespace": "Bad_NS"}},
        {"target": {"kind": "local", "image": "x"}},
        {"data": {"source": "synthetic", "path": "/x"}},
        {"goal": 80},
        {"telemetry": "sometimes"},
        {"telemetry": {"interval": 0.05}},
        {"telemetry": {"interval": "1s", "enabled": "yes"}},
        {"telemetry": {"every": "1s"}},
        {"price_per_kwh": -0.1},
        {"currency": "euro"},
    ],
)
def test_strict_rejections(body: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        BenchmarkSpec.model_validate(doc(**body))


def test_metadata_name_must_be_dns_label() -> None:
    for good in ("a", "quick-start", "x" * 63, "run-2"):
        BenchmarkSpec.model_validate({**doc(), "metadata": {"name": good}})
    for bad in ("A", "-a", "a-", "a_b", "x" * 64, ""):
        with pytest.raises(ValidationError):
            BenchmarkSpec.model_validate({**doc(), "metadata": {"name": bad}})


def _models(model: type[BaseModel], seen: set[type[BaseModel]]) -> None:
    if model in seen:
        return
    seen.add(model)
    for info in model.model_fields.values():
        stack = [info.annotation]
        while stack:
            t = stack.pop()
            if isinstance(t, type) and issubclass(t, BaseModel):
                _models(t, seen)
            stack.extend(typing.get_args(t))


def test_every_field_is_documented() -> None:
    seen: set[type[BaseModel]] = set()
    _models(BenchmarkSpec, seen)
    assert len(seen) >= 8
    undocumented = [
        f"{m.__name__}.{name}" for m in seen for name, info in m.model_fields.items() if not info.description
    ]
    assert undocumented == []
    assert all(m.__doc__ for m in seen)


@pytest.mark.parametrize(
    ("quantity", "size"),
    [("12Gi", 12 * 2**30), ("512Mi", 512 * 2**20), ("1.5G", 1_500_000_000), ("100", 100), ("0.5Ki", 512)],
)
def test_memory_quantities_in_bytes(quantity: str, size: int) -> None:
    from mlbench_tui.spec.shortforms import memory_bytes

    assert memory_bytes(quantity) == size
