"""The benchmark spec language (``apiVersion: mlbench/v1``, ``kind: Benchmark``) as pydantic models.

Models are strict (unknown keys and wrong types are errors) and every field carries a description,
which becomes the JSON Schema and the editor help. Short forms people expect are accepted and
normalized on load: ``max_time: 30m``, ``memory: 12Gi``, ``gpu: 1xT4``, ``workers: 4`` (a sweep of
one), ``target: local``, ``data: synthetic``. Cross-field rules that depend on the task catalog
(backends, precisions, hyperparameter policy) live in ``mlbench_tui.spec.policy`` so each problem
can be reported at its own line.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from typing import Annotated, Any, Literal

from mlbench_worker.config import DEFAULT_TELEMETRY_INTERVAL_S, HostAllocator, ImplementationConfig
from pydantic import (
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    JsonValue,
    Tag,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from mlbench_tui.spec.base import (
    DNS1123_LABEL,
    LABEL_KEY,
    LabelKey,
    StrictModel,
    with_short_form,
)
from mlbench_tui.spec.currencies import ISO_4217
from mlbench_tui.spec.environment import ENV_NAME
from mlbench_tui.spec.hardware import Gpu, GpuField, Hardware
from mlbench_tui.spec.hyperparameters import select_by_task
from mlbench_tui.spec.limits import (
    MAX_DESCRIPTION,
    MAX_PRICE,
    MAX_SEED,
    MAX_TELEMETRY_INTERVAL_S,
    MIN_TELEMETRY_INTERVAL_S,
)
from mlbench_tui.spec.network import NetworkField, network_schema, network_tag
from mlbench_tui.spec.shortforms import (
    BACKENDS,
    BackendSweep,
    FrameworkSweep,
    MaxTime,
    WorkersSweep,
    duration_at_most,
    duration_schema,
    parse_cpu,
    parse_duration,
    parse_gpu,
    parse_memory,
    show_value,
)
from mlbench_tui.spec.targets import LocalTarget, Target
from mlbench_tui.spec.tasks import GOAL_METRICS, TASK_KEYS, get_task

API_VERSION = "mlbench/v1"
KIND = "Benchmark"

__all__ = [  # re-exported
    "BACKENDS",
    "Gpu",
    "GpuField",
    "Hardware",
    "parse_cpu",
    "parse_duration",
    "parse_gpu",
    "parse_memory",
]


_LABEL_KEY_RE = LABEL_KEY


# --------------------------------------------------------------------------- sections


class Metadata(StrictModel):
    """Identity of the benchmark: its name (used in run names) plus free-form labels."""

    name: str = Field(
        description="Benchmark name, a DNS-1123 label (lowercase letters, digits and '-', at most 63 "
        "characters); run names are '<name>-<backend>-<workers>w[-r<i>]'.",
        json_schema_extra={"pattern": DNS1123_LABEL.pattern, "maxLength": 63},
    )
    labels: dict[LabelKey, Annotated[str, Field(max_length=63)]] = Field(
        default_factory=dict,
        json_schema_extra={
            "propertyNames": {"pattern": _LABEL_KEY_RE.pattern, "maxLength": 317},
            "additionalProperties": {"type": "string", "maxLength": 63},
        },
        description="Free-form key/value labels (keys in Kubernetes' label syntax, values of at most 63 "
        "characters), copied to every run and, made valid label values, to its Kubernetes objects.",
    )
    description: str | None = Field(
        default=None,
        max_length=MAX_DESCRIPTION,
        description="What this benchmark is for, in a sentence or two.",
    )

    @field_validator("name")
    @classmethod
    def _dns_label(cls, value: str) -> str:
        if len(value) > 63 or not DNS1123_LABEL.fullmatch(value):
            raise PydanticCustomError(
                "dns_label",
                "{value} is not a DNS-1123 label: use at most 63 lowercase letters, digits "
                "and '-', starting and ending with a letter or digit (e.g. '{suggestion}')",
                {"value": show_value(value), "suggestion": _dns_suggestion(value)},
            )
        return value


def _dns_suggestion(value: str) -> str:
    text = re.sub(r"[^a-z0-9-]+", "-", value.lower()).strip("-")[:63].strip("-")
    return text or "my-benchmark"


class CustomGoal(StrictModel):
    """An explicit goal: stop when a global validation metric reaches a target."""

    metric: str = Field(description="Global metric to watch, e.g. 'val_global_Prec@1' (percent).")
    target: float = Field(ge=-MAX_PRICE, le=MAX_PRICE, description="Value to reach.")
    direction: Literal["max", "min"] | None = Field(
        default=None,
        description="'max': done when metric >= target; 'min': done when metric <= target. "
        "Defaults to the metric's natural direction (perplexity and loss: min).",
    )

    @field_validator("metric")
    @classmethod
    def _known_metric(cls, value: str) -> str:
        if value not in GOAL_METRICS:
            raise PydanticCustomError(
                "goal_metric",
                "unknown goal metric {value}: expected one of {expected}",
                {"value": show_value(value), "expected": ", ".join(repr(m) for m in GOAL_METRICS)},
            )
        return value

    def resolved_direction(self) -> Literal["max", "min"]:
        """The explicit direction, or the metric's natural one."""
        return self.direction or GOAL_METRICS[self.metric].direction


