"""The first screen of an empty store: what mlbench is and how to run the quick start.

It closes itself as soon as a run appears (launched from here, from the spec screen, or from
another terminal), so the user lands on the live runs table.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.screen import Screen
from textual.widgets import Footer, Static

from mlbench_tui.tui.actions import bindings
from mlbench_tui.tui.shell import Shell, shell_of
from mlbench_tui.tui.widgets.banner import ConnectionBanner

QUICKSTART = "specs/quickstart.yaml"


def quickstart_spec(base: Path) -> Path:
    """The quick start to launch: ``base``'s own (a specs directory or a checkout) if it has one,
    else the copy shipped in the package, so an installed wheel launches it from anywhere."""
    for candidate in (base / "quickstart.yaml", base / QUICKSTART):
        if candidate.is_file():
            return candidate
    return Path(str(resources.files("mlbench_tui.spec") / "quickstart.yaml"))


def welcome_text(specs_key: str, launch_key: str, server_url: str) -> Text:
    text = Text()
    text.append("No benchmark runs yet\n\n", style="bold")
    text.append("mlbench runs distributed training benchmarks from a spec file and shows them here live:\n")
    text.append("time to accuracy, the compute/communication split per rank, metrics and logs.\n\n")
    text.append("Run the quick start (2 ranks, gloo, small synthetic data, a few minutes on a laptop):\n\n")
    text.append("    mlbench apply specs/quickstart.yaml\n\n", style="bold green")
    text.append("in another terminal of the project checkout, or press ")
    text.append(f" {launch_key} ", style="bold reverse")
    text.append(" here to launch it. Or press ")
    text.append(f" {specs_key} ", style="bold reverse")
    text.append(" to browse, validate and launch any spec.\n\n")
    text.append("Other useful commands:\n", style="bold")
    text.append("    mlbench validate SPEC     check a spec (every problem, with line numbers)\n")
    text.append("    mlbench plan SPEC         the runs and exact commands, without running\n")
    text.append("    mlbench results           the results table of finished runs\n\n")
    text.append(
        f"This view follows the server at {server_url}; runs appear as soon as they start.", style="grey50"
    )
    return text


class FirstRunScreen(Screen[None]):
    """Shown by the runs screen when the store is empty."""

    SCOPES: ClassVar[tuple[str, ...]] = ("first",)
    BINDINGS: ClassVar = bindings("first")

    @property
    def mlbench(self) -> Shell:
        return shell_of(self)

    def compose(self) -> ComposeResult:
        yield ConnectionBanner(id="banner")
        with Vertical(id="welcome-box"):
            yield Static(
                welcome_text(
                    self.mlbench.key_for("app.specs"),
                    self.mlbench.key_for("first.quickstart"),
                    self.mlbench.server_url,
                ),
                id="welcome",
            )
        yield Footer()

    def on_mount(self) -> None:
        self.set_interval(0.5, self._check_runs)

    def _check_runs(self) -> None:
        """Leave as soon as the runs screen below has runs to show."""
        for screen in self.app.screen_stack:
            runs = getattr(screen, "runs", None)
            if isinstance(runs, dict) and runs and self.app.screen is self:
                self.app.pop_screen()
                return

    def action_quickstart(self) -> None:
        from mlbench_tui.tui.screens.confirm import ConfirmScreen
        from mlbench_tui.tui.screens.run_commands import launch

        base = (
            self.mlbench.spec_path
            if self.mlbench.spec_path and self.mlbench.spec_path.is_dir()
            else Path.cwd()
        )
        path = quickstart_spec(base)

        def answer(yes: bool | None) -> None:
            if yes:
                launch(self.mlbench, path)

        self.app.push_screen(
            ConfirmScreen(f"Launch {path}?", "Its runs start on this machine.", yes="Launch"), answer
        )
