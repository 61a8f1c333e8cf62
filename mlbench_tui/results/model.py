"""``RunResult``: what one finished run achieved, as the server stores it and every view reads it.

The server computes it once, when the run reaches its final state (``results.summary``); the
CLI, the TUI, scoring and export read its fields. Every field has a default, so results stored
by older versions (plain dicts with fewer keys) still load, and unknown keys from newer ones are
ignored. To add a figure: one field here (with its default and description) and its value in
``summary.summarize_run``.
"""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, model_validator

from mlbench_tui.lifecycle import RunState
from mlbench_tui.plan import GoalPlan, ImplementationPlan


def _stored_goal(value: Any) -> Any:
    """A goal as any version stored it: older runs may lack ``kind`` (then custom) and
    ``direction`` (then max); one that still does not validate reads as no goal."""
    if not isinstance(value, dict):
        return value
    try:
        return GoalPlan.model_validate({"kind": "custom", "direction": "max", **value})
    except ValidationError:
        return None


StoredGoal = Annotated[GoalPlan | None, BeforeValidator(_stored_goal)]


def _stored_implementation(value: Any) -> Any:
    """An implementation as any version stored it: options a newer version added are ignored, and a
    run from before host allocator tuning existed ran with the system's."""
    if not isinstance(value, dict):
        return value
    names = {f.name for f in dataclasses.fields(ImplementationPlan)}
    known = {key: option for key, option in value.items() if key in names}
    return {"host_allocator": "system", **known}


StoredImplementation = Annotated[ImplementationPlan, BeforeValidator(_stored_implementation)]


class _Loose(BaseModel):
    model_config = ConfigDict(extra="ignore")


class TimeSplit(_Loose):
    """Mean over ranks of each rank's final tracker totals (seconds), and the two main shares."""

    compute: float = 0.0
    communication: float = 0.0
    preprocess: float = 0.0
    metrics: float = 0.0
    compute_fraction: float = 0.0
    communication_fraction: float = 0.0


class AllreduceFigures(_Loose):
    """Task 0a, per dtype: sizes measured, peak bus bandwidth and the smallest size's latency,
    and what to make of them (one rank has latency only; a bandwidth above the device's
    plausibility ceiling is timing, not transfer)."""

    sizes: int = 0
    peak_busbw_gbps: float | None = None
    peak_busbw_size: int | None = None
    min_size_latency_p50_s: float | None = None
    latency_only: bool = Field(default=False, description="One rank: its all-reduce moves no data.")
    busbw_ceiling_gbps: float | None = Field(
        default=None, description="The plausibility ceiling the worker reported for its device."
    )
    above_ceiling: int = Field(default=0, description="Sizes whose bus bandwidth is above the ceiling.")
    note: str | None = Field(default=None, description="Why there is no bandwidth, or why it is flagged.")
    min_size_spread: float | None = Field(
        default=None,
        description="Half the p10-p90 range over the median of the smallest size's timed repetitions.",
    )
    peak_busbw_spread: float | None = Field(
        default=None, description="The same, of the repetitions at the peak bandwidth's size."
    )


class RankTelemetryFigures(_Loose):
    """One rank's hardware figures from its telemetry (None where it reported no such series)."""

    rank: int
    peak_rss_mib: float | None = Field(default=None, description="Peak resident memory of the process.")
    mem_limit_mib: float | None = Field(default=None, description="The memory limit of its cgroup (pod).")
    peak_gpu_mem_mib: float | None = Field(
        default=None, description="The framework's peak allocated GPU memory (else NVML's peak in use)."
    )
    mean_gpu_util: float | None = Field(
        default=None, description="Mean GPU utilisation (%) while timed; None below 60 readings."
    )
    gpu_util_readings: int | None = Field(default=None, description="NVML readings taken while timed.")
    gpu_util_note: str | None = Field(
        default=None, description="Why there is no utilisation figure ('n/a: 1 reading in 1.3 s')."
    )
    energy_j: float | None = Field(default=None, description="GPU energy from run_start to run_stop.")
    energy_to_accuracy_j: float | None = Field(default=None, description="GPU energy to the goal.")
    energy_source: Literal["counter", "power"] | None = Field(
        default=None, description="NVML's energy counter, or its integrated power draw."
    )


