"""The executor API shared by the local, Kubernetes and Slurm executors (modelled on TorchX's
Scheduler).

``dryrun(plan, launch)`` is pure and returns exactly what will run (commands, manifests or a batch
script); ``schedule(dryrun)`` makes it happen; ``submit = schedule(dryrun(...))``. Logs are
optional: ``log_iter`` and ``log_tailer`` refuse with a clear error unless an executor supports them.
"""

from __future__ import annotations

import abc
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from mlbench_tui.errors import ExecutorError
from mlbench_tui.lifecycle import RankStatus, RunHandle, RunState, RunStatus
from mlbench_tui.plan import RunPlan

__all__ = [
    "DryRun",
    "Executor",
    "LaunchContext",
    "LogTailer",
    "RankStatus",
    "RunHandle",
    "RunState",
    "RunStatus",
    "log_filter",
]


def log_filter(regex: str | None) -> re.Pattern[str] | None:
    """The compiled ``regex`` argument of ``log_iter`` (None keeps every line)."""
    try:
        return re.compile(regex) if regex else None
    except re.error as exc:
        raise ExecutorError(f"invalid regular expression {regex!r}: {exc}") from None


@dataclass(frozen=True)
class LaunchContext:
    """What the engine hands an executor beside the plan: identity and where to report."""

    run_id: str
    server_url: str
    write_token: str = field(repr=False)
    config_path: str | None = None  # local: where the worker config JSON is written
    # local: the server's Unix socket, which ranks in emulated network namespaces report through
    server_socket: str | None = None


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


class LogTailer(Protocol):
    """Collects a running run's new log lines as ``(rank, text)``; rank -1 is the launcher's own."""

    def poll(self, *, final: bool = False, since: float | None = None) -> list[tuple[int, str]]:
        """New lines since the last call; ``final`` first lets the sources reach their end."""
        ...


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

    def check_placement(self, plan: RunPlan) -> None:
        """Raise ``ExecutorError`` when this target cannot place ``plan`` (asked before any run
        starts, so a sweep is refused whole); the default places every plan."""
        return None

    @abc.abstractmethod
    def describe(self, handle: RunHandle) -> RunStatus | None:
        """Current status, or None when the executor does not know the run."""

    @abc.abstractmethod
    def cancel(self, handle: RunHandle) -> None:
        """Stop every rank; idempotent (cancelling a finished or unknown run is a no-op)."""

    def log_iter(
        self,
        handle: RunHandle,
        rank: int | None = None,
        follow: bool = False,
        since: float | None = None,
        regex: str | None = None,
    ) -> Iterator[str]:
        """Log lines of one rank (or all), optionally following and filtered by a regex."""
        raise self._unsupported("reading logs")

    def log_tailer(self, handle: RunHandle) -> LogTailer:
        """A tailer of the run's logs while it runs (``apply`` ships its lines into the store)."""
        raise self._unsupported("tailing logs")

    def _unsupported(self, what: str) -> ExecutorError:
        return ExecutorError(f"the {self.name or type(self).__name__} executor does not support {what}")
