"""The executor interface: logs are part of it, and an executor without them refuses clearly."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from mlbench_tui.errors import ExecutorError
from mlbench_tui.executors.api import DryRun, Executor, LaunchContext
from mlbench_tui.executors.local.executor import LocalExecutor
from mlbench_tui.lifecycle import RunHandle, RunStatus
from mlbench_tui.plan import RunPlan


@dataclass(frozen=True)
class _Nothing:
    """A request with nothing to show."""

    def lines(self) -> list[str]:
        return []


class _NoLogs(Executor[_Nothing]):
    """An executor that launches and watches, but keeps no logs."""

    name = "nologs"

    def dryrun(self, plan: RunPlan, launch: LaunchContext) -> DryRun[_Nothing]:
        return DryRun(self.name, plan, launch, _Nothing())

    def schedule(self, dryrun: DryRun[_Nothing]) -> RunHandle:
        return RunHandle(self.name, "here", dryrun.launch.run_id)

    def describe(self, handle: RunHandle) -> RunStatus | None:
        return None

    def cancel(self, handle: RunHandle) -> None:
        pass


def test_an_executor_without_logs_refuses_with_a_clear_error() -> None:
    handle = RunHandle("nologs", "here", "r-000000000001")
    with pytest.raises(ExecutorError, match="the nologs executor does not support reading logs"):
        next(iter(_NoLogs().log_iter(handle)))
    with pytest.raises(ExecutorError, match="the nologs executor does not support tailing logs"):
        _NoLogs().log_tailer(handle)


def test_the_local_executor_tails_logs_through_the_interface(tmp_path: Path) -> None:
    executor = LocalExecutor(tmp_path)
    handle = executor.handle_for("r-000000000001")
    log_dir = executor.log_dir(handle.run_id)
    log_dir.mkdir(parents=True)
    (log_dir / "rank-0.log").write_text("hello\n")
    assert executor.log_tailer(handle).poll() == [(0, "hello")]