def _goal_tag(value: Any) -> str | None:
    if isinstance(value, str):
        return "preset"
    if isinstance(value, dict | CustomGoal):
        return "custom"
    return None


Goal = Annotated[
    Annotated[Literal["full", "light"], Tag("preset")] | Annotated[CustomGoal, Tag("custom")],
    Discriminator(
        _goal_tag,
        custom_error_type="goal",
        custom_error_message="goal must be 'full', 'light' or a mapping {metric, target, direction}",
    ),
]


class Implementation(StrictModel):
    """How a run executes its steps where the task leaves a choice; the math stays the task's."""

    cuda_graphs: bool = Field(
        default=ImplementationConfig.cuda_graphs,
        description="Capture each training step in CUDA graphs (one per phase: forward, loss, backward, "
        "all-reduce, optimizer, metrics) and replay them, so the host no longer launches every kernel. "
        "Needs GPUs and backend nccl; tasks whose batches change shape on almost every step (0a, 4a, 4b) "
        "refuse it. Warm-up and capture count as initialisation, reported apart from time to accuracy.",
    )
    host_allocator: HostAllocator = Field(
        default=ImplementationConfig.host_allocator,
        description="The ranks' host memory allocator. 'tuned' (the default) makes glibc keep the memory "
        "a step frees for the next step instead of handing it back to the kernel and faulting it in "
        "again; 'system' keeps the C library's defaults. An allocator set in the run's environment "
        "(MALLOC_*_, GLIBC_TUNABLES, a preloaded jemalloc or tcmalloc) is left alone either way.",
    )


TelemetryInterval = Annotated[
    float,
    BeforeValidator(duration_at_most(MAX_TELEMETRY_INTERVAL_S)),
    duration_schema(MAX_TELEMETRY_INTERVAL_S),
]


class Telemetry(StrictModel):
    """Hardware telemetry of every rank, sampled off the training thread and stored as ``sys/`` metrics."""

    enabled: bool = Field(
        default=True,
        description="Sample CPU, memory, network and GPU (power, energy, utilisation) per rank; "
        "`telemetry: off` turns it off.",
    )
    interval: TelemetryInterval = Field(
        default=DEFAULT_TELEMETRY_INTERVAL_S,
        description="Time between samples: '1s' (the default), '0.5s', '10s', or seconds.",
    )

    @field_validator("interval")
    @classmethod
    def _not_too_often(cls, value: float) -> float:
        if value < MIN_TELEMETRY_INTERVAL_S:
            raise PydanticCustomError(
                "telemetry_interval",
                "telemetry interval must be at least {least}s (got {value}s): sampling faster would cost "
                "the training step",
                {"least": MIN_TELEMETRY_INTERVAL_S, "value": value},
            )
        return value

    @property
    def interval_s(self) -> float | None:
        """Seconds between samples; None when telemetry is off."""
        return self.interval if self.enabled else None


class Preflight(StrictModel):
    """Checks before training that the machine is healthy (``mlbench_worker.telemetry.preflight``): NVML's
    ECC errors, clock slowdowns and other processes on each GPU, its clocks under load, a short
    all-reduce and a matrix-multiply probe against the machine's expected values."""

    enabled: bool | Literal["auto"] = Field(
        default="auto",
        description="Run the checks: 'auto' (the default: on GPU runs, or where a limit is set), "
        "true or false.",
    )
    on_failure: Literal["stop", "warn"] = Field(
        default="stop",
        description="A failed check stops the run before training with its reason ('stop'), or is "
        "reported beside the result while the run trains anyway ('warn').",
    )
    min_gemm_tflops: float | None = Field(
        default=None,
        gt=0,
        le=1e6,
        description="Fail below this matrix-multiply rate (TFLOP/s), on any machine.",
    )
    max_allreduce_us: float | None = Field(
        default=None, gt=0, le=1e9, description="Fail above this one-element all-reduce latency (us)."
    )


