"""Published reference results the report shows beside a user's own (kept here, as data, only).

Each anchor says which task and goal it reached, in how long, on what hardware and software, and
where it was published, so a reader sees at once how far a configuration is from the baseline.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Anchor:
    """One published time to accuracy."""

    task: str  # task id (1a)
    metric: str  # goal metric (val_global_Prec@1)
    target: float  # the goal it reached (80.0)
    time_to_accuracy_s: float
    workers: int
    hardware: str
    software: str
    machine: str
    source: str

    @property
    def label(self) -> str:
        """Short, for a line in a figure."""
        return f"{self.source} {self.hardware}, {self.software}: {self.time_to_accuracy_s:,.0f} s"

    @property
    def description(self) -> str:
        """Whole, for the figure's notes."""
        metric = self.metric.removeprefix("val_global_")
        return (
            f"{self.source}'s published baseline, {self.machine}, {self.hardware}, {self.software}, "
            f"{self.workers} worker(s): {self.time_to_accuracy_s:,.0f} s to {metric} {self.target:g}"
        )


_N1 = "GCP n1-standard-4"
ANCHORS: tuple[Anchor, ...] = (
    Anchor("1a", "val_global_Prec@1", 80.0, 407.0, 1, "1x T4", "PyTorch 1.5", _N1, "MLBench"),
    Anchor("1a", "val_global_Prec@1", 80.0, 1191.0, 1, "1x T4", "TensorFlow", _N1, "MLBench"),
    Anchor("1a", "val_global_Prec@1", 80.0, 5895.0, 1, "3 vCPUs", "PyTorch 1.5", _N1, "MLBench"),
)


def anchors_for(task: str) -> tuple[Anchor, ...]:
    """The published references for ``task`` (an id such as ``1a``)."""
    return tuple(a for a in ANCHORS if a.task == task)
