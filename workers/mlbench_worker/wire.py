"""What crosses between the engine and a rank: event names and payloads, metric names, worker config.

Standard library only, so the engine imports it without torch and worker images need no pydantic.
Each event payload is a frozen dataclass: a rank builds it and sends ``to_payload()``; the engine
reads a stored payload back with ``parse_event`` (payloads of earlier versions included: a missing
or mistyped field becomes its default). The worker config is one typed tree: the engine builds it
(``mlbench_tui.plan``), ``config_document`` serialises it, and the rank's ``parse_config`` reads it.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, TypeVar, Union, get_args, get_origin

from mlbench_worker.hyperparams import TaskHyperparameters, parse_hyperparameters

# --- event names -------------------------------------------------------------------------------

INIT_START = "init_start"
ENVIRONMENT = "environment"
RUN_START = "run_start"
EPOCH_START = "epoch_start"
EVAL_START = "eval_start"
EPOCH_END = "epoch_end"
GOAL_REACHED = "goal_reached"
RUN_STOP = "run_stop"
RANK_FAILED = "rank_failed"
ALLREDUCE_SWEEP = "allreduce_sweep"
STARTUP = "startup"

# --- metric names (telemetry's ``sys/`` series are in ``mlbench_worker.sysmetrics``) -------------

TRAIN_LOSS = "train_loss"
TRAIN_PREC1 = "train_Prec@1"
LR = "lr"
STEP_TIME = "step_time"
TIME_TRAIN = "time_train"
TIME_VALIDATION = "time_validation"
TIME_COMPUTE = "time_compute"
TIME_COMMUNICATION = "time_communication"
TIME_PREPROCESS = "time_preprocess"
TIME_METRICS = "time_metrics"
TRACKER_TOTALS = (TIME_COMPUTE, TIME_COMMUNICATION, TIME_PREPROCESS, TIME_METRICS)
GPU_MEMORY_PEAK_GIB = "gpu_memory_peak_gib"
VAL_GLOBAL_LOSS = "val_global_loss"
VAL_GLOBAL_PREC1 = "val_global_Prec@1"
VAL_GLOBAL_PERPLEXITY = "val_global_Perplexity"
VAL_GLOBAL_BLEU = "val_global_BLEU-Score"
ALLREDUCE_PREFIX = "allreduce_"


def allreduce_metric(dtype: str, figure: str) -> str:
    """Task 0a's per-size series, e.g. ``allreduce_fp32_busbw`` (the size is the metric's step)."""
    return f"{ALLREDUCE_PREFIX}{dtype}_{figure}"


# --- event payloads ----------------------------------------------------------------------------

Status = Literal["success", "aborted", "failed"]
STATUSES: tuple[Status, ...] = ("success", "aborted", "failed")
P = TypeVar("P", bound="Payload")


@dataclass(frozen=True, kw_only=True)
class Payload:
    """Base of every event payload: its event name, its JSON form, and a tolerant reader."""

    KIND: ClassVar[str] = ""

    def to_payload(self) -> dict[str, Any]:
        """The JSON object a rank sends: unset (None) fields are left out, and so are NaN and
        infinity (JSON has neither); ``from_payload`` reads an absent field as its default."""
        values = ((f.name, _jsonable(getattr(self, f.name))) for f in dataclasses.fields(self))
        return {name: value for name, value in values if value is not None}

    @classmethod
    def from_payload(cls: type[P], doc: Mapping[str, Any]) -> P:
        """Read a stored payload; absent, null or mistyped fields take their defaults, extra ones
        are ignored (payloads of earlier and later versions read alike)."""
        hints = typing.get_type_hints(cls)
        values: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            value = _coerce(doc.get(f.name), hints[f.name])
            if value is not _MISSING:
                values[f.name] = value
        return cls(**values)


@dataclass(frozen=True, kw_only=True)
class InitStart(Payload):
    """Rank 0 begins setup (process group, data, model): MLPerf's ``init_start``."""

    KIND: ClassVar[str] = INIT_START


