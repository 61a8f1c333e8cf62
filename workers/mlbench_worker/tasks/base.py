"""What a task returns: how the run ended, for the ``run_stop`` event."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from mlbench_worker.wire import Progress, RunStop, Status


@dataclass(frozen=True)
class Outcome:
    """``success``: goal reached (or a goal-less task completed); ``aborted``: stopped before the
    goal (max_time or max_epochs); ``failed`` is produced by the runtime from an exception."""

    status: Status
    reason: str
    progress: Progress = field(default_factory=Progress)
    points: int | None = None  # task 0a: the (dtype, size) points measured

    def stop(self, exit_code: int) -> RunStop:
        """This rank's ``run_stop`` payload, with the exit status it returns."""
        figures = {f.name: getattr(self.progress, f.name) for f in dataclasses.fields(Progress)}
        return RunStop(
            status=self.status, reason=self.reason, exit_code=exit_code, points=self.points, **figures
        )