def _preflight_short_form(value: Any) -> Any:
    """``off``/``false``, ``on``/``true``, ``auto`` and ``warn`` (checks on, failures warn)."""
    forms: dict[Any, dict[str, Any]] = {
        "off": {"enabled": False},
        False: {"enabled": False},
        "on": {"enabled": True},
        True: {"enabled": True},
        "auto": {"enabled": "auto"},
        "warn": {"enabled": True, "on_failure": "warn"},
    }
    if isinstance(value, bool | str) and value in forms:
        return forms[value]
    if isinstance(value, str):
        raise PydanticCustomError(
            "preflight",
            "preflight must be 'auto', 'on', 'off', 'warn' or a mapping such as 'on_failure: warn', "
            "got {value}",
            {"value": show_value(value)},
        )
    return value


PreflightField = Annotated[Preflight, BeforeValidator(_preflight_short_form)]


def _telemetry_short_form(value: Any) -> Any:
    """``off``/``false`` and ``on``/``true`` for ``{enabled: ...}`` (YAML 1.2 reads off/on as strings)."""
    if value in ("off", False):
        return {"enabled": False}
    if value in ("on", True):
        return {"enabled": True}
    if isinstance(value, str):
        raise PydanticCustomError(
            "telemetry",
            "telemetry must be 'off', 'on' or a mapping such as 'interval: 1s', got {value}",
            {"value": show_value(value)},
        )
    return value


TelemetryField = Annotated[Telemetry, BeforeValidator(_telemetry_short_form)]


class Data(StrictModel):
    """Where the dataset comes from."""

    source: Literal["synthetic", "path", "download"] = Field(
        description="'synthetic': generated, learnable data for smoke runs; 'path': a prepared dataset "
        "directory; 'download': fetch (with checksums) into a cache directory."
    )
    path: str | None = Field(
        default=None,
        description="Dataset directory (source 'path', required) or cache directory (source 'download', "
        "default: the user cache directory).",
    )
    options: dict[str, Any] = Field(
        default_factory=dict,
        description="Options of the source, declared per task (mlbench_worker.data.options; see "
        "`mlbench tasks TASK`), e.g. for synthetic data {train_samples: 2048, val_samples: 512}; "
        "a prepared path or a download takes none.",
    )

    @model_validator(mode="after")
    def _path_rules(self) -> Data:
        if self.source == "path" and not self.path:
            raise PydanticCustomError(
                "data_path", "data.source 'path' needs data.path (the dataset directory)"
            )
        if self.source == "synthetic" and self.path:
            raise PydanticCustomError(
                "data_path", "data.path is not used with source 'synthetic': remove it or use source 'path'"
            )
        return self


def _data_short_form(value: Any) -> Any:
    return {"source": value} if isinstance(value, str) else value


DataField = Annotated[Data, BeforeValidator(_data_short_form)]


def _task_key(value: Any) -> Any:
    if not isinstance(value, str):
        raise PydanticCustomError("task", "task must be a task id or name such as '1a' or 'resnet20-cifar10'")
    task = get_task(value)
    if task is None:
        raise PydanticCustomError(
            "literal_error",
            "unknown task {value}: expected one of {expected}",
            {"value": show_value(value), "raw": value, "expected": ", ".join(repr(k) for k in TASK_KEYS)},
        )
    return task.id


TaskKey = Annotated[
    str,
    BeforeValidator(_task_key),
    WithJsonSchema({"type": "string", "enum": list(TASK_KEYS), "examples": ["1a", "resnet20-cifar10"]}),
]


HyperparameterOverrides = Annotated[dict[str, Any], WithJsonSchema({"type": "object"})]
"""As written (the spec hash covers them so); the task's declarations check them (``spec.policy``)
and the body's schema gives each task's model (``select_by_task``)."""


_CURRENCIES: list[JsonValue] = [*sorted(ISO_4217)]


