"""What a task returns: how the run ended, for the ``run_stop`` event."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Status = Literal["success", "aborted", "failed"]


@dataclass(frozen=True)
class Outcome:
    """``success``: goal reached (or a goal-less task completed); ``aborted``: stopped before the
    goal (max_time or max_epochs); ``failed`` is produced by the runtime from an exception."""

    status: Status
    reason: str
    details: dict[str, Any] = field(default_factory=dict)

    def payload(self) -> dict[str, Any]:
        """The ``run_stop`` event payload."""
        return {"status": self.status, "reason": self.reason, **self.details}
