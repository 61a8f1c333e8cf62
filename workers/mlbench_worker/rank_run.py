"""One rank's run as the engine reads it, in every framework: ``init_start``, the task, and how it
ended: ``run_stop`` with the exit status the rank returns, after ``rank_failed`` when it failed.

Exit status: 0 when the task ended (goal reached, sweep done, or stopped by ``max_time`` /
``max_epochs``; the ``run_stop`` event says which), 1 when the rank failed, 2 for an unusable
configuration (a user error: the message, no traceback), 130 when interrupted. When a launcher's
own exit status is lost, the engine settles the run from every rank's ``run_stop``. The PyTorch
runtime (``mlbench_worker.__main__``) and the TensorFlow task run their setup and training inside
``RankRun.run``. Standard library only.
"""

from __future__ import annotations

import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from mlbench_worker import config as worker_config
from mlbench_worker import wire
from mlbench_worker.reporting import error_file
from mlbench_worker.tasks.base import Outcome

if TYPE_CHECKING:
    from mlbench_worker.context import ReporterLike


def _never(exc: BaseException) -> bool:
    return False


@dataclass
class RankRun:
    """How one rank's run starts and ends; the task updates ``rank`` once its process group knows
    it and adds what must happen after a clean end (``after_success``: close the process group)
    or a failure (``on_failure``: abort it, so no peer waits)."""

    reporter: ReporterLike
    rank: int
    user_errors: tuple[type[BaseException], ...] = (worker_config.ConfigError,)
    peer_failure: Callable[[BaseException], bool] = _never
    """Whether an exception is this rank noticing another rank's death (a consequence, not a cause)."""
    after_success: list[Callable[[], None]] = field(default_factory=list)
    on_failure: list[Callable[[], None]] = field(default_factory=list)

    def run(self, task: Callable[[], Outcome]) -> int:
        """``task`` between ``init_start`` and ``run_stop``; returns the exit status."""
        reporter = self.reporter
        if self.rank == 0:  # MLPerf's init_start: setup (process group, data, model) starts here
            wire.emit(reporter, wire.InitStart())
        try:
            outcome = task()
            wire.emit(reporter, outcome.stop(exit_code=0))  # every rank, with its exit status
            if self.rank == 0:
                print(f"[rank {self.rank}] run stopped: {outcome.status} ({outcome.reason})", flush=True)
            reporter.close(timeout=30.0)
            for finish in self.after_success:
                finish()
            return 0
        except KeyboardInterrupt:
            stop = wire.RunStop(status="aborted", reason=f"rank {self.rank} interrupted", exit_code=130)
            wire.emit(reporter, stop)
            reporter.close(timeout=5.0)
            print(f"[rank {self.rank}] interrupted", file=sys.stderr, flush=True)
            return 130
        except BaseException as exc:
            return self._failed(exc, traceback.format_exc())

    def _failed(self, exc: BaseException, tb: str) -> int:
        rank, reporter = self.rank, self.reporter
        summary = f"{type(exc).__name__}: {exc}"
        peer = self.peer_failure(exc)
        error_file.record(exc, tb, peer_failure=peer)  # what its launcher names as the cause
        wire.emit(reporter, wire.RankFailed(rank=rank, exception=summary, traceback=tb, peer_failure=peer))
        what = "lost a peer" if peer else "failed"
        user_error = isinstance(exc, self.user_errors)
        code = 2 if user_error else 1
        stop = wire.RunStop(status="failed", reason=f"rank {rank} {what}: {summary}", exit_code=code)
        wire.emit(reporter, stop)
        reporter.close(timeout=10.0)
        if user_error:
            print(f"[rank {rank}] error: {exc}", file=sys.stderr, flush=True)
        else:
            print(f"[rank {rank}] failed:\n{tb}", file=sys.stderr, end="", flush=True)
        for abort in self.on_failure:
            abort()
        return code
