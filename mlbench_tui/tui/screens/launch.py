"""What launching a spec will do, asked before it is done: start runs, skip the ones that already
succeeded unchanged (and offer to force them), or refuse and say why.

The preview is computed the way ``mlbench apply`` decides: the runs of the spec that already
succeeded with the same spec hash are skipped (``lifecycle.already_succeeded``, over the store's
runs read through the server), and a spec the target cannot place (``mlbench apply --dry-run``
refused it) is refused with that reason.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import ClassVar, Literal

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Static

from mlbench_tui.lifecycle import STARTS, UNCHANGED, StoredRun, already_succeeded

Outcome = Literal["start", "skip", "refuse"]
Choice = Literal["launch", "force"]


@dataclass(frozen=True)
class LaunchPreview:
    """What ``mlbench apply`` would do with a spec's runs: which start, which are skipped (their
    run name -> the stored run id that succeeded), or why it refuses them all."""

    starts: tuple[str, ...] = ()
    skipped: dict[str, str] = field(default_factory=dict)
    refused: str | None = None

    @property
    def outcome(self) -> Outcome:
        if self.refused is not None:
            return "refuse"
        return "start" if self.starts else "skip"

    def action(self, name: str) -> str:
        """What apply does with one run, for the Plan tab."""
        if self.refused is not None:
            return "refused (see above)"
        skipped = self.skipped.get(name)
        return f"skip: {UNCHANGED} ({skipped})" if skipped else "start"

    def summary(self) -> str:
        """One line: ``2 run(s) start, 1 skipped (unchanged, already succeeded)``."""
        if self.refused is not None:
            return f"apply refuses it: {self.refused}"
        parts = [f"{len(self.starts)} run(s) start"] if self.starts else []
        if self.skipped:
            parts.append(f"{len(self.skipped)} skipped ({UNCHANGED})")
        return ", ".join(parts) if self.starts else f"nothing starts: every run {UNCHANGED}"


def preview(
    plans: Iterable[tuple[str, str]], runs: Iterable[StoredRun], refused: str | None
) -> LaunchPreview:
    """The preview of plans (run name, spec hash) against the store's ``runs``."""
    plans = list(plans)
    done = already_succeeded(plans, runs)
    skipped = {name: done[name].id for name, _ in plans if name in done}
    starts = tuple(name for name, _ in plans if name not in done)
    return LaunchPreview(starts, skipped, refused)


def applied(output: str, spec: str) -> str:
    """What ``mlbench apply --detach`` reported it did, as one line for a notification."""
    started = sum(1 for line in output.splitlines() if line.rstrip().endswith(STARTS))
    skipped = sum(1 for line in output.splitlines() if line.rstrip().endswith(UNCHANGED))
    if started == 0 and (skipped or "nothing to do" in output):
        return f"apply did nothing for {spec}: every run already succeeded unchanged (force runs them again)"
    text = f"apply started {started} run(s) of {spec}"
    return text + (f"; {skipped} skipped ({UNCHANGED})" if skipped else "")


class LaunchScreen(ModalScreen[Choice | None]):
    """Launch a spec: Launch (y), Force (f: run the unchanged ones again too), or No (n)."""

    BINDINGS: ClassVar = [
        Binding("y", "answer('launch')", "Launch", id="launch.yes"),
        Binding("f", "answer('force')", "Force", id="launch.force"),
        Binding("n,escape", "answer(None)", "No", id="launch.no"),
    ]

    def __init__(self, spec: str, preview: LaunchPreview, runs: Sequence[str] = ()) -> None:
        super().__init__()
        self.spec = spec
        self.preview = preview
        self.runs = runs

    def compose(self) -> ComposeResult:
        outcome = self.preview.outcome
        question = {
            "start": f"Launch {self.spec}?",
            "skip": f"{self.spec}: nothing to launch",
            "refuse": f"{self.spec} cannot be launched here",
        }[outcome]
        with Vertical(id="confirm-box"):
            yield Static(question, id="confirm-question")
            yield Static(self._detail(), id="confirm-detail")
            with Horizontal(id="confirm-buttons"):
                if outcome == "start":
                    yield Button("Launch (y)", variant="error", id="launch-yes")
                if outcome != "refuse" and self.preview.skipped:
                    yield Button("Force all (f)", variant="warning", id="launch-force")
                yield Button("No (n)" if outcome != "refuse" else "Close (n)", id="launch-no")

    def _detail(self) -> str:
        p = self.preview
        if p.outcome == "refuse":
            return f"mlbench apply refuses it: {p.refused}"
        lines = [f"{name}: starts now (mlbench apply --detach)" for name in p.starts]
        lines += [f"{name}: skipped, {UNCHANGED}" for name in p.skipped]  # its run: the Plan tab
        if p.skipped:
            lines.append("Force runs the skipped ones again too (--force).")
        return "\n".join(lines)

    def on_mount(self) -> None:
        self.query_one("#launch-no", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        answers: dict[str | None, Choice | None] = {"launch-yes": "launch", "launch-force": "force"}
        self.dismiss(answers.get(event.button.id))

    def action_answer(self, answer: Choice | None) -> None:
        if answer == "launch" and self.preview.outcome != "start":
            return
        if answer == "force" and (self.preview.outcome == "refuse" or not self.preview.skipped):
            return
        self.dismiss(answer)
