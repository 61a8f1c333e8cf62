"""Choose which metrics the run screen charts: a checklist of every metric the run reported."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import SelectionList, Static

MAX_CHARTS = 6


class MetricPickerScreen(ModalScreen[list[str] | None]):
    """Space toggles a metric, enter applies, escape leaves the charts as they were."""

    BINDINGS: ClassVar = [
        Binding("enter", "apply", "Apply", id="picker.apply", priority=True),
        Binding("escape", "dismiss_picker", "Cancel", id="picker.cancel"),
    ]

    def __init__(self, names: list[str], chosen: list[str]) -> None:
        super().__init__()
        self.names = names
        self.chosen = list(chosen)

    def compose(self) -> ComposeResult:
        with Vertical(id="picker-box"):
            yield Static(
                f"Charts (up to {MAX_CHARTS}): space toggles, enter applies, esc cancels", id="picker-help"
            )
            yield SelectionList[str](
                *((name, name, name in self.chosen) for name in sorted(set(self.names) | set(self.chosen))),
                id="picker",
            )

    def on_mount(self) -> None:
        self.query_one(SelectionList).focus()

    def action_apply(self) -> None:
        selected = list(self.query_one(SelectionList).selected)
        # Keep the previous order for metrics that stay, then add the new ones.
        ordered = [m for m in self.chosen if m in selected] + [m for m in selected if m not in self.chosen]
        if len(ordered) > MAX_CHARTS:
            self.notify(f"at most {MAX_CHARTS} charts; keeping the first {MAX_CHARTS}", severity="warning")
            ordered = ordered[:MAX_CHARTS]
        self.dismiss(ordered)

    def action_dismiss_picker(self) -> None:
        self.dismiss(None)