class TelemetryFigures(_Loose):
    """A run's hardware figures (``results.telemetry``): the worst rank's peaks, the mean GPU
    utilisation over ranks, the GPU energy of all ranks together and what it cost."""

    peak_rss_mib: float | None = None
    peak_gpu_mem_mib: float | None = None
    mean_gpu_util: float | None = Field(
        default=None,
        description="Percent, between run_start and run_stop; over ranks with 60 readings or more.",
    )
    gpu_util_readings: int | None = Field(default=None, description="The fewest readings of any GPU rank.")
    gpu_util_note: str | None = Field(default=None, description="Why there is no utilisation figure.")
    energy_j: float | None = Field(default=None, description="All GPUs, run_start to run_stop.")
    energy_to_accuracy_j: float | None = Field(default=None, description="All GPUs, run_start to the goal.")
    energy_to_accuracy_kwh: float | None = None
    energy_cost: float | None = Field(
        default=None, description="Energy to accuracy x the spec's price_per_kwh."
    )
    price_per_kwh: float | None = None
    energy_source: Literal["counter", "power"] | None = Field(
        default=None, description="'power' when any rank's energy was integrated from its power draw."
    )
    ranks: list[RankTelemetryFigures] = Field(default_factory=list)


class StartupFigures(_Loose):
    """Where a run's seconds before its first training step went: the launcher's part (from the
    run's creation to its first rank's process) and the slowest rank's phases (``startup``
    events), none of it in the time to accuracy."""

    launcher_s: float | None = Field(
        default=None, description="Run created to the first rank's process start (spawn, scheduling)."
    )
    launcher: str = Field(default="spawn", description="What the launcher's part is on this target.")
    launcher_parts: dict[str, float] = Field(
        default_factory=dict,
        description="The launcher's part split where the target reports its milestones, in order "
        "(e.g. queued, spawned); the parts sum to launcher_s. Empty: the single figure alone.",
    )
    phases: dict[str, float] = Field(
        default_factory=dict, description="The slowest rank's seconds per phase, in order."
    )
    slowest_rank: int | None = None
    ranks: int = Field(default=0, description="Ranks that reported their start.")

    @property
    def rank_s(self) -> float:
        """The slowest rank's seconds from its process start to the end of its first step."""
        return sum(self.phases.values())

    @property
    def total_s(self) -> float:
        """The run's seconds before training: the launcher's part (when known) and the rank's."""
        return self.rank_s + (self.launcher_s or 0.0)


class NetworkFigures(_Loose):
    """A run's links (spec.network): what was configured, how the target made it, whether it held
    for the whole run, and what the links carried (``results.network``)."""

    bandwidth_bps: int | None = Field(
        default=None, description="Configured rate per rank and direction; None: unlimited."
    )
    latency_s: float = Field(default=0.0, description="Configured one-way delay added.")
    method: str | None = Field(
        default=None,
        description="'emulated' (local namespaces and tc), 'cni' or 'tc' (Kubernetes), or the target's kind.",
    )
    nodes: int | None = Field(default=None, description="Nodes the ranks formed (one link each).")
    nccl_socket: bool = Field(
        default=False,
        description="NCCL ran on its socket transport between emulated nodes: not comparable with an "
        "NCCL run on the machine's own P2P/SHM paths.",
    )
    held: bool | None = Field(
        default=None, description="The shaping was in place for the whole run; None: not checked."
    )
    problems: list[str] = Field(default_factory=list, description="Why it did not hold.")
    setup_s: float | None = Field(default=None, description="Making the links before launch.")
    teardown_s: float | None = Field(default=None, description="Removing them after the run.")
    sent_bytes: int | None = Field(
        default=None, description="Bytes all nodes sent over their links while timed."
    )
    mean_mbit_s: float | None = Field(
        default=None, description="Each node's link rate over the timed run (busier direction), averaged."
    )
    peak_mbit_s: float | None = Field(default=None, description="The fastest sampling interval of any link.")
    busbw_fraction: float | None = Field(
        default=None, description="Task 0a: the best bus bandwidth as a fraction of one link's rate."
    )
    note: str | None = Field(default=None, description="Why a figure is missing.")

    @property
    def label(self) -> str:
        """``100Mbit``, ``1Gbit +5ms``, ``unlimited``: how tables and legends name the links."""
        from mlbench_tui.spec.network import format_bandwidth, format_latency

        text = format_bandwidth(self.bandwidth_bps)
        return f"{text} +{format_latency(self.latency_s)}" if self.latency_s > 0 else text

    @property
    def mean_fraction(self) -> float | None:
        """The achieved rate as a fraction of the configured one (None when unlimited or unmeasured)."""
        if self.mean_mbit_s is None or not self.bandwidth_bps:
            return None
        return self.mean_mbit_s * 1e6 / self.bandwidth_bps


