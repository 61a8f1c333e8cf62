"""Wire models of the ``/v1`` HTTP API: what clients send and receive, separate from the tables.

These pydantic models are the contract between the server and the CLI/TUI client. The ingest
batches ranks send are declared once, in ``mlbench_worker.wire``, and derived here
(``wire_models``), as are their limits, so the worker's reporter (a contract test validates its
requests), the server, the client and the OpenAPI document agree on them.

Non-finite metric values: JSON has no NaN/Infinity, so a metric value is ``float | null`` and
``null`` means "not a finite number" (a diverged loss). Senders map NaN and +/-inf to ``null``;
the server rejects the non-standard ``NaN``/``Infinity`` tokens with a 4xx instead of guessing.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from mlbench_worker import wire
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from mlbench_tui.lifecycle import LaunchMilestones, NetworkCheck, RunState
from mlbench_tui.owners import RunOwner
from mlbench_tui.plan import GoalPlan, NetworkPlan, RunPlan
from mlbench_tui.results.model import RunResult, StoredGoal
from mlbench_tui.spec.limits import MAX_SPEC_BYTES
from mlbench_tui.store.wire_models import pydantic_model

# Limits shared by the server, the client and the reporter (the wire contract's).
MAX_BODY_BYTES = wire.MAX_BODY_BYTES
MAX_BATCH_ITEMS = wire.MAX_BATCH_ITEMS
MAX_NAME_LEN = wire.MAX_NAME_LEN
MAX_TEXT_LEN = wire.MAX_TEXT_LEN
MAX_KIND_LEN = wire.MAX_KIND_LEN
MAX_PAYLOAD_BYTES = wire.MAX_PAYLOAD_BYTES
MAX_SPEC_TEXT = MAX_SPEC_BYTES  # what validate lets through is what the store takes
MAX_RANK = wire.MAX_RANK
MAX_POINTS = 100_000
MAX_PAGE = 50_000

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_FAR = datetime(9000, 1, 1, tzinfo=UTC)

RUN_ID_PATTERN = r"^r-[0-9a-f]{12}$"

Name = Annotated[str, Field(min_length=1, max_length=MAX_NAME_LEN, pattern=r"^[^\x00-\x1f]+$")]
Rank = Annotated[int, Field(ge=0, le=MAX_RANK)]
Stream = wire.Stream


class _Wire(BaseModel):
    model_config = ConfigDict(extra="forbid")


# --------------------------------------------------------------------------------------- runs


class RunCreate(_Wire):
    """Register a run before launching it; the answer carries the run's write token once."""

    name: Name = Field(description="Run name, e.g. 'quickstart-gloo-2w'.")
    spec_name: str = Field(default="", max_length=MAX_NAME_LEN)
    spec_hash: str = Field(default="", max_length=128)
    spec_text: str = Field(default="", max_length=MAX_SPEC_TEXT, description="The spec as written (YAML).")
    plan: dict[str, Any] = Field(default_factory=dict, description="The resolved RunPlan as JSON.")
    task: str = Field(default="", max_length=MAX_NAME_LEN)
    backend: str = Field(default="", max_length=32)
    workers: int = Field(default=1, ge=1, le=MAX_RANK + 1)
    repeat: int = Field(default=0, ge=0, le=2**31)
    goal: GoalPlan | None = None
    target_kind: str = Field(default="local", max_length=32)
    handle: str | None = Field(default=None, max_length=512)
    labels: dict[str, str] = Field(default_factory=dict)
    owner: RunOwner | None = Field(
        default=None, description="The process that launches and watches the run (apply)."
    )
    exclusive: bool = Field(
        default=False,
        description="Refuse (409 run_under_way) while another run of this name is under way with a live "
        "owner: two applies of one spec run each run once.",
    )

    @classmethod
    def from_plan(cls, plan: RunPlan, spec_text: str = "") -> RunCreate:
        """Build the request from a run plan."""
        return cls(
            name=plan.name,
            spec_name=plan.spec_name,
            spec_hash=plan.spec_hash,
            spec_text=spec_text,
            plan=plan.model_dump(mode="json"),
            task=plan.task,
            backend=plan.backend,
            workers=plan.workers,
            repeat=plan.repeat,
            goal=plan.goal,
            target_kind=plan.target.kind,
            labels=dict(plan.labels),
        )


