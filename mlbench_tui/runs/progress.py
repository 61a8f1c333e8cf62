"""Live progress of a run for the terminal: phase, epoch, current metric against the goal, ETA.

``RunProgress`` folds what the store reports (latest metric values, events) into one short line;
``ProgressPrinter`` writes it to stderr as plain lines (when stderr is a file or pipe, only when
something changed) or as a compact line rewritten in place (when stderr is a TTY). No Textual.
"""

from __future__ import annotations

import shutil
import sys
import time
from dataclasses import dataclass, field
from typing import TextIO

from mlbench_worker import wire

from mlbench_tui.formatting import format_elapsed
from mlbench_tui.plan import GoalPlan
from mlbench_tui.results.goal import eta_s
from mlbench_tui.results.table import value_text
from mlbench_tui.spec.tasks import TaskSweep


@dataclass
class RunProgress:
    """What is known about one running run, updated from store reads."""

    name: str
    goal: GoalPlan | None
    max_epochs: float | None = None
    total_steps: int | None = None  # a sweep's points in all (0a: sizes x dtypes)
    sweep: TaskSweep | None = None
    state: str = "pending"
    phase: str = "starting"
    epoch: float | None = None
    metric_value: float | None = None
    history: list[tuple[float, float, float]] = field(default_factory=list)  # (t, epoch, value)
    started: float = field(default_factory=time.monotonic)
    epoch_times: list[float] = field(default_factory=list)
    done_steps: int = 0
    message: str | None = None
    eta_bounded: bool = False  # the ETA is the time to max_epochs, not to the goal
    note: str | None = None  # what the numbers mean, e.g. why a 0a run has no bandwidth

    def on_event(self, payload: wire.Payload | None, t: float) -> None:
        """Fold one event in (a stored record read by ``results.events.parse``; None: unknown kind)."""
        if isinstance(payload, wire.RunStart):
            self.phase = "training"
        elif isinstance(payload, wire.Environment) and self.phase == "starting":
            self.phase = "setting up"
        elif isinstance(payload, wire.EpochEnd):
            if payload.epoch is not None:
                self.epoch = float(payload.epoch)
            self.epoch_times.append(t)
            self.phase = "training"
        elif isinstance(payload, wire.GoalReached):
            self.phase = "goal reached"
        elif isinstance(payload, wire.RunStop):
            self.phase = f"stopped: {payload.status}"
        elif isinstance(payload, wire.RankFailed):
            self.phase = f"rank {payload.rank} failed"
        elif isinstance(payload, wire.AllreduceSweep) and self.sweep is not None and payload.latency_only:
            self.note = "latency only (1 rank moves no data)"

    def on_metric(self, name: str, value: float | None, epoch: float | None, t: float) -> None:
        if self.goal is not None and name == self.goal.metric and value is not None:
            self.metric_value = value
            if epoch is not None:
                self.history.append((t, epoch, value))
                self.epoch = max(self.epoch or 0.0, epoch)

    def eta_s(self) -> float | None:
        """Seconds to the goal at the pace of the last two validations, never past
        ``max_epochs`` (then ``eta_bounded``: the run ends there first); None until two
        validations have been seen."""
        self.eta_bounded = False
        if self.goal is None or len(self.history) < 2:
            return None
        eta = eta_s([(t, v) for t, _, v in self.history], self.goal.target, self.goal.direction, window=2)
        (t0, e0, _), (t1, e1, _) = self.history[-2], self.history[-1]
        if self.max_epochs is None or e1 <= e0 or t1 <= t0:
            return eta
        left_s = max(0.0, self.max_epochs - e1) * (t1 - t0) / (e1 - e0)
        if eta is None or eta > left_s:
            self.eta_bounded = True  # at this pace the goal is not in reach: the run ends at max_epochs
            return left_s
        return eta

    def line(self) -> str:
        parts = [self.name, self.state if self.state != "running" else self.phase]
        if self.epoch is not None:
            total = f"/{self.max_epochs:g}" if self.max_epochs else ""
            parts.append(f"epoch {self.epoch:g}{total}")
        if self.goal is not None:
            metric = self.goal.metric.removeprefix("val_global_")
            op = ">=" if self.goal.direction == "max" else "<="
            current = value_text(self.metric_value)
            parts.append(f"{metric} {current} (goal {op} {self.goal.target})")
        elif self.total_steps:
            parts.append(f"{self.done_steps}/{self.total_steps} {self.sweep.unit if self.sweep else 'steps'}")
        if self.note:
            parts.append(self.note)
        parts.append(f"elapsed {format_elapsed(time.monotonic() - self.started)}")
        eta = self.eta_s()
        if eta is not None and self.state == "running" and self.phase == "training":
            if self.eta_bounded:  # the goal is out of reach at this pace: when the run stops instead
                parts.append(f"goal not in reach at this pace: max_epochs in {format_elapsed(eta)}")
            else:
                parts.append(f"ETA to goal {format_elapsed(eta)}")
        if self.message:
            parts.append(self.message)
        return "  ".join(parts)


class ProgressPrinter:
    """Writes progress lines to a stream: rewritten in place on a TTY, appended otherwise."""

    def __init__(self, stream: TextIO | None = None, *, quiet: bool = False) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.quiet = quiet
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self._last: dict[str, str] = {}
        self._live: dict[str, str] = {}
        self._live_width = 0

    def note(self, text: str) -> None:
        """A message that stays (plan summary, run started/finished)."""
        if self.quiet:
            return
        self._clear_live()
        print(text, file=self.stream, flush=True)
        self._draw_live()

    def update(self, progress: RunProgress) -> None:
        """The current state of a running run: one live line on a TTY (every active run side by
        side), otherwise a plain line whenever something besides the clock changed."""
        if self.quiet:
            return
        line = progress.line()
        if self.tty:
            self._live[progress.name] = line
            self._clear_live()
            self._draw_live()
            return
        key = line.split("  elapsed ")[0]
        if self._last.get(progress.name) != key:
            self._last[progress.name] = key
            print(line, file=self.stream, flush=True)

    def done(self, progress: RunProgress) -> None:
        """A run ended: its final line stays, and it leaves the live line."""
        self._live.pop(progress.name, None)
        self.note(progress.line())

    def _draw_live(self) -> None:
        if not self.tty or not self._live:
            return
        width = max(20, shutil.get_terminal_size((120, 24)).columns - 1)
        text = " | ".join(self._live.values())[:width]
        self.stream.write(text)
        self.stream.flush()
        self._live_width = len(text)

    def _clear_live(self) -> None:
        if self.tty and self._live_width:
            self.stream.write("\r" + " " * self._live_width + "\r")
            self.stream.flush()
            self._live_width = 0