@dataclass(frozen=True, kw_only=True)
class Environment(Payload):
    """Rank 0's environment fingerprint: versions, hardware, threads, each rank's placement.

    An open record by nature (each backend and device adds its own facts), so it is one mapping;
    the fields the engine reads are typed below."""

    KIND: ClassVar[str] = ENVIRONMENT
    facts: Mapping[str, Any] = field(default_factory=dict)

    def to_payload(self) -> dict[str, Any]:
        return {k: _jsonable(v) for k, v in self.facts.items()}

    @classmethod
    def from_payload(cls, doc: Mapping[str, Any]) -> Environment:
        return cls(facts=dict(doc))

    @property
    def gpu_model(self) -> str | None:
        """The ranks' GPU model (None on CPU runs)."""
        return self._text("gpu_model")

    @property
    def cpu_model(self) -> str | None:
        """The CPU model rank 0 ran on."""
        return self._text("cpu_model")

    def _text(self, key: str) -> str | None:
        value = self.facts.get(key)
        return value if isinstance(value, str) and value else None


@dataclass(frozen=True, kw_only=True)
class RunStart(Payload):
    """Setup is done and the timed part begins; facts the run's MLPerf log reports ride on it."""

    KIND: ClassVar[str] = RUN_START
    train_samples: int | None = None
    eval_samples: int | None = None
    comm_precision: str | None = None


@dataclass(frozen=True, kw_only=True)
class EpochStart(Payload):
    """Rank 0 starts training epoch ``epoch`` (1-based)."""

    KIND: ClassVar[str] = EPOCH_START
    epoch: int | None = None


@dataclass(frozen=True, kw_only=True)
class EvalStart(Payload):
    """Rank 0 starts validating after epoch ``epoch``."""

    KIND: ClassVar[str] = EVAL_START
    epoch: int | None = None


@dataclass(frozen=True, kw_only=True)
class Progress(Payload):
    """Where training stands: epoch, step, cumulative train/validation seconds, graph capture."""

    epoch: int | None = None
    step: int | None = None
    train_time_s: float | None = None
    val_time_s: float | None = None
    graph_capture_s: float | None = None


@dataclass(frozen=True, kw_only=True)
class EpochEnd(Progress):
    """Rank 0 finished an epoch's validation."""

    KIND: ClassVar[str] = EPOCH_END


@dataclass(frozen=True, kw_only=True)
class GoalReached(Progress):
    """The global ``metric`` reached ``target`` (``value``) at this epoch."""

    KIND: ClassVar[str] = GOAL_REACHED
    metric: str | None = None
    value: float | None = None
    target: float | None = None


@dataclass(frozen=True, kw_only=True)
class RunStop(Progress):
    """How a rank stopped; every rank sends one, with the exit status it returns."""

    KIND: ClassVar[str] = RUN_STOP
    status: Status = "aborted"
    reason: str | None = None
    exit_code: int | None = None  # None: a stored stop that did not say
    points: int | None = None  # task 0a: the (dtype, size) points measured

    @classmethod
    def from_payload(cls, doc: Mapping[str, Any]) -> RunStop:
        """As ``Payload.from_payload``; a stop stored without ``exit_code`` (TensorFlow ranks before
        they sent the common form) exited 0 when it says success, and is unknown otherwise."""
        stop = super().from_payload(doc)
        if stop.exit_code is None and stop.status == "success":
            return dataclasses.replace(stop, exit_code=0)
        return stop

    @property
    def stopped_normally(self) -> bool:
        """Ended through the task (exit 0: goal reached, sweep done, max_time or max_epochs)."""
        return self.exit_code == 0


@dataclass(frozen=True, kw_only=True)
class RankFailed(Payload):
    """A rank raised; ``peer_failure`` when it only noticed another rank's death."""

    KIND: ClassVar[str] = RANK_FAILED
    rank: int | None = None
    exception: str = ""
    traceback: str = ""
    peer_failure: bool = False