class RunUpdate(_Wire):
    """Partial update of a run (PATCH): only the fields present change."""

    state: RunState | None = Field(
        default=None,
        description="A final state ends the run; 'unknown' ends it too when its executor lost the exit "
        "status: the server then decides from the ranks' run_stop events (every rank stopped normally: "
        "succeeded; otherwise failed).",
    )
    handle: str | None = Field(default=None, max_length=512)
    started: datetime | None = None
    finished: datetime | None = None
    result: RunResult | None = Field(
        default=None,
        description="The run's result. Left out with a final state, the server computes it from the "
        "run's plan, metrics and events (and settles the state against what the ranks reported).",
    )
    error: str | None = Field(default=None, max_length=MAX_TEXT_LEN)
    labels: dict[str, str] | None = None
    host: dict[str, Any] | None = Field(
        default=None,
        description="With a final state: the launching host's environment fingerprint, for the result.",
    )
    launch: LaunchMilestones | None = Field(
        default=None,
        description="When the target reached each step of launching the run (what it knows so far); "
        "they split the launcher's part of the run's start in its result.",
    )
    network: NetworkCheck | None = Field(
        default=None,
        description="With a final state: what the target did to the run's links (spec.network) and whether "
        "the shaping held, for the result.",
    )
    spool: str | None = Field(
        default=None,
        max_length=4096,
        description="Folder (readable by the server) where the run's ranks keep batches they could not "
        "send; the server imports it when the run ends and whenever it starts.",
    )

    @field_validator("started", "finished")
    @classmethod
    def _sane_time(cls, value: datetime | None) -> datetime | None:
        """Naive times are UTC; times outside 1970..9000 are refused (not storable as unix seconds)."""
        if value is None:
            return None
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        if not _EPOCH <= value <= _FAR:
            raise ValueError("time must lie between 1970 and 9000")
        return value


class RankUpdate(_Wire):
    """State of one rank, reported by the executor (admin token) or the rank itself (run token)."""

    state: RunState | None = None
    host: str | None = Field(default=None, max_length=255)
    pid: int | None = Field(default=None, ge=0, le=2**31)
    pod: str | None = Field(default=None, max_length=255)
    exit_code: int | None = Field(default=None, ge=-(2**31), le=2**31)
    message: str | None = Field(default=None, max_length=MAX_TEXT_LEN)


class RankStateUpdate(RankUpdate):
    """One rank's update in a batch (``PUT /v1/runs/{id}/ranks``)."""

    rank: Rank


class RankUpdates(_Wire):
    """States of many ranks in one request: an executor polling 1,024 ranks sends one, not 1,024."""

    ranks: list[RankStateUpdate] = Field(min_length=1, max_length=MAX_RANK + 1)


class RankInfo(BaseModel):
    rank: int
    state: RunState
    host: str | None = None
    pid: int | None = None
    pod: str | None = None
    exit_code: int | None = None
    message: str | None = None
    updated: datetime | None = None


class RunInfo(BaseModel):
    """A run as listed: identity, state and summary (no spec text or plan)."""

    id: str
    name: str
    spec_name: str
    spec_hash: str
    task: str
    backend: str
    workers: int
    repeat: int
    goal: StoredGoal = None
    state: RunState
    target_kind: str
    handle: str | None = None
    created: datetime
    started: datetime | None = None
    finished: datetime | None = None
    result: RunResult | None = None
    error: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    launch: LaunchMilestones | None = Field(
        default=None, description="When the target reached each step of launching the run (None: unknown)."
    )
    network: NetworkPlan | None = Field(
        default=None, description="The run's links (its plan's spec.network point); None: the machine's own."
    )
    owner: RunOwner | None = Field(default=None, description="The process that launches and watches it.")

    def known_result(self) -> RunResult:
        """The stored result; for a run without one (still going, or ended before the server
        computed results) its identity and state, without figures."""
        if self.result is not None:
            return self.result.model_copy(update={"run_id": self.id})
        return RunResult(
            run_id=self.id, name=self.name, spec_name=self.spec_name, spec_hash=self.spec_hash,
            task=self.task, backend=self.backend, workers=self.workers, repeat=self.repeat,
            goal=self.goal, state=self.state, message=self.error,
        )  # fmt: skip


class RunDetail(RunInfo):
    """A run with everything: spec text, plan and per-rank states."""

    spec_text: str = ""
    plan: dict[str, Any] = Field(default_factory=dict)
    ranks: list[RankInfo] = Field(default_factory=list)
    spool: str | None = Field(default=None, description="Where its ranks keep batches they could not send.")

    def stored_plan(self) -> RunPlan | None:
        """The run's plan as stored; None for a run registered without a (valid) one."""
        try:
            return RunPlan.model_validate(self.plan)
        except ValidationError:
            return None