class RankStepTime(_Loose):
    """One rank's median step over its timed steps, and its busy time per step (the median of
    each step less its all-reduce: never more than the step)."""

    rank: int
    median_s: float
    busy_s: float | None = Field(default=None, description="None where no all-reduce time was recorded.")
    steps: int = 0


class StepTimeFigures(_Loose):
    """A run's step time (``results.step_time``): the median over its timed steps after the
    task's warm-up, with p10, p90 and p99 (seconds), and what they rest on."""

    median_s: float
    p10_s: float
    p90_s: float
    p99_s: float
    steps: int = Field(description="Timed steps of all ranks the figures rest on.")
    warmup_steps: int = Field(
        default=0, description="First steps of each rank left out (the task's warm-up)."
    )
    basis: Literal["steps", "windows"] = Field(
        default="steps",
        description="'steps': every timed step; 'windows': a run that reported only report windows' "
        "means (each window standing for its steps).",
    )
    windows: int | None = Field(default=None, description="Report windows behind 'windows' figures.")
    ranks: list[RankStepTime] = Field(default_factory=list)


class SweepShape(_Loose):
    """What a 0a sweep measured: its smallest and largest message (elements) and the timed
    repetitions per size after its warm-up ones (what moves its latency and bandwidth)."""

    min_size: int
    max_size: int
    sizes: int
    repetitions: int
    warmup: int = 0


class PreflightCheckFigures(_Loose):
    """One pre-flight check at its worst across ranks: which rank, what it found."""

    name: str
    status: Literal["pass", "warn", "fail", "skip"]
    detail: str = ""
    rank: int | None = None
    value: float | None = None
    expected: float | None = None
    unit: str | None = None


class PreflightFigures(_Loose):
    """The pre-flight before training (``results.preflight``): how it went, each check at its
    worst, and the probes' figures (the GEMM rate is the run's measured peak)."""

    status: Literal["passed", "warned", "failed"]
    stopped: bool = Field(default=False, description="A failed check stopped the run before training.")
    ranks: int = 0
    checks: list[PreflightCheckFigures] = Field(default_factory=list)
    gemm_tflops: float | None = Field(default=None, description="The slowest rank's GEMM probe (TFLOP/s).")
    allreduce_us: float | None = Field(default=None, description="The one-element all-reduce probe (us).")
    seconds: float | None = Field(default=None, description="The slowest rank's pre-flight.")
    device: str | None = None


class FlopFigures(_Loose):
    """How much of the machine a step uses (``results.flops``): model FLOPs per rank's
    step, the achieved rate, its share of the measured GEMM peak, and the step against the
    machine's one-graph floor."""

    flops_per_step: float | None = Field(default=None, description="One rank's step (torch's FLOP counter).")
    achieved_tflops: float | None = Field(default=None, description="Per rank, over the run's step time.")
    peak_tflops: float | None = None
    peak_source: str | None = None
    of_peak: float | None = Field(default=None, description="Achieved over the GEMM peak.")
    small_model: bool = Field(default=False, description="Under 2% of peak: not a headline figure.")
    floor_ms: float | None = Field(default=None, description="The machine's whole step in one CUDA graph.")
    of_floor: float | None = Field(
        default=None, description="The floor over this run's step (1: at the floor)."
    )


class Suspect(_Loose):
    """A figure that fails a physical bound: shown with the reason everywhere the figure is, and
    it keeps the run out of MLPerf's closed division."""

    figure: str = Field(description="What is suspect, e.g. 'bus bandwidth (fp32)'.")
    reason: str = Field(description="The bound it fails and by how much.")


class Provenance(_Loose):
    """Which version and rules computed a result (``results.provenance``)."""

    mlbench: str = Field(default="", description="The mlbench version that computed it.")
    rules: str = Field(default="", description="Digest of the result rules it was computed by.")
    recomputed_from: str | None = Field(
        default=None,
        description="Set when it replaced a stored result: that result's rules ('' when unrecorded).",
    )