@dataclass(frozen=True, kw_only=True)
class AllreduceSweep(Payload):
    """Task 0a's sweep facts: whether it has bandwidths at all, and the device's link ceiling."""

    KIND: ClassVar[str] = ALLREDUCE_SWEEP
    world_size: int | None = None
    latency_only: bool = False
    note: str | None = None
    busbw_ceiling_gbps: float | None = None
    ceiling_basis: str | None = None


STARTUP_PHASES = (
    "interpreter",
    "imports",
    "device",
    "rendezvous",
    "environment",
    "data",
    "model",
    "graph_capture",
    "first_step",
)
"""The phases of a rank's start, in the order it goes through them (a task may skip some: 0a has
no model); ``mlbench_worker.startup`` stamps them."""


@dataclass(frozen=True, kw_only=True)
class Startup(Payload):
    """Where a rank's seconds before its first step went, by phase (``STARTUP_PHASES``), and when
    its process started (UNIX time; None where the OS does not say)."""

    KIND: ClassVar[str] = STARTUP
    rank: int | None = None
    process_start_t: float | None = None
    phases: Mapping[str, float] = field(default_factory=dict)

    @classmethod
    def from_payload(cls, doc: Mapping[str, Any]) -> Startup:
        """As ``Payload.from_payload``; phases that are not a number of seconds are left out."""
        read = super().from_payload(doc)
        phases = {str(k): float(v) for k, v in read.phases.items() if _coerce(v, float) is not _MISSING}
        return dataclasses.replace(read, phases=phases)


EVENTS: dict[str, type[Payload]] = {
    cls.KIND: cls
    for cls in (
        InitStart,
        Environment,
        RunStart,
        EpochStart,
        EvalStart,
        EpochEnd,
        GoalReached,
        RunStop,
        RankFailed,
        AllreduceSweep,
        Startup,
    )
}


class EventSink(typing.Protocol):
    """Anything that sends events (the reporter, a test's recorder)."""

    def event(self, kind: str, payload: dict[str, Any]) -> None: ...


def emit(sink: EventSink, payload: Payload) -> None:
    """Send ``payload`` as the event it is."""
    sink.event(payload.KIND, payload.to_payload())


def parse_event(kind: str, doc: Mapping[str, Any]) -> Payload | None:
    """A stored event's typed payload; None for a kind this version does not know."""
    cls = EVENTS.get(kind)
    return cls.from_payload(doc) if cls is not None else None


_MISSING: Any = object()


def _coerce(value: Any, hint: Any) -> Any:
    """``value`` as ``hint`` when it is one (ints widen to float), else ``_MISSING`` (the default)."""
    if value is None:
        return _MISSING
    origin = get_origin(hint)
    if origin in (Union, types.UnionType):
        for arm in get_args(hint):
            if arm is not type(None) and (got := _coerce(value, arm)) is not _MISSING:
                return got
        return _MISSING
    if origin is Literal:
        return value if value in get_args(hint) else _MISSING
    if hint is bool:
        return value if isinstance(value, bool) else _MISSING
    if hint is int:
        if isinstance(value, float) and value.is_integer():
            return int(value)
        return value if isinstance(value, int) and not isinstance(value, bool) else _MISSING
    if hint is float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        return float(value) if ok and math.isfinite(value) else _MISSING
    if hint is str:
        return value if isinstance(value, str) else _MISSING
    if origin in (dict, Mapping) or hint in (dict, Mapping):
        return dict(value) if isinstance(value, Mapping) else _MISSING
    return value


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value


# --- the worker config -------------------------------------------------------------------------

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


class ConfigError(ValueError):
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
    options: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ImplementationConfig:
    """How the step is run, where the spec chose (the math stays the task's). The spec, the plan
    and the rank all take these defaults from here."""

    cuda_graphs: bool = False
    host_allocator: HostAllocator = "tuned"
    """``tuned``: the rank keeps freed heap memory for the next step (``mlbench_worker.allocator``)."""


