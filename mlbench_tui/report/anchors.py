"""Published reference results the report shows beside a user's own (kept here, as data, only).

Each anchor says which task and goal it reached, in how long, on what hardware and software, and
where it was published, so a reader sees at once how far a configuration is from the baseline;
``Published`` holds MLBench's other published figures (2a's target loss, 4a's and 4b's cost per
run).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from mlbench_worker import wire


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
    Anchor("1a", wire.VAL_GLOBAL_PREC1, 80.0, 407.0, 1, "1x T4", "PyTorch 1.5", _N1, "MLBench"),
    Anchor("1a", wire.VAL_GLOBAL_PREC1, 80.0, 1191.0, 1, "1x T4", "TensorFlow", _N1, "MLBench"),
    Anchor("1a", wire.VAL_GLOBAL_PREC1, 80.0, 5895.0, 1, "3 vCPUs", "PyTorch 1.5", _N1, "MLBench"),
)


def anchors_for(task: str) -> tuple[Anchor, ...]:
    """The published references for ``task`` (an id such as ``1a``)."""
    return tuple(a for a in ANCHORS if a.task == task)


@dataclass(frozen=True)
class Published:
    """A published figure other than a time to accuracy: a target loss, or what one run cost."""

    task: str
    kind: Literal["loss", "cost"]
    value: float  # the loss, or US dollars per run
    workers: int
    hardware: str
    source: str
    detail: str = ""  # what else the source says about it (how much faster, where it ran)

    @property
    def label(self) -> str:
        """Short, for a line or a point in a figure."""
        if self.kind == "loss":
            return f"{self.source}'s target loss {self.value:g}"
        return f"{self.source} {self.workers}x {self.hardware}: ${self.value:g} per run"

    @property
    def description(self) -> str:
        """Whole, for the figure's notes."""
        what = (
            f"target loss {self.value:g}"
            if self.kind == "loss"
            else f"about ${self.value:g} per run on {self.workers} worker(s), {self.hardware}"
        )
        return f"{self.source}'s published result for task {self.task}: {what}" + (
            f" ({self.detail})" if self.detail else ""
        )


PUBLISHED: tuple[Published, ...] = (
    Published("2a", "loss", 0.2828, 1, "", "MLBench"),
    Published("4a", "cost", 10.0, 1, "T4", "MLBench", "one node"),
    Published("4a", "cost", 18.0, 4, "T4", "MLBench", "2.56x faster than one worker"),
    Published("4b", "cost", 5.5, 1, "T4", "MLBench", "one node"),
)


def published_for(task: str, kind: Literal["loss", "cost"]) -> tuple[Published, ...]:
    """The published target losses or costs per run for ``task``."""
    return tuple(p for p in PUBLISHED if p.task == task and p.kind == kind)