class RunCreated(BaseModel):
    run: RunDetail
    write_token: str = Field(description="Bearer token that can write only to this run; shown once.")


# ------------------------------------------------------------------------------------ ingest


# Derived from the wire contract's declarations (mlbench_worker.wire; see wire_models).
MetricIn = pydantic_model(wire.MetricIn)
LogIn = pydantic_model(wire.LogIn)
EventIn = pydantic_model(wire.EventIn)
MetricBatch = pydantic_model(wire.MetricBatch)
LogBatch = pydantic_model(wire.LogBatch)
EventBatch = pydantic_model(wire.EventBatch)


class BatchAck(BaseModel):
    """Sent only after the batch is committed to disk."""

    accepted: int = Field(description="Items stored by this request (0 for a duplicate).")
    duplicate: bool = Field(description="True when this (rank, session, seq) was already stored.")


# ------------------------------------------------------------------------------------- reads


class MetricSeries(BaseModel):
    """Points of one metric of one rank, as parallel columns (compact and fast to chart).

    When downsampled, each point is one bucket: ``value`` is the bucket's last value and
    ``min``/``max`` its extremes, so spikes survive.
    """

    name: str
    rank: int
    step: list[int | None]
    value: list[float | None]
    t: list[float]
    epoch: list[float | None]
    min: list[float | None] | None = None
    max: list[float | None] | None = None


class MetricsPage(BaseModel):
    cursor: int = Field(description="Pass as 'since' to get only newer points.")
    series: list[MetricSeries]
    downsampled: bool = False


class SeriesSummary(MetricSeries):
    """One metric of one rank since the previous summary, as a one-bucket ``MetricSeries``:
    the last point (step, epoch, t, value) with the min/max of its finite values."""

    count: int = Field(
        description="Points summarised (the first summary after a replay may count a few twice)."
    )


class MetricsSummary(BaseModel):
    """Data of a ``metrics_summary`` event on a run stream opened with ``coalesce``."""

    cursor: int = Field(description="Highest metric id summarised; pass as metrics_since to resume.")
    series: list[SeriesSummary]


class MetricName(BaseModel):
    name: str
    ranks: list[int]
    count: int
    last_step: int | None = None
    last_value: float | None = None


class RankValues(BaseModel):
    """The latest point of one metric on each rank that reported it, as columns in rank order."""

    name: str
    rank: list[int]
    step: list[int | None]
    epoch: list[float | None]
    t: list[float]
    value: list[float | None]


class RanksLatest(BaseModel):
    """``GET /v1/runs/{id}/metrics/latest``: per metric, every rank's latest point."""

    cursor: int = Field(description="The store's highest metric id when read.")
    series: list[RankValues]


class MetricBand(BaseModel):
    """Percentiles of one metric across ranks, bucket by bucket (columns in step order).

    A bucket holds consecutive steps (time, for a metric reported without steps). ``p50``,
    ``p90`` (nearest rank) and ``max`` are taken over each rank's value at the bucket's last step
    (its last sample in the bucket, for a metric without steps); ``max_rank`` reported the max."""

    name: str
    step: list[int | None] = Field(description="The bucket's last step (null for a metric without steps).")
    t: list[float] = Field(description="The bucket's last time.")
    ranks: list[int] = Field(description="How many ranks reported in the bucket.")
    p50: list[float]
    p90: list[float]
    max: list[float]
    max_rank: list[int]


class MetricBands(BaseModel):
    """``GET /v1/runs/{id}/metrics/bands``: percentile bands across ranks per metric."""

    cursor: int = Field(description="The store's highest metric id when read.")
    bands: list[MetricBand]


class LogLineOut(BaseModel):
    id: int
    rank: int
    stream: str
    seq: int | None = None
    t: float
    text: str


class LogsPage(BaseModel):
    cursor: int
    lines: list[LogLineOut]


class EventOut(BaseModel):
    id: int
    rank: int | None
    kind: str
    payload: dict[str, Any]
    t: float


class EventsPage(BaseModel):
    cursor: int
    events: list[EventOut]


class Health(BaseModel):
    status: Literal["ok"] = "ok"
    version: str
    store: str = Field(description="Absolute path of the SQLite store this server writes.")
    pid: int
    open_reads: bool


class ErrorBody(BaseModel):
    """Every 4xx/5xx answer: a machine-readable reason and a human message."""

    error: str
    detail: Any = None


def utcnow() -> datetime:
    return datetime.now(UTC)
