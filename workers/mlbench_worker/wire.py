"""What crosses between the engine and a rank: ingest batches, event payloads, metric names.

Standard library only, so the engine imports it without torch and worker images need no pydantic.
Every message is declared once, as a frozen dataclass (``mlbench_worker.wire_types``: types, bounds,
descriptions), and everything else derives from that declaration: ranks send the batches the
reporter builds (a contract test validates them against the engine's API models, which are
derived from these declarations, as is the server's msgspec decoder of metric batches); the one
reader, ``wire_types.read``, reads a stored event payload tolerantly (payloads of earlier versions
included: a missing or mistyped field becomes its default). The config a rank starts with is
``mlbench_worker.config``'s.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar, Literal, TypeVar

from mlbench_worker.wire_types import Limits, doc, jsonable, read, to_json

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
PREFLIGHT = "preflight"

# --- metric names (telemetry's ``sys/`` series are in ``mlbench_worker.sysmetrics``) -------------

TRAIN_LOSS = "train_loss"
TRAIN_PREC1 = "train_Prec@1"
LR = "lr"
STEP_TIME = "step_time"  # the mean step of the latest report window (live views)
TIMED_STEP = "timed_step_s"  # one timed step after the warm-up: its seconds (step = its number)
TIMED_STEP_COMM = "timed_step_comm_s"  # the same step's all-reduce seconds
MODEL_FLOPS = "model_flops_per_step"  # one rank's training step (forward, loss, backward, optimizer)
PROBE_ALLREDUCE = "preflight_allreduce_us"  # the pre-flight's one-element all-reduce, median (us)
PROBE_GEMM = "gemm_tflops"  # the pre-flight's matrix-multiply probe, median (TFLOP/s)
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
VAL_PREFIX = "val_"  # every validation metric's
ALLREDUCE_PREFIX = "allreduce_"
ALLREDUCE_ITERATION = "iteration_s"  # task 0a: one timed repetition's latency (many per size)
PHASE_PREFIX = "phase_"
METRIC_NAMES = (
    TRAIN_LOSS,
    TRAIN_PREC1,
    LR,
    STEP_TIME,
    TIMED_STEP,
    TIMED_STEP_COMM,
    MODEL_FLOPS,
    PROBE_ALLREDUCE,
    PROBE_GEMM,
    TIME_TRAIN,
    TIME_VALIDATION,
    *TRACKER_TOTALS,
    GPU_MEMORY_PEAK_GIB,
    VAL_GLOBAL_LOSS,
    VAL_GLOBAL_PREC1,
    VAL_GLOBAL_PERPLEXITY,
    VAL_GLOBAL_BLEU,
)
"""Every metric name above; a test finds any of them, or a name with a prefix of ``METRIC_PREFIXES``,
written as a literal outside this module (and ``sysmetrics``, whose ``sys/`` series are its own)."""
METRIC_PREFIXES = (ALLREDUCE_PREFIX, PHASE_PREFIX)


def allreduce_metric(dtype: str, figure: str) -> str:
    """Task 0a's per-size series, e.g. ``allreduce_fp32_busbw`` (the size is the metric's step)."""
    return f"{ALLREDUCE_PREFIX}{dtype}_{figure}"


def phase_metric(phase: str) -> str:
    """A rank's cumulative seconds in one of the tracker's phases, e.g. ``phase_agg``."""
    return f"{PHASE_PREFIX}{phase}"


# --- ingest batches: what a rank's reporter posts to /v1/runs/{id}/{metrics,logs,events}:batch -----

MAX_BODY_BYTES = 8 * 1024 * 1024
MAX_BATCH_ITEMS = 10_000
MAX_NAME_LEN = 128
MAX_TEXT_LEN = 16 * 1024
MAX_KIND_LEN = 64
MAX_PAYLOAD_BYTES = 64 * 1024
MAX_RANK = 65_535
MAX_SEQ = 2**62

MetricName = Annotated[str, Limits(min_length=1, max_length=MAX_NAME_LEN, pattern=r"^[^\x00-\x1f]+$")]
Rank = Annotated[int, Limits(ge=0, le=MAX_RANK)]
Seq = Annotated[int, Limits(ge=0, le=MAX_SEQ)]
Session = Annotated[str, Limits(max_length=64, pattern=r"^[A-Za-z0-9._-]*$")]
Stream = Literal["stdout", "stderr", "system"]
EventKind = Annotated[str, Limits(min_length=1, max_length=MAX_KIND_LEN, pattern=r"^[A-Za-z0-9_.:-]+$")]
# Floats on the wire are finite: JSON has no NaN or infinity (a non-finite metric value is null).


@dataclass(frozen=True, kw_only=True)
class MetricIn:
    """One value of one metric; the server keys it by ``(rank, name, step)``."""

    name: MetricName
    value: float | None = field(metadata=doc("The value; null for NaN or infinity."))
    step: Annotated[int, Limits(ge=-MAX_SEQ, le=MAX_SEQ)] | None = None
    epoch: float | None = None
    t: float | None = field(default=None, metadata=doc("Wall time (unix seconds); the server's if absent."))


@dataclass(frozen=True, kw_only=True)
class LogIn:
    """One line a rank printed (or the launcher wrote about it: ``system``)."""

    text: Annotated[str, Limits(max_length=MAX_TEXT_LEN)]
    stream: Stream = "stdout"
    seq: Seq | None = field(default=None, metadata=doc("Line number in the rank's stream."))
    t: float | None = None


@dataclass(frozen=True, kw_only=True)
class EventIn:
    """One event: its kind (``*_START``, ``RUN_STOP`` ... above) and its payload (a ``Payload``'s)."""

    kind: EventKind
    payload: dict[str, Any] = field(default_factory=dict)
    t: float | None = None


@dataclass(frozen=True, kw_only=True)
class Batch:
    """What every batch carries: who sent it, and the ``(rank, session, seq)`` a retry reuses."""

    rank: Rank = field(metadata=doc("Rank that produced the batch."))
    seq: Seq = field(metadata=doc("Batch sequence number per (rank, session, kind); retries reuse it."))
    session: Session = field(
        default="", metadata=doc("Sender instance id, so a restarted sender does not collide.")
    )


Items = Limits(min_length=1, max_length=MAX_BATCH_ITEMS)


@dataclass(frozen=True, kw_only=True)
class MetricBatch(Batch):
    metrics: Annotated[list[MetricIn], Items]


@dataclass(frozen=True, kw_only=True)
class LogBatch(Batch):
    lines: Annotated[list[LogIn], Items]


@dataclass(frozen=True, kw_only=True)
class EventBatch(Batch):
    events: Annotated[list[EventIn], Items]


BATCHES: dict[str, type[Batch]] = {"metrics": MetricBatch, "logs": LogBatch, "events": EventBatch}
"""The batch of each ingest route (``/v1/runs/{id}/<kind>:batch``)."""


# --- event payloads ----------------------------------------------------------------------------

Status = Literal["success", "aborted", "failed"]
CheckStatus = Literal["pass", "warn", "fail", "skip"]
STATUSES: tuple[Status, ...] = ("success", "aborted", "failed")
P = TypeVar("P", bound="Payload")


@dataclass(frozen=True, kw_only=True)
class Payload:
    """Base of every event payload: its event name, its JSON form, and a tolerant reader."""

    KIND: ClassVar[str] = ""

    def to_payload(self) -> dict[str, Any]:
        """The JSON object a rank sends: unset (None) fields are left out, and so are NaN and
        infinity (JSON has neither); ``from_payload`` reads an absent field as its default."""
        return to_json(self)

    @classmethod
    def from_payload(cls: type[P], document: Mapping[str, Any]) -> P:
        """Read a stored payload; absent, null or mistyped fields take their defaults, extra ones
        are ignored (payloads of earlier and later versions read alike)."""
        return read(cls, document, strict=False)


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
        return {k: jsonable(v) for k, v in self.facts.items()}

    @classmethod
    def from_payload(cls, document: Mapping[str, Any]) -> Environment:
        return cls(facts=dict(document))

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
    def from_payload(cls, document: Mapping[str, Any]) -> RunStop:
        """As ``Payload.from_payload``; a stop stored without ``exit_code`` (TensorFlow ranks before
        they sent the common form) exited 0 when it says success, and is unknown otherwise."""
        stop = super().from_payload(document)
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
    "preflight",
    "data",
    "lazy_imports",
    "model",
    "graph_capture",
    "first_step",
)
"""The phases of a rank's start, in the order it goes through them (a task may skip some: 0a has
no model); ``mlbench_worker.timing.startup`` stamps them. ``lazy_imports`` is what torch imports the first
time it is used during setup (its compiler stack, when the first optimizer is built): before it
had a phase of its own it was nearly all of ``model``."""


