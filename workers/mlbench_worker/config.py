"""The worker configuration: everything a rank needs to run one task of one run.

Declared once, as frozen dataclasses (``mlbench_worker.wire_types``: types, bounds, descriptions),
like the wire's messages, and standard library only: the engine builds it from a run's plan
(``mlbench_tui.plan``) and writes it with ``config_document``; a rank reads the file named by
``--config`` or ``MLBENCH_CONFIG`` (``load_config``) and validates it strictly with
``parse_config``, with one clear line (``ConfigError``) for a file that is missing, not JSON or
invalid.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

from mlbench_worker.data.options import DataOptions, options_document, parse_data_options
from mlbench_worker.hyperparams import TaskHyperparameters, parse_hyperparameters
from mlbench_worker.preflight_config import PreflightConfig
from mlbench_worker.wire_types import READER, Invalid, Limits, read

Backend = Literal["gloo", "nccl", "mpi"]
Precision = Literal["fp32", "bf16", "fp16", "amp"]
Device = Literal["cpu", "cuda"]
HostAllocator = Literal["tuned", "system"]
DataSource = Literal["synthetic", "path", "download"]
Direction = Literal["max", "min"]
BACKENDS: tuple[str, ...] = get_args(Backend)
PRECISIONS: tuple[str, ...] = get_args(Precision)
DEVICES: tuple[str, ...] = get_args(Device)
HOST_ALLOCATORS: tuple[str, ...] = get_args(HostAllocator)
DATA_SOURCES: tuple[str, ...] = get_args(DataSource)
DEFAULT_TELEMETRY_INTERVAL_S = 1.0
MIN_TELEMETRY_INTERVAL_S = 0.1
MAX_TELEMETRY_INTERVAL_S = 3600.0  # the spec's limit too (mlbench_tui.spec.limits; a test pins them)


class ConfigError(Invalid):
    """The worker configuration is missing, unreadable or invalid."""


@dataclass(frozen=True)
class GoalConfig:
    """Which global metric must reach which value ("max": >= target, "min": <= target)."""

    metric: str
    target: float
    direction: Direction = "max"
    kind: str = "custom"

    def reached(self, value: float) -> bool:
        """Whether ``value`` meets the goal; NaN never does."""
        if math.isnan(value):
            return False
        return value >= self.target if self.direction == "max" else value <= self.target


@dataclass(frozen=True)
class DataConfig:
    """Where the dataset comes from: ``synthetic``, a prepared ``path``, or ``download`` into path."""

    source: DataSource = "synthetic"
    path: str | None = None
    options: DataOptions = field(default_factory=DataOptions)
    """The task's options for this source (``mlbench_worker.data.options``), typed."""

    def check(self) -> None:
        if self.source == "path" and not self.path:
            raise ConfigError("data.source 'path' needs data.path (the prepared dataset directory)")


@dataclass(frozen=True)
class ImplementationConfig:
    """How the step is run, where the spec chose (the math stays the task's). The spec, the plan
    and the rank all take these defaults from here."""

    cuda_graphs: bool = False
    host_allocator: HostAllocator = "tuned"
    """``tuned``: the rank keeps freed heap memory for the next step (``mlbench_worker.launch.allocator``)."""


def _read_data(value: Any, config: Mapping[str, Any]) -> DataConfig:
    """The data section: its ``path`` as the rank opens it (``~`` is this rank's home) and its
    options typed for the task and source (``mlbench_worker.data.options``)."""
    if value is None:
        value = {}
    if not isinstance(value, Mapping):
        raise ConfigError(f"'data' must be an object, got {value!r}")
    options = value.get("options")
    if options is None:
        options = {}
    if not isinstance(options, Mapping):
        raise ConfigError(f"'data.options' must be an object, got {options!r}")
    data = read(DataConfig, {k: v for k, v in value.items() if k != "options"}, strict=True, where="data.")
    return dataclasses.replace(
        data,
        path=None if data.path is None else os.path.expanduser(data.path),
        options=parse_data_options(str(config.get("task", "")), data.source, options),
    )


def _read_hyperparameters(value: Any, config: Mapping[str, Any]) -> TaskHyperparameters:
    """The task's typed hyperparameters (its defaults where the config has none)."""
    if value is not None and not isinstance(value, Mapping):
        raise ConfigError("'hyperparameters' must be an object")
    return parse_hyperparameters(config["task"], dict(value or {}))


@dataclass(frozen=True)
class WorkerConfig:
    """Everything a rank needs to run one task of one run."""

    run_id: str
    task: str
    backend: Backend
    world_size: Annotated[int, Limits(ge=1)]
    seed: int = 42
    run_name: str = ""
    framework: str = "pytorch"
    goal: GoalConfig | None = None
    max_time_s: Annotated[float, Limits(gt=0)] | None = None
    precision: Precision = "fp32"
    device: Device = "cpu"
    gpu_type: str | None = None  # the GPU model the spec asks for ('A100'); None: any GPU
    gpu_type_strict: bool = True  # a rank on another model fails the run (else it only says so)
    threads_per_rank: Annotated[int, Limits(ge=1)] = 1
    data: DataConfig = field(default_factory=DataConfig, metadata={READER: _read_data})
    hyperparameters: TaskHyperparameters = field(
        default_factory=TaskHyperparameters, metadata={READER: _read_hyperparameters}
    )
    implementation: ImplementationConfig = field(default_factory=ImplementationConfig)
    telemetry_interval_s: (
        Annotated[float, Limits(ge=MIN_TELEMETRY_INTERVAL_S, le=MAX_TELEMETRY_INTERVAL_S)] | None
    ) = DEFAULT_TELEMETRY_INTERVAL_S  # None (null): telemetry off
    rank_env: dict[str, str] = field(default_factory=dict)
    """Variables that load code (``env_settings.CODE_LOADING``) the spec opted in to: the rank
    starts again with them before its imports, so its launcher never runs with them."""
    preflight: PreflightConfig | None = None  # None: no pre-flight

    def check(self) -> None:
        if self.implementation.cuda_graphs and self.device != "cuda":
            raise ConfigError("'implementation.cuda_graphs' needs device 'cuda' (CUDA graphs run on GPUs)")


def config_document(config: WorkerConfig) -> dict[str, Any]:
    """The config as the JSON object a rank reads (``MLBENCH_CONFIG``); ``parse_config`` inverts it.
    An empty ``rank_env`` is left out (a config written before it existed reads the same)."""
    doc = dataclasses.asdict(config)
    doc["data"]["options"] = options_document(config.data.options)
    if not config.rank_env:
        del doc["rank_env"]
    return doc


def parse_config(document: Any) -> WorkerConfig:
    """Validate a decoded JSON document and build the ``WorkerConfig`` (``wire_types.read``, strict):
    unknown keys are ignored, absent ones take the dataclasses' defaults, declared once above."""
    if not isinstance(document, dict):
        raise ConfigError("the worker config must be a JSON object")
    try:
        return read(WorkerConfig, document, strict=True)
    except ConfigError:
        raise
    except Invalid as exc:
        raise ConfigError(str(exc)) from None


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