class RunResult(_Loose):
    """The result of one run: identity, outcome against its goal, where the time went, what it cost."""

    run_id: str | None = None
    name: str = ""
    spec_name: str = ""
    spec_hash: str = ""
    task: str = ""
    task_name: str = ""
    framework: str = "pytorch"
    backend: str = ""
    workers: int = 1
    repeat: int = 0
    implementation: StoredImplementation = Field(
        default_factory=dict,  # stored before it existed: read like an empty one
        validate_default=True,
        description="How the worker executed steps (CUDA graphs, host allocator).",
    )
    precision: str = Field(default="fp32", description="The numeric precision the run trained in.")
    optimizer: str | None = Field(
        default=None,
        description="The distributed optimizer (centralized_sgd, power_sgd, ...) where the task has one.",
    )
    state: RunState = RunState.UNKNOWN
    message: str | None = Field(default=None, description="Why the run ended as it did, when it failed.")
    stop_reason: str | None = Field(default=None, description="The worker's reason for stopping.")
    wall_time_s: float | None = Field(default=None, description="First run_start to last run_stop.")
    goal: StoredGoal = None
    reached: bool | None = Field(default=None, description="None for runs without a goal (0a).")
    time_to_accuracy_s: float | None = Field(default=None, description="Training time until the goal.")
    validation_time_s: float | None = Field(default=None, description="Validation time until the goal.")
    graph_capture_s: float | None = Field(
        default=None, description="Time capturing CUDA graphs, apart from the time to accuracy."
    )
    batch_size: int | None = Field(default=None, description="Samples per rank per step (the task's).")
    step_time_s: float | None = Field(
        default=None, description="The median step over the timed steps after the warm-up (step_time)."
    )
    step_time: StepTimeFigures | None = Field(
        default=None, description="The step time's figures: median, p10, p90, p99 and what they rest on."
    )
    step_time_note: str | None = Field(default=None, description="Why a run that trained has no step time.")
    sweep: SweepShape | None = Field(default=None, description="Task 0a: the sizes and repetitions swept.")
    preflight: PreflightFigures | None = Field(
        default=None, description="The health checks before training; None when the run had none."
    )
    flops: FlopFigures | None = Field(
        default=None, description="Model FLOPs, achieved rate against the GEMM peak, step against its floor."
    )
    config_digest: str = Field(
        default="",
        description="What moves the time to accuracy (task, goal, data, hyperparameters, backend, world "
        "size, precision, implementation, env), hashed: runs with one digest ran one configuration.",
    )
    suspects: list[Suspect] = Field(
        default_factory=list, description="Figures that fail a physical bound, and why."
    )
    startup: StartupFigures | None = Field(
        default=None, description="The launcher's and the slowest rank's seconds before training."
    )
    epochs_to_goal: float | None = None
    steps_to_goal: int | None = None
    best_value: float | None = None
    last_value: float | None = None
    time_split: TimeSplit | None = None
    allreduce: dict[str, AllreduceFigures] | None = None
    cost_to_target: float | None = None
    price_per_hour: float | None = None
    currency: str | None = Field(default=None, description="ISO 4217 code of the prices; None: USD.")
    telemetry: TelemetryFigures | None = Field(
        default=None, description="Peak memory, GPU utilisation and energy; None without telemetry."
    )
    network: NetworkFigures | None = Field(
        default=None, description="The links between ranks (spec.network); None: the machine's own network."
    )
    speedup: float | None = Field(default=None, description="Against the 1-worker runs of the spec.")
    efficiency: float | None = Field(default=None, description="Speedup per worker.")
    one_worker_time_s: float | None = Field(
        default=None, description="Olympic mean time to accuracy of those 1-worker runs."
    )
    failures: list[dict[str, Any]] = Field(default_factory=list, description="rank_failed events.")
    fingerprint: dict[str, Any] = Field(default_factory=dict, description="Versions, CPU/GPU, image.")
    computed_by: Provenance | None = Field(
        default=None,
        description="The version and rules that computed it; None: stored before they were recorded.",
    )

    @model_validator(mode="before")
    @classmethod
    def _stored_precision(cls, value: Any) -> Any:
        """Results stored before ``precision`` existed name it in their environment fingerprint."""
        if isinstance(value, dict) and "precision" not in value:
            stored = (value.get("fingerprint") or {}).get("precision")
            if isinstance(stored, str):
                return {**value, "precision": stored}
        return value

    @property
    def succeeded(self) -> bool:
        return self.state is RunState.SUCCEEDED

    @property
    def variant(self) -> str:
        """How the run executed, a comparison axis like the backend: ``fp32``, ``bf16 graphs``."""
        return f"{self.precision} graphs" if self.implementation.cuda_graphs else self.precision

    @property
    def network_label(self) -> str:
        """The links as a comparison axis, like the backend: '' for the machine's own network,
        ``100Mbit``, ``1Gbit +5ms``, with ``sockets`` for NCCL forced onto its socket transport."""
        if self.network is None:
            return ""
        return f"{self.network.label} sockets" if self.network.nccl_socket else self.network.label

    @property
    def reason(self) -> str | None:
        """The first line of why the run did not succeed (its message, else its stop reason)."""
        if self.succeeded:
            return None
        text = (self.message or self.stop_reason or "").strip()
        return text.splitlines()[0].strip() if text else None
