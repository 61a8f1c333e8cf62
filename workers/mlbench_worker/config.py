"""The worker configuration: the JSON document produced by ``mlbench_tui.plan.worker_config``.

Parsed into small frozen dataclasses with explicit checks (no pydantic: worker images carry only
torch and numpy). Every problem becomes a ``ConfigError`` whose message names the key, so a bad
file gives one clear line instead of a traceback.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BACKENDS = ("gloo", "nccl", "mpi")
PRECISIONS = ("fp32", "bf16", "fp16", "amp")
DEVICES = ("cpu", "cuda")
HOST_ALLOCATORS = ("tuned", "system")
DATA_SOURCES = ("synthetic", "path", "download")
DEFAULT_TELEMETRY_INTERVAL_S = 1.0
MIN_TELEMETRY_INTERVAL_S = 0.1
MAX_TELEMETRY_INTERVAL_S = 3600.0  # the spec's limit too (mlbench_tui.spec.limits; a test pins them)


class ConfigError(ValueError):
    """The worker configuration is missing, unreadable or invalid."""


@dataclass(frozen=True)
class GoalConfig:
    """Which global metric must reach which value ("max": >= target, "min": <= target)."""

    metric: str
    target: float
    direction: str = "max"
    kind: str = "custom"

    def reached(self, value: float) -> bool:
        """Whether ``value`` meets the goal; NaN never does."""
        if math.isnan(value):
            return False
        return value >= self.target if self.direction == "max" else value <= self.target


@dataclass(frozen=True)
class DataConfig:
    """Where the dataset comes from: ``synthetic``, a prepared ``path``, or ``download`` into path."""

    source: str = "synthetic"
    path: str | None = None
    options: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ImplementationConfig:
    """How the step is run, where the spec chose (the math stays the task's)."""

    cuda_graphs: bool = False
    host_allocator: str = "tuned"
    """``tuned``: the rank keeps freed heap memory for the next step (``mlbench_worker.allocator``)."""


@dataclass(frozen=True)
class WorkerConfig:
    """Everything a rank needs to run one task of one run."""

    run_id: str
    task: str
    backend: str
    world_size: int
    seed: int = 42
    run_name: str = ""
    framework: str = "pytorch"
    goal: GoalConfig | None = None
    max_time_s: float | None = None
    precision: str = "fp32"
    device: str = "cpu"
    gpu_type: str | None = None  # the GPU model the spec asks for ('A100'); None: any GPU
    gpu_type_strict: bool = True  # a rank on another model fails the run (else it only says so)
    threads_per_rank: int = 1
    data: DataConfig = field(default_factory=DataConfig)
    hyperparameters: dict[str, Any] = field(default_factory=dict)
    implementation: ImplementationConfig = field(default_factory=ImplementationConfig)
    telemetry_interval_s: float | None = DEFAULT_TELEMETRY_INTERVAL_S  # None: telemetry off

    def hp(self, key: str, default: Any) -> Any:
        """A hyperparameter, or ``default`` when the plan did not set it."""
        value = self.hyperparameters.get(key, default)
        return default if value is None else value


def _require(doc: Mapping[str, Any], key: str, kind: type | tuple[type, ...], where: str = "") -> Any:
    if key not in doc:
        raise ConfigError(f"missing key {where}{key!r}")
    value = doc[key]
    if not isinstance(value, kind) or (isinstance(value, bool) and bool not in _as_tuple(kind)):
        raise ConfigError(f"{where}{key!r} must be {_kind_name(kind)}, got {value!r}")
    return value


def _optional(doc: Mapping[str, Any], key: str, kind: type | tuple[type, ...], default: Any) -> Any:
    value = doc.get(key)
    if value is None:
        return default
    if not isinstance(value, kind) or (isinstance(value, bool) and bool not in _as_tuple(kind)):
        raise ConfigError(f"{key!r} must be {_kind_name(kind)}, got {value!r}")
    return value


def _as_tuple(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)


def _kind_name(kind: type | tuple[type, ...]) -> str:
    return " or ".join(k.__name__ for k in _as_tuple(kind))


def _choice(value: str, allowed: tuple[str, ...], key: str) -> str:
    if value not in allowed:
        raise ConfigError(f"{key!r} must be one of {', '.join(allowed)}, got {value!r}")
    return value


def parse_config(doc: Any) -> WorkerConfig:
    """Validate a decoded JSON document and build the ``WorkerConfig``; unknown keys are ignored."""
    if not isinstance(doc, dict):
        raise ConfigError("the worker config must be a JSON object")
    goal = None
    goal_doc = doc.get("goal")
    if goal_doc is not None:
        if not isinstance(goal_doc, dict):
            raise ConfigError("'goal' must be an object or null")
        goal = GoalConfig(
            metric=_require(goal_doc, "metric", str, "goal."),
            target=float(_require(goal_doc, "target", (int, float), "goal.")),
            direction=_choice(str(goal_doc.get("direction", "max")), ("max", "min"), "goal.direction"),
            kind=str(goal_doc.get("kind", "custom")),
        )
    data_doc = doc.get("data") or {}
    if not isinstance(data_doc, dict):
        raise ConfigError("'data' must be an object")
    options = data_doc.get("options") or {}
    if not isinstance(options, dict):
        raise ConfigError("'data.options' must be an object")
    data = DataConfig(
        source=_choice(str(data_doc.get("source", "synthetic")), DATA_SOURCES, "data.source"),
        path=_optional(data_doc, "path", str, None),
        options=dict(options),
    )
    if data.source == "path" and not data.path:
        raise ConfigError("data.source 'path' needs data.path (the prepared dataset directory)")
    hps = doc.get("hyperparameters") or {}
    if not isinstance(hps, dict):
        raise ConfigError("'hyperparameters' must be an object")
    world_size = _require(doc, "world_size", int)
    if world_size < 1:
        raise ConfigError(f"'world_size' must be >= 1, got {world_size}")
    threads = _optional(doc, "threads_per_rank", int, 1)
    if threads < 1:
        raise ConfigError(f"'threads_per_rank' must be >= 1, got {threads}")
    impl_doc = doc.get("implementation") or {}
    if not isinstance(impl_doc, dict):
        raise ConfigError("'implementation' must be an object")
    implementation = ImplementationConfig(
        cuda_graphs=bool(_optional(impl_doc, "cuda_graphs", bool, False)),
        host_allocator=_choice(
            _optional(impl_doc, "host_allocator", str, "tuned"),
            HOST_ALLOCATORS,
            "implementation.host_allocator",
        ),
    )
    device = _choice(_optional(doc, "device", str, "cpu"), DEVICES, "device")
    if implementation.cuda_graphs and device != "cuda":
        raise ConfigError("'implementation.cuda_graphs' needs device 'cuda' (CUDA graphs run on GPUs)")
    max_time = _optional(doc, "max_time_s", (int, float), None)
    if max_time is not None and max_time <= 0:
        raise ConfigError(f"'max_time_s' must be positive, got {max_time}")
    return WorkerConfig(
        run_id=_require(doc, "run_id", str),
        task=_require(doc, "task", str),
        backend=_choice(_require(doc, "backend", str), BACKENDS, "backend"),
        world_size=world_size,
        seed=_optional(doc, "seed", int, 42),
        run_name=_optional(doc, "run_name", str, ""),
        framework=_optional(doc, "framework", str, "pytorch"),
        goal=goal,
        max_time_s=float(max_time) if max_time is not None else None,
        precision=_choice(_optional(doc, "precision", str, "fp32"), PRECISIONS, "precision"),
        device=device,
        gpu_type=_optional(doc, "gpu_type", str, None),
        gpu_type_strict=_optional(doc, "gpu_type_strict", bool, True),
        threads_per_rank=threads,
        data=data,
        hyperparameters=dict(hps),
        implementation=implementation,
        telemetry_interval_s=_telemetry_interval(doc),
    )


def _telemetry_interval(doc: Mapping[str, Any]) -> float | None:
    """Seconds between telemetry samples: absent means the default, ``null`` means off."""
    if "telemetry_interval_s" not in doc:
        return DEFAULT_TELEMETRY_INTERVAL_S
    value = doc["telemetry_interval_s"]
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigError(f"'telemetry_interval_s' must be a number of seconds or null, got {value!r}")
    if not MIN_TELEMETRY_INTERVAL_S <= value <= MAX_TELEMETRY_INTERVAL_S:
        raise ConfigError(
            f"'telemetry_interval_s' must be between {MIN_TELEMETRY_INTERVAL_S} and "
            f"{MAX_TELEMETRY_INTERVAL_S}, got {value!r}"
        )
    return float(value)


def load_config(path: str | os.PathLike[str]) -> WorkerConfig:
    """Read and validate the config file at ``path``."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read worker config {path}: {exc.strerror or exc}") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"worker config {path} is not valid JSON: {exc}") from None
    return parse_config(doc)