class BenchmarkBody(StrictModel):
    """What to run, on what, where, and until when."""

    model_config = ConfigDict(
        strict=True, extra="forbid", frozen=True, allow_inf_nan=False, json_schema_extra=select_by_task
    )

    task: TaskKey = Field(description="Official task id or name: " + ", ".join(TASK_KEYS) + ".")
    framework: FrameworkSweep = Field(
        default_factory=lambda: ["pytorch"],
        description="Implementation to run: pytorch, or tensorflow where the task has one (1a), "
        "or a list to compare them: [pytorch, tensorflow].",
    )
    goal: Goal | None = Field(
        default=None,
        description="'full' (the official target), 'light' (a relaxed target) or "
        "{metric, target, direction}. Default: full; tasks without a goal (0a) take none.",
    )
    max_time: MaxTime | None = Field(
        default=None, description="Stop a run after this much wall time: '30m', '2h', '1h30m' or seconds."
    )
    workers: WorkersSweep = Field(
        default_factory=lambda: [1],
        description="World size, or a list of world sizes to sweep: 4 or [1, 2, 4, 8].",
    )
    backend: BackendSweep = Field(
        default_factory=lambda: ["gloo"],
        description="Communication backend gloo, nccl (GPUs) or mpi, or a list to sweep: [gloo, mpi].",
    )
    hardware: Hardware = Field(
        default_factory=Hardware, description="Per-rank resources, ranks per node and precision."
    )
    implementation: Implementation = Field(
        default_factory=Implementation,
        description="Implementation choices: {cuda_graphs: true} replays each training step from CUDA "
        "graphs (off by default); {host_allocator: system} keeps the C library's allocator defaults.",
    )
    network: NetworkField | None = Field(
        default=None,
        description="The links between ranks: {bandwidth: 100Mbit, latency: 5ms} per rank, or a rate alone "
        "('network: 1Gbit'); lists sweep. Local runs emulate them (a network namespace per node, tc on "
        "its link); Kubernetes enforces them per pod. Unset: the machine's own network, nothing emulated.",
        json_schema_extra=network_schema,
    )
    target: Target = Field(
        default_factory=lambda: LocalTarget(kind="local"),
        description="Where ranks run: 'local', {kind: kubernetes, namespace, image, ...} or "
        "{kind: slurm, cluster, partition, ...}.",
        json_schema_extra=with_short_form("local", "slurm"),
    )
    data: DataField = Field(
        default_factory=lambda: Data(source="download"),
        description="Dataset source: 'synthetic', 'download' (default) or {source: path, path: DIR}.",
        json_schema_extra=with_short_form("synthetic", "download"),
    )
    hyperparameters: HyperparameterOverrides = Field(
        default_factory=dict,
        description="Overrides of the task's defaults; only what the task's policy allows (batch size and "
        "learning-rate schedule, like MLPerf), checked against the task's declared types and bounds. "
        "See `mlbench tasks TASK`.",
    )
    seed: int = Field(default=42, ge=0, le=MAX_SEED, description="Random seed; repeat i uses seed + i.")
    repeats: int = Field(
        default=1, ge=1, le=100, description="Runs per configuration (scored with an olympic mean)."
    )
    env: dict[str, str] = Field(
        default_factory=dict,
        description="Extra environment variables for every rank (and its launcher). Those the ranks "
        "read (MLBENCH_INJECT_FAULT, MLBENCH_COLLECTIVE_TIMEOUT_S, thread counts) are checked as the "
        "ranks read them; those that load code (LD_PRELOAD, PYTHONPATH, PATH, ...) need env_loading_code.",
        json_schema_extra={"propertyNames": {"pattern": ENV_NAME.pattern}},
    )
    env_loading_code: list[str] = Field(
        default_factory=list,
        description="The variables of env that load code into the processes started with them "
        "(LD_PRELOAD, LD_LIBRARY_PATH, PYTHONPATH, PYTHONHOME, PATH, BASH_ENV, ...), named again to say "
        "they are meant: they are then set for the ranks only (each rank starts again with them), "
        "never for the launchers (torchrun, mpiexec, srun, the batch script).",
    )
    price_per_hour: float | None = Field(
        default=None,
        ge=0,
        le=MAX_PRICE,
        description="Price of the whole run's hardware per hour, for cost to target.",
    )
    telemetry: TelemetryField = Field(
        default_factory=Telemetry,
        description="Hardware telemetry per rank: {interval: 1s} (the default) or 'off'.",
        json_schema_extra=with_short_form("off", "on", boolean=True),
    )
    preflight: PreflightField = Field(
        default_factory=Preflight,
        description="Health checks before training: 'auto' (on GPU runs; the default), 'on', 'off', "
        "'warn', or {on_failure: stop|warn, min_gemm_tflops, max_allreduce_us}.",
        json_schema_extra=with_short_form("auto", "on", "off", "warn", boolean=True),
    )
    price_per_kwh: float | None = Field(
        default=None,
        ge=0,
        le=MAX_PRICE,
        description="Price of one kWh, for the energy cost to target (GPU energy measured by NVML).",
    )
    currency: str | None = Field(
        default=None,
        description="ISO 4217 code of price_per_hour and price_per_kwh (EUR, CHF, ...); unset: USD.",
        json_schema_extra={"enum": _CURRENCIES},
    )

    @field_validator("currency")
    @classmethod
    def _currency(cls, value: str | None) -> str | None:
        if value is not None and value not in ISO_4217:
            suggestion = value.upper() if value.upper() in ISO_4217 else None
            suggestion = suggestion or next(
                (c for c in sorted(ISO_4217) if value.upper().startswith(c)), None
            )
            raise PydanticCustomError(
                "currency",
                "{value} is not an ISO 4217 currency code (EUR, USD, CHF, ...)",
                {"value": show_value(value), "hint": f"did you mean '{suggestion}'?" if suggestion else None},
            )
        return value


