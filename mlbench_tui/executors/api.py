"""The executor API shared by the local, Kubernetes and Slurm executors (modelled on TorchX's
Scheduler).

``dryrun(plan, launch)`` is pure and returns exactly what will run: a ``DryRun`` holding the
backend's typed request (local launch commands, Kubernetes manifests, a Slurm batch script);
``schedule(dryrun)`` makes it happen; ``submit = schedule(dryrun(...))``. Logs are optional:
``log_iter`` and ``log_tailer`` refuse with a clear error unless an executor supports them. Each
backend is a package of its own (``executors.local``, ``executors.kubernetes``,
``executors.slurm``) that imports none of the others.
"""

from __future__ import annotations

import abc
import re
import shlex
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Generic, Protocol, TypeVar

from mlbench_worker import rank_env

from mlbench_tui.errors import ExecutorError
from mlbench_tui.lifecycle import RankStatus, RunHandle, RunState, RunStatus
from mlbench_tui.plan import RunPlan

__all__ = [
    "REDACTED",
    "DryRun",
    "Executor",
    "LaunchContext",
    "LaunchRequest",
    "LogTailer",
    "RankStatus",
    "RunHandle",
    "RunState",
    "RunStatus",
    "heredoc",
    "log_filter",
    "shell_exports",
]

REDACTED = "<write token>"
"""How a dry run shows the run's write token."""
FILE_END = "MLBENCH_FILE_END"


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


class LaunchRequest(Protocol):
    """A backend's typed request: everything ``schedule`` will do, decided by ``dryrun``."""

    def lines(self) -> list[str]:
        """What the dry run shows of it: shell-quoted exports, files as heredocs, commands or
        manifests (the run's token never in clear)."""
        ...


R = TypeVar("R", bound=LaunchRequest)


@dataclass(frozen=True)
class DryRun(Generic[R]):
    """Exactly what ``schedule`` will do, printable by ``mlbench plan``/``apply --dry-run``:
    the plan, its launch context and the backend's own typed ``request``."""

    executor: str
    plan: RunPlan
    launch: LaunchContext
    request: R

    def text(self) -> str:
        """The dry run as ``apply --dry-run`` prints it."""
        plan = self.plan
        header = f"# {plan.name}: {plan.workers} rank(s), backend {plan.backend}, executor {self.executor}"
        return "\n".join([header, *self.request.lines()])


def shell_exports(env: Mapping[str, str]) -> list[str]:
    """``export NAME=value`` lines, sorted, the run's write token shown as ``REDACTED``."""
    return [
        f"export {key}={shlex.quote(REDACTED if key == rank_env.RUN_TOKEN else value)}"
        for key, value in sorted(env.items())
    ]


def heredoc(path: str, text: str) -> list[str]:
    """A file ``schedule`` writes, shown as a replayable heredoc."""
    end = FILE_END
    while end in text:
        end += "_"
    return [f"cat > {shlex.quote(path)} <<'{end}'", text.rstrip("\n"), end]


class LogTailer(Protocol):
    """Collects a running run's new log lines as ``(rank, text)``; rank -1 is the launcher's own."""

    def poll(self, *, final: bool = False, since: float | None = None) -> list[tuple[int, str]]:
        """New lines since the last call; ``final`` first lets the sources reach their end."""
        ...


class Executor(abc.ABC, Generic[R]):
    """Launches run plans somewhere and watches them; ``R`` is the backend's typed request.

    Besides launching and watching, an executor answers what ``runs`` and ``commands`` would
    otherwise ask of a backend by name: where its ranks report (``in_cluster_server``), whether
    ``mlbench status`` may ask it about runs the store still thinks active (``reconciles``), what
    a run leaves on disk (``remove_files``) and the plan outputs it renders (``plan_outputs``).
    """

    name: str = ""
    enforces_max_time: ClassVar[bool] = False
    """The target itself stops a run at its max_time (Slurm's --time), so the engine does not stop
    it early (a queued job's wait does not count against max_time there)."""
    in_cluster_server: ClassVar[bool] = False
    """The ranks report to a metrics server inside the target (reached through a port-forward),
    not to this machine's."""
    reconciles: ClassVar[bool] = False
    """Any shell may ask about its runs cheaply (the process table, the run directory, Slurm's
    queue): ``mlbench status`` settles runs the store thinks active whose processes are gone."""
    plan_outputs: ClassVar[tuple[str, ...]] = ()
    """The ``mlbench plan -o`` formats ``render_plans`` knows (Slurm's ``sbatch``, Kubernetes'
    ``yaml`` manifests)."""
    places_offline: ClassVar[bool] = False
    """``check_placement`` asks nothing but this machine, so ``validate`` may ask it too (a
    cluster's placement is left to ``plan`` and ``apply``, which may contact it)."""

    @classmethod
    def network_label(cls, plan: RunPlan) -> str:
        """The plan's links as ``mlbench plan`` shows them (``100Mbit +5ms``; ``-`` without a
        network); a target adds what it makes of them."""
        return plan.network.label() if plan.network is not None else "-"

    @classmethod
    def network_notes(cls, plans: Sequence[RunPlan]) -> list[str]:
        """What the networks of ``plans`` (this target's, each with a network) mean here, said once
        under the plan table; the default says nothing."""
        return []

    @abc.abstractmethod
    def dryrun(self, plan: RunPlan, launch: LaunchContext) -> DryRun[R]:
        """Pure: what would run, without side effects."""

    @abc.abstractmethod
    def schedule(self, dryrun: DryRun[R]) -> RunHandle:
        """Start what ``dryrun`` describes; returns at once with a handle."""

    def submit(self, plan: RunPlan, launch: LaunchContext) -> RunHandle:
        return self.schedule(self.dryrun(plan, launch))

    def prepare(self, plan: RunPlan) -> None:
        """Start, without waiting, what ``plan``'s runs will need before they are created (the
        local executor's warm-start server imports torch meanwhile); the default needs nothing."""
        return None

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

    def remove_files(self, handle: RunHandle) -> None:
        """Delete what the run left on disk (its config and logs); the default keeps none."""
        return None

    def render_plans(self, plans: Sequence[RunPlan], output: str) -> str | None:
        """The text of ``mlbench plan -o OUTPUT`` for ``plans`` in one of ``plan_outputs``; None
        when this executor leaves them to the generic rendering."""
        return None

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

    def spool_dir(self, handle: RunHandle) -> Path | None:
        """The folder, readable on this machine, where the run's ranks keep batches they could
        not send (the server imports it); None where this machine cannot read it (pods)."""
        return None

    def _unsupported(self, what: str) -> ExecutorError:
        return ExecutorError(f"the {self.name or type(self).__name__} executor does not support {what}")