@dataclass(frozen=True, kw_only=True)
class Startup(Payload):
    """Where a rank's seconds before its first step went, by phase (``STARTUP_PHASES``), and when
    its process started (UNIX time; None where the OS does not say)."""

    KIND: ClassVar[str] = STARTUP
    rank: int | None = None
    process_start_t: float | None = None
    phases: Mapping[str, float] = field(default_factory=dict)  # not a number of seconds: left out


@dataclass(frozen=True, kw_only=True)
class PreflightCheck(Payload):
    """One pre-flight check on one rank: its name, ``pass``/``warn``/``fail``/``skip``, what it
    found in words, and its measured and expected figure where it has them."""

    name: str = ""
    status: CheckStatus = "skip"
    detail: str = ""
    value: float | None = None
    expected: float | None = None
    unit: str | None = None


@dataclass(frozen=True, kw_only=True)
class Preflight(Payload):
    """A rank's pre-flight before training: its checks, and whether the run was stopped for them."""

    KIND: ClassVar[str] = PREFLIGHT
    rank: int | None = None
    device: str | None = None
    checks: tuple[PreflightCheck, ...] = ()
    stopped: bool = False
    seconds: float | None = None

    def to_payload(self) -> dict[str, Any]:
        doc = super().to_payload()
        doc["checks"] = [c.to_payload() for c in self.checks]
        return doc

    @classmethod
    def from_payload(cls, doc: Mapping[str, Any]) -> Preflight:
        """As ``Payload.from_payload``; checks that are not objects are left out."""
        read = super().from_payload({k: v for k, v in doc.items() if k != "checks"})
        raw = doc.get("checks")
        checks = (
            tuple(PreflightCheck.from_payload(c) for c in raw if isinstance(c, Mapping))
            if isinstance(raw, list)
            else ()
        )
        return dataclasses.replace(read, checks=checks)


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
        Preflight,
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
