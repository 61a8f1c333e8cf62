"""A run's lifecycle as every layer sees it: its state, its handle, and an executor's status.

Neutral types with no dependencies beyond ``errors``, so the executors that produce them, the
store that records them and the commands that show them all import them from here.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Protocol, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from mlbench_tui.errors import ExecutorError


class RunState(StrEnum):
    """Lifecycle of a run (and of each rank)."""

    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    UNKNOWN = "unknown"

    def is_terminal(self) -> bool:
        """True once the run can no longer change (succeeded, failed or cancelled)."""
        return self in (RunState.SUCCEEDED, RunState.FAILED, RunState.CANCELLED)


class StoredRun(Protocol):
    """What deciding that a plan already ran needs of a stored run."""

    @property
    def id(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def spec_hash(self) -> str: ...
    @property
    def state(self) -> RunState: ...
    @property
    def created(self) -> datetime: ...


Stored = TypeVar("Stored", bound=StoredRun)
UNCHANGED = "unchanged, already succeeded"  # how apply's plan says a run is skipped (and the TUI reads it)
STARTS = "will run"


def already_succeeded(plans: Iterable[tuple[str, str]], runs: Iterable[Stored]) -> dict[str, Stored]:
    """For each plan (its run name and spec hash), the latest stored run of the same name and spec
    hash that succeeded: what ``apply`` skips as unchanged (``--force`` runs it again)."""
    done: dict[tuple[str, str], Stored] = {}
    for run in sorted(runs, key=lambda r: r.created):
        if run.state == RunState.SUCCEEDED:
            done[(run.name, run.spec_hash)] = run
    return {name: done[(name, digest)] for name, digest in plans if (name, digest) in done}


QUEUED_BY = "mlbench.io/queued-by"
"""The label of a run an apply registered ahead of launching it (``HOST:PID`` of that apply)."""


def queue_owner(state: RunState, handle: str | None, labels: dict[str, str]) -> tuple[str, int] | None:
    """The (host, pid) of the apply whose queue a run waits in (pending, not yet launched)."""
    if state is not RunState.PENDING or handle:
        return None
    host, _, pid = labels.get(QUEUED_BY, "").rpartition(":")
    return (host, int(pid)) if host and pid.isdigit() else None


_HANDLE_RE = re.compile(r"^(?P<scheme>[a-z][a-z0-9+-]*)://(?P<where>[^/]*)/(?P<run_id>[A-Za-z0-9._-]+)$")


@dataclass(frozen=True)
class RunHandle:
    """Where a run lives: executor scheme, location (host or namespace) and run id.

    As text ``local://myhost/<run-id>``, ``kubernetes://<namespace>/<run-id>`` or
    ``slurm://<job-id>@<cluster>/<run-id>``, parsed only here.
    """

    scheme: str
    where: str
    run_id: str

    @classmethod
    def parse(cls, text: str) -> RunHandle:
        match = _HANDLE_RE.fullmatch(text)
        if not match:
            raise ExecutorError(
                f"not a run handle: {text!r}",
                hint="handles look like local://HOST/RUN_ID, kubernetes://NAMESPACE/RUN_ID "
                "or slurm://JOB_ID@CLUSTER/RUN_ID",
            )
        return cls(match["scheme"], match["where"], match["run_id"])

    def __str__(self) -> str:
        return f"{self.scheme}://{self.where}/{self.run_id}"


@dataclass
class RankStatus:
    """One rank as the executor sees it (a process locally, a pod on Kubernetes)."""

    rank: int
    state: RunState
    host: str | None = None
    pid: int | None = None
    exit_code: int | None = None
    message: str | None = None


class LaunchMilestones(BaseModel):
    """When the target reached each step of launching a run (UNIX seconds, None where it does
    not know or has not reached it): what splits the launcher's part of the run's start."""

    model_config = ConfigDict(frozen=True)

    dequeued: float | None = Field(
        default=None,
        description="apply took the run off its queue to launch it (it was registered, pending, while "
        "earlier runs of its sweep ran); None: launched as soon as it was registered.",
    )
    submitted: float | None = Field(
        default=None, description="The target accepted the run: Slurm's Submit, the first pod's creation."
    )
    scheduled: float | None = Field(
        default=None, description="The first pod was bound to a node (PodScheduled); Kubernetes only."
    )
    image_pulled: float | None = Field(
        default=None, description="The first pod's image was pulled (its Pulled event); Kubernetes only."
    )
    started: float | None = Field(
        default=None, description="The job started (Slurm's Start) or the first container did (startedAt)."
    )

    def known(self) -> bool:
        """Whether the target reported any milestone."""
        return any(value is not None for value in self.model_dump().values())

    def merged(self, newer: LaunchMilestones | None) -> LaunchMilestones:
        """These milestones with what ``newer`` knows on top (a later poll may know more, or
        less once the target forgets the run)."""
        if newer is None:
            return self
        known = {name: value for name, value in newer.model_dump().items() if value is not None}
        return self.model_copy(update=known)


class NetworkCheck(BaseModel):
    """What the target did to a run's links (spec.network) and whether it held for the whole run."""

    model_config = ConfigDict(frozen=True)

    method: str = Field(
        description="How the links were made: 'emulated' (namespaces, veth, bridge, tc), 'cni' (the "
        "bandwidth CNI plugin's annotations), 'tc' (an init container), 'prolog' (a Slurm site prolog)."
    )
    nodes: int | None = Field(default=None, description="Emulated nodes (local runs).")
    held: bool | None = Field(
        default=None,
        description="The shaping was in place from the first packet to the last; None: not checked.",
    )
    problems: tuple[str, ...] = Field(default=(), description="Why it did not hold, one sentence each.")
    setup_s: float | None = Field(default=None, description="Seconds spent making the links before launch.")
    teardown_s: float | None = Field(default=None, description="Seconds spent checking and removing them.")


@dataclass
class RunStatus:
    """What ``Executor.describe`` returns: the run's state, its ranks, why it ended when it
    failed, when the target reached each step of launching it, and what it did to the links."""

    handle: RunHandle
    state: RunState
    ranks: list[RankStatus] = field(default_factory=list)
    message: str | None = None
    milestones: LaunchMilestones | None = None
    network: NetworkCheck | None = None