FRAMEWORK_TAGS: dict[str, str] = {"pytorch": "pt", "tensorflow": "tf"}


class BenchmarkSpec(StrictModel):
    """A benchmark spec document: ``apiVersion: mlbench/v1``, ``kind: Benchmark``."""

    model_config = ConfigDict(
        strict=True,
        extra="forbid",
        frozen=True,
        allow_inf_nan=False,
        title="mlbench Benchmark",
        json_schema_extra={"$schema": "https://json-schema.org/draft/2020-12/schema"},
    )

    api_version: Literal["mlbench/v1"] = Field(alias="apiVersion", description="Always 'mlbench/v1'.")
    kind: Literal["Benchmark"] = Field(description="Always 'Benchmark'.")
    metadata: Metadata = Field(description="Name, labels and description.")
    spec: BenchmarkBody = Field(description="What to run and where.")

    @property
    def name(self) -> str:
        return self.metadata.name

    def run_suffix(
        self,
        framework: str,
        backend: str,
        workers: int,
        repeat: int | None = None,
        network: tuple[int | None, float] | None = None,
    ) -> str:
        """What follows metadata.name in a run name: ``[-tf|-pt]-<backend>-<workers>w[-<network>][-r<i>]``.

        The framework appears only when the spec compares frameworks, so single-framework run
        names stay ``<name>-<backend>-<workers>w``; a spec with ``network`` names each run of
        several ranks by its bandwidth and latency (``-100mbit-5ms``; ``network`` None gives the
        longest of them);
        ``repeat`` None gives the longest suffix.
        """
        suffix = f"-{FRAMEWORK_TAGS[framework]}" if len(self.spec.framework) > 1 else ""
        suffix += f"-{backend}-{workers}w"
        if self.spec.network is not None and workers > 1:  # one rank has no link: no network run
            points = [network] if network is not None else self.spec.network.points()
            suffix += "-" + max((network_tag(*point) for point in points), key=len)
        if self.spec.repeats > 1:
            suffix += f"-r{self.spec.repeats - 1 if repeat is None else repeat}"
        return suffix

    def run_count(self) -> int:
        """How many runs the spec expands to (frameworks x backends x world sizes x repeats),
        counted without expanding them."""
        body = self.spec
        return len(body.framework) * len(body.backend) * len(body.workers) * body.repeats

    def run_names(self) -> Iterator[str]:
        """Every run's name, in the plan's order."""
        body = self.spec
        for framework, backend, workers in itertools.product(body.framework, body.backend, body.workers):
            for repeat in range(body.repeats):
                yield self.metadata.name + self.run_suffix(framework, backend, workers, repeat)

    def normalized(self) -> dict[str, Any]:
        """The spec as plain JSON data, short forms expanded; the input of the spec hash.

        Implementation choices, telemetry, the pre-flight, the network and the energy price left
        at their defaults, an unset ``ranks_per_node`` and an empty ``env_loading_code`` are
        omitted, so specs written before they existed keep their hash (and their stored runs)."""
        doc = self.model_dump(mode="json", by_alias=True)
        if self.spec.implementation == Implementation():
            del doc["spec"]["implementation"]
        if self.spec.hardware.ranks_per_node is None:
            del doc["spec"]["hardware"]["ranks_per_node"]
        if self.spec.telemetry == Telemetry():
            del doc["spec"]["telemetry"]
        if self.spec.preflight == Preflight():
            del doc["spec"]["preflight"]
        if self.spec.price_per_kwh is None:
            del doc["spec"]["price_per_kwh"]
        if self.spec.currency is None:
            del doc["spec"]["currency"]
        if self.spec.network is None:
            del doc["spec"]["network"]
        elif self.spec.network.kubernetes_bandwidth is None:
            del doc["spec"]["network"]["kubernetes_bandwidth"]
        if not self.spec.env_loading_code:
            del doc["spec"]["env_loading_code"]
        return doc