@dataclass(frozen=True)
class WorkerConfig:
    """Everything a rank needs to run one task of one run."""

    run_id: str
    task: str
    backend: Backend
    world_size: int
    seed: int = 42
    run_name: str = ""
    framework: str = "pytorch"
    goal: GoalConfig | None = None
    max_time_s: float | None = None
    precision: Precision = "fp32"
    device: Device = "cpu"
    gpu_type: str | None = None  # the GPU model the spec asks for ('A100'); None: any GPU
    gpu_type_strict: bool = True  # a rank on another model fails the run (else it only says so)
    threads_per_rank: int = 1
    data: DataConfig = field(default_factory=DataConfig)
    hyperparameters: TaskHyperparameters = field(default_factory=TaskHyperparameters)
    implementation: ImplementationConfig = field(default_factory=ImplementationConfig)
    telemetry_interval_s: float | None = DEFAULT_TELEMETRY_INTERVAL_S  # None: telemetry off


def config_document(config: WorkerConfig) -> dict[str, Any]:
    """The config as the JSON object a rank reads (``MLBENCH_CONFIG``); ``parse_config`` inverts it."""
    return dataclasses.asdict(config)


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


def _choice(value: str, allowed: tuple[str, ...], key: str) -> Any:
    if value not in allowed:
        raise ConfigError(f"{key!r} must be one of {', '.join(allowed)}, got {value!r}")
    return value


def _object(doc: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = doc.get(key) or {}
    if not isinstance(value, dict):
        raise ConfigError(f"'{key}' must be an object")
    return value


def parse_config(doc: Any) -> WorkerConfig:
    """Validate a decoded JSON document and build the ``WorkerConfig``; unknown keys are ignored.

    Absent keys take the dataclasses' defaults, so each default is declared once, above."""
    if not isinstance(doc, dict):
        raise ConfigError("the worker config must be a JSON object")
    defaults = WorkerConfig(run_id="", task="", backend="gloo", world_size=1)
    impl_defaults, data_defaults = ImplementationConfig(), DataConfig()
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
    data_doc = _object(doc, "data")
    data = DataConfig(
        source=_choice(str(data_doc.get("source", data_defaults.source)), DATA_SOURCES, "data.source"),
        path=_optional(data_doc, "path", str, None),
        options=dict(_object(data_doc, "options")),
    )
    if data.source == "path" and not data.path:
        raise ConfigError("data.source 'path' needs data.path (the prepared dataset directory)")
    world_size = _require(doc, "world_size", int)
    if world_size < 1:
        raise ConfigError(f"'world_size' must be >= 1, got {world_size}")
    threads = _optional(doc, "threads_per_rank", int, defaults.threads_per_rank)
    if threads < 1:
        raise ConfigError(f"'threads_per_rank' must be >= 1, got {threads}")
    impl_doc = _object(doc, "implementation")
    implementation = ImplementationConfig(
        cuda_graphs=bool(_optional(impl_doc, "cuda_graphs", bool, impl_defaults.cuda_graphs)),
        host_allocator=_choice(
            _optional(impl_doc, "host_allocator", str, impl_defaults.host_allocator),
            HOST_ALLOCATORS,
            "implementation.host_allocator",
        ),
    )
    device = _choice(_optional(doc, "device", str, defaults.device), DEVICES, "device")
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
        seed=_optional(doc, "seed", int, defaults.seed),
        run_name=_optional(doc, "run_name", str, defaults.run_name),
        framework=_optional(doc, "framework", str, defaults.framework),
        goal=goal,
        max_time_s=float(max_time) if max_time is not None else None,
        precision=_choice(_optional(doc, "precision", str, defaults.precision), PRECISIONS, "precision"),
        device=device,
        gpu_type=_optional(doc, "gpu_type", str, None),
        gpu_type_strict=_optional(doc, "gpu_type_strict", bool, defaults.gpu_type_strict),
        threads_per_rank=threads,
        data=data,
        hyperparameters=parse_hyperparameters(doc["task"], dict(_object(doc, "hyperparameters"))),
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
