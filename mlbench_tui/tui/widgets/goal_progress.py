"""Goal progress: the goal, the best value so far, a progress bar, elapsed time and an ETA."""

from __future__ import annotations

from rich.text import Text

from mlbench_tui.formatting import UNKNOWN, format_duration, format_elapsed
from mlbench_tui.results.table import value_text
from mlbench_tui.tui.goal import GoalStatus
from mlbench_tui.tui.widgets.bars import progress_bar
from mlbench_tui.tui.widgets.status_line import StatusLine


def goal_text(
    status: GoalStatus | None,
    *,
    state: str,
    elapsed_s: float | None,
    time_to_goal_s: float | None = None,
    width: int = 30,
) -> Text:
    """One line: ``val_global_Prec@1 >= 80  ████░░ 62%  best 49.6  latest 48.1  elapsed 3m10s  ETA ~2m``."""
    text = Text()
    if status is None:
        text.append("no goal", style="bold")
        text.append(" (this task measures, it does not train to a target)", style="grey50")
    else:
        op = "≤" if status.direction == "min" else "≥"
        text.append(f"{status.metric} {op} {status.target:g}  ", style="bold")
        bar_style = "green" if status.reached else "red" if state == "failed" else "yellow"
        text.append_text(progress_bar(status.fraction, width, style=bar_style))
        if status.best is not None:
            text.append("   best ", style="grey50")
            text.append(value_text(status.best), style="bold")
        if status.latest is not None:
            text.append("  latest ", style="grey50")
            text.append(value_text(status.latest))
        if status.reached:
            text.append("   ✔ reached", style="bold green")
            if time_to_goal_s is not None:
                text.append(f" in {format_duration(time_to_goal_s, unknown=UNKNOWN)} training", style="green")
    text.append("   elapsed ", style="grey50")
    text.append(format_elapsed(elapsed_s))
    if status is not None and not status.reached and state in ("running", "pending"):
        text.append("   ETA ", style="grey50")
        text.append("—" if status.eta_s is None else f"~{format_elapsed(status.eta_s)}")
    return text


class GoalProgress(StatusLine):
    """Shows ``goal_text``; the run screen calls ``show_goal`` whenever the run or its goal metric moves."""

    def show_goal(
        self,
        status: GoalStatus | None,
        *,
        state: str,
        elapsed_s: float | None,
        time_to_goal_s: float | None = None,
    ) -> None:
        width = max(10, min(30, (self.size.width or 100) // 5))
        self.show(
            goal_text(status, state=state, elapsed_s=elapsed_s, time_to_goal_s=time_to_goal_s, width=width)
        )
