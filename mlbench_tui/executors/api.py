"""The executor API shared by the local, Kubernetes and Slurm executors.

``dryrun(plan, launch)`` is pure and returns exactly what will run (commands or manifests);
``schedule(dryrun)`` makes it happen; ``submit = schedule(dryrun(...))``. Handles are strings such
as ``local://myhost/<run-id>``, ``kubernetes://<namespace>/<run-id>`` or
``slurm://<job-id>@<cluster>/<run-id>``, parsed only here.
"""

from __future__ import annotations

import abc
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from mlbench_tui.errors import ExecutorError
from mlbench_tui.plan import RunPlan


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


_HANDLE_RE = re.compile(r"^(?P<scheme>[a-z][a-z0-9+-]*)://(?P<where>[^/]*)/(?P<run_id>[A-Za-z0-9._-]+)$")


def log_filter(regex: str | None) -> re.Pattern[str] | None:
    """The compiled ``regex`` argument of ``log_iter`` (None keeps every line)."""
    try:
        return re.compile(regex) if regex else None
    except re.error as exc:
        raise ExecutorError(f"invalid regular expression {regex!r}: {exc}") from None


@dataclass(frozen=True)
class RunHandle:
    """Where a run lives: executor scheme, location (host or namespace) and run id."""

    scheme: str
    where: str
    run_id: str

    @classmethod
    def parse(cls, text: str) -> RunHandle:
        match = _HANDLE_RE.match(text)
        if not match:
            raise ExecutorError(
                f"not a run handle: {text!r}",
                hint="handles look like local://HOST/RUN_ID, kubernetes://NAMESPACE/RUN_ID "
                "or slurm://JOB_ID@CLUSTER/RUN_ID",
            )
        return cls(match["scheme"], match["where"], match["run_id"])

    def __str__(self) -> str:
        return f"{self.scheme}://{self.where}/{self.run_id}"


@dataclass(frozen=True)
class LaunchContext:
    """What the engine hands an executor beside the plan: identity and where to report."""

    run_id: str
    server_url: str
    write_token: str = field(repr=False)
    config_path: str | None = None  # local: where the worker config JSON is written


@dataclass(frozen=True)
class DryRun:
    """Exactly what ``schedule`` will do, printable by ``mlbench plan``/``apply --dry-run``."""

    executor: str
    plan: RunPlan
    launch: LaunchContext
    commands: tuple[tuple[str, ...], ...] = ()  # local: argv per launcher process
    env: dict[str, str] = field(default_factory=dict, repr=False)  # local: environment of the launcher
    manifests: tuple[dict[str, Any], ...] = ()  # kubernetes: objects to apply, in order
    files: tuple[tuple[str, str], ...] = ()  # slurm: (path, text) written before the commands run
    worker_config: dict[str, Any] = field(default_factory=dict)


@dataclass
class RankStatus:
    """One rank as the executor sees it (a process locally, a pod on Kubernetes)."""

    rank: int
    state: RunState
    host: str | None = None
    pid: int | None = None
    exit_code: int | None = None
    message: str | None = None


@dataclass
class RunStatus:
    """What ``describe`` returns: the run's state, its ranks, and why it ended when it failed."""

    handle: RunHandle
    state: RunState
    ranks: list[RankStatus] = field(default_factory=list)
    message: str | None = None


class Executor(abc.ABC):
    """Launches run plans somewhere and watches them."""

    name: str = ""
    # True when the target itself stops a run at its max_time (Slurm's --time), so the engine
    # does not stop it early (a queued job's wait does not count against max_time there).
    enforces_max_time: bool = False

    @abc.abstractmethod
    def dryrun(self, plan: RunPlan, launch: LaunchContext) -> DryRun:
        """Pure: what would run, without side effects."""

    @abc.abstractmethod
    def schedule(self, dryrun: DryRun) -> RunHandle:
        """Start what ``dryrun`` describes; returns at once with a handle."""

    def submit(self, plan: RunPlan, launch: LaunchContext) -> RunHandle:
        return self.schedule(self.dryrun(plan, launch))

    @abc.abstractmethod
    def describe(self, handle: RunHandle) -> RunStatus | None:
        """Current status, or None when the executor does not know the run."""

    @abc.abstractmethod
    def cancel(self, handle: RunHandle) -> None:
        """Stop every rank; idempotent (cancelling a finished or unknown run is a no-op)."""

    @abc.abstractmethod
    def log_iter(
        self,
        handle: RunHandle,
        rank: int | None = None,
        follow: bool = False,
        since: float | None = None,
        regex: str | None = None,
    ) -> Iterator[str]:
        """Log lines of one rank (or all), optionally following and filtered by a regex."""
